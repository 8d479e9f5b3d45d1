"""Compare recipes from the results store: per metric and point, baseline vs each variant.

`compare_recipes(store, ["base", "variant", ...])` selects runs with status `ok` and a verified
configuration, refuses runs that measured different things (`bench_key`) or ran on different GPUs
(`gpu_key`), turns each run into one observation per (metric, point) (the mean of that run's samples
there: run-to-run spread is the noise that matters), and hands baseline and variant observations to
`toolkit.stats.compare_values`.

`diff_provenance(run_a, run_b)` lists what else differed between two runs (versions, trees, flags,
env vars, arch list): what a "version gain" is made of.
"""

from __future__ import annotations

import json
import re
import shlex
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from rich.table import Table
from rich.text import Text

from toolkit import stats
from toolkit.errors import BadInput
from toolkit.store import RunRow, Store, comparable_bench_params


class MissingResults(BadInput):
    """Some recipes have no usable (ok + verified) runs. `recipes` lists them, in the order given."""

    def __init__(self, recipes: Sequence[str], detail: str = "") -> None:
        self.recipes = list(recipes)
        names = ", ".join(self.recipes)
        msg = f"no ok, verified results for recipe{'s' if len(self.recipes) > 1 else ''} {names}"
        super().__init__(msg + (f" ({detail})" if detail else ""),
                         hint="run them first, or compare with --run")


@dataclass(frozen=True)
class CompareRow:
    """One line of a comparison: variant `recipe` against `baseline` for `metric` at `point`."""

    baseline: str
    recipe: str
    metric: str
    unit: str
    point: int
    point_kind: str
    n_base: int
    n_variant: int
    base_mean: float
    base_median: float
    base_std: float
    variant_mean: float
    variant_median: float
    variant_std: float
    ratio: float  # variant / baseline (means, or medians with stat="median")
    ci_low: float  # confidence interval of `ratio`
    ci_high: float
    p_value: float  # Mann-Whitney U, two-sided
    verdict: str  # faster | slower | not significant | too few repeats (higher/lower: unknown metric)
    speedup: float  # > 1: variant better (direction-aware)
    text: str  # pyperf-like one-liner
    higher_is_better: bool | None
    base_runs: tuple[str, ...] = ()
    variant_runs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Selection:
    """The runs chosen for a comparison, per recipe (in the order given)."""

    recipes: tuple[str, ...]
    runs: dict  # recipe -> list[RunRow]
    bench_key: str | None
    gpu_key: str


def _usable(run: RunRow, require_verified: bool) -> bool:
    return run.status == "ok" and (run.config_verified is True or not require_verified)


def _describe_bench_diff(a: RunRow, b: RunRow) -> str:
    pa = comparable_bench_params(a.bench_driver, a.bench_params)
    pb = comparable_bench_params(b.bench_driver, b.bench_params)
    diffs = []
    for k in sorted(set(pa) | set(pb), key=lambda k: (k != "driver", k)):
        va, vb = pa.get(k, "(unset)"), pb.get(k, "(unset)")
        if va != vb:
            diffs.append(f"{k} {_short(va)} vs {_short(vb)}")
    if not diffs:
        return f"bench_key {(a.bench_key or '?')[:12]} vs {(b.bench_key or '?')[:12]}"
    return ", ".join(diffs)


def _short(v: Any, width: int = 40) -> str:
    s = v if isinstance(v, str) else _jsonish(v)
    return s if len(s) <= width else s[: width - 3] + "..."


def _jsonish(v: Any) -> str:
    return json.dumps(v, sort_keys=True, separators=(",", ":"), default=str)


def select_runs(store: Store, recipes: Sequence[str], *, group_id: str | None = None,
                bench_key: str | None = None, require_verified: bool = True,
                latest_env_only: bool = True) -> Selection:
    """Usable runs per recipe; raises MissingResults, or BadInput on a bench/GPU mismatch."""
    recipes = list(dict.fromkeys(recipes))
    if len(recipes) < 2:
        raise BadInput("compare needs at least two recipes (the first is the baseline)")
    rows = store.runs(recipe=recipes, status="ok", group_id=group_id, bench_key=bench_key)
    by_recipe: dict[str, list[RunRow]] = {r: [] for r in recipes}
    for run in rows:
        if _usable(run, require_verified):
            by_recipe[run.recipe].append(run)
    if latest_env_only:
        # A recipe whose patches or flags changed since some of its runs has a new env key: only
        # the newest build's runs describe the recipe as it is now; older ones are history.
        for r, runs in by_recipe.items():
            if runs:
                newest = max(runs, key=lambda x: (x.started_at or "", x.run_id)).env_key
                by_recipe[r] = [x for x in runs if x.env_key == newest]
    missing = [r for r in recipes if not by_recipe[r]]
    if missing:
        unverified = [r for r in missing if any(x.recipe == r for x in rows)]
        detail = f"{', '.join(unverified)}: configuration not verified" if unverified else ""
        raise MissingResults(missing, detail)
    base = recipes[0]
    ref = by_recipe[base][0]
    for r in recipes:
        for run in by_recipe[r]:
            if run.bench_key != ref.bench_key:
                raise BadInput(
                    f"cannot compare: different benchmark for {base} (run {ref.run_id[:8]}) and "
                    f"{r} (run {run.run_id[:8]}): {_describe_bench_diff(ref, run)}",
                    hint="select one benchmark with --group or re-run with the same parameters")
    for r in recipes:
        for run in by_recipe[r]:
            if run.gpu_key != ref.gpu_key:
                raise BadInput(
                    f"cannot compare: {base} ran on {ref.gpu_key} (run {ref.run_id[:8]}), "
                    f"{r} on {run.gpu_key} (run {run.run_id[:8]})")
    return Selection(tuple(recipes), by_recipe, ref.bench_key, ref.gpu_key)


def observations(store: Store, runs: Iterable[RunRow]) -> dict[tuple[str, int, str], dict]:
    """(metric, point, point_kind) -> {"unit", "values" (one per run and repeat), "runs"}.

    Samples of one run at the same metric, point and repeat are averaged into one value.
    """
    runs = list(runs)
    acc: dict[tuple, dict[tuple[str, int], list[float]]] = defaultdict(lambda: defaultdict(list))
    units: dict[tuple, str] = {}
    for s in store.samples([r.run_id for r in runs]):
        key = (s.metric, s.point, s.point_kind)
        acc[key][(s.run_id, s.repeat)].append(s.value)
        units.setdefault(key, s.unit)
    out = {}
    for key, per in acc.items():
        values = [sum(v) / len(v) for v in per.values()]
        out[key] = {"unit": units[key], "values": values,
                    "runs": tuple(dict.fromkeys(rid for rid, _ in per))}
    return out


def compare_recipes(store: Store, recipes: Sequence[str], *, metrics: Sequence[str] | None = None,
                    points: Sequence[int] | None = None, group_id: str | None = None,
                    bench_key: str | None = None, require_verified: bool = True,
                    stat: str = "mean", min_repeats: int = stats.DEFAULT_MIN_REPEATS,
                    alpha: float = stats.DEFAULT_ALPHA,
                    min_effect: float = stats.DEFAULT_MIN_EFFECT) -> list[CompareRow]:
    """Rows for every variant (recipes[1:]) against the baseline (recipes[0]), per metric and point
    measured by both, sorted by variant, metric, point."""
    sel = select_runs(store, recipes, group_id=group_id, bench_key=bench_key,
                      require_verified=require_verified)
    base = sel.recipes[0]
    obs = {r: observations(store, sel.runs[r]) for r in sel.recipes}
    rows: list[CompareRow] = []
    for variant in sel.recipes[1:]:
        for key in sorted(set(obs[base]) & set(obs[variant])):
            metric, point, kind = key
            if metrics is not None and metric not in metrics:
                continue
            if points is not None and point not in points:
                continue
            a, b = obs[base][key], obs[variant][key]
            unit = a["unit"] or b["unit"]
            hib = stats.higher_is_better(metric, unit)
            c = stats.compare_values(a["values"], b["values"], higher_is_better=hib, unit=unit,
                                     stat=stat, min_repeats=min_repeats, alpha=alpha,
                                     min_effect=min_effect)
            rows.append(CompareRow(
                baseline=base, recipe=variant, metric=metric, unit=unit, point=point, point_kind=kind,
                n_base=c.n_a, n_variant=c.n_b, base_mean=c.mean_a, base_median=c.median_a,
                base_std=c.std_a, variant_mean=c.mean_b, variant_median=c.median_b,
                variant_std=c.std_b, ratio=c.ratio, ci_low=c.ci_low, ci_high=c.ci_high,
                p_value=c.p_value, verdict=c.verdict, speedup=c.speedup,
                text=stats.format_comparison(c), higher_is_better=hib,
                base_runs=a["runs"], variant_runs=b["runs"]))
    return rows


def missing_recipes(store: Store, recipes: Sequence[str], *, group_id: str | None = None,
                    require_verified: bool = True) -> list[str]:
    """Recipes (in the order given) without a single ok (and verified) run: what `--run` measures."""
    have = {r.recipe for r in store.runs(recipe=list(recipes), status="ok", group_id=group_id)
            if _usable(r, require_verified)}
    return [r for r in dict.fromkeys(recipes) if r not in have]


_VERDICT_STYLE = {stats.FASTER: "bold green", stats.SLOWER: "bold red",
                  stats.NOT_SIGNIFICANT: "dim", stats.TOO_FEW: "yellow"}


def render_compare(rows: Sequence[CompareRow], *, title: str | None = None) -> Table:
    """A rich Table: one line per (variant, metric, point), pyperf-style figures and verdict."""
    base = rows[0].baseline if rows else ""
    table = Table(title=title or (f"compared with {base}" if base else "comparison"))
    table.add_column("variant")
    table.add_column("metric")
    table.add_column("point", justify="right")
    table.add_column(f"{base or 'baseline'}", justify="right")
    table.add_column("variant value", justify="right")
    table.add_column("speedup [95% CI]", justify="right")
    table.add_column("p", justify="right")
    table.add_column("n", justify="right")
    table.add_column("verdict")
    for r in rows:
        lo, hi = (r.ci_low, r.ci_high)
        if r.higher_is_better is False:
            lo, hi = (1.0 / hi if hi else float("inf")), (1.0 / lo if lo else float("inf"))
        ci = f"[{lo:.2f}, {hi:.2f}]" if lo == lo and hi == hi else ""
        table.add_row(
            r.recipe, r.metric, f"{'bs' if r.point_kind == 'batch' else 'c'}={r.point}",
            stats.format_mean_std(r.base_mean, r.base_std, r.unit),
            stats.format_mean_std(r.variant_mean, r.variant_std, r.unit),
            f"{r.speedup:.3f}x {ci}", f"{r.p_value:.3f}", f"{r.n_base}/{r.n_variant}",
            Text(r.verdict, style=_VERDICT_STYLE.get(r.verdict, "")))
    return table


# -- provenance ---------------------------------------------------------------------------------

def _argv_options(argv: Sequence[str]) -> tuple[list[str], dict[str, str | None]]:
    """Split an argv into positionals and {--flag: value or None}."""
    pos: list[str] = []
    opts: dict[str, str | None] = {}
    items = [str(x) for x in argv]
    i = 0
    while i < len(items):
        tok = items[i]
        if tok.startswith("--") and len(tok) > 2:
            if "=" in tok:
                k, v = tok.split("=", 1)
                opts[k] = v
            elif i + 1 < len(items) and not items[i + 1].startswith("--"):
                opts[tok] = items[i + 1]
                i += 1
            else:
                opts[tok] = None
        else:
            pos.append(tok)
        i += 1
    return pos, opts


def _fmt(v: Any) -> str:
    if v is None:
        return "(unset)"
    return v if isinstance(v, str) else _jsonish(v)


_VOLATILE_NAME = re.compile(r"(^|_)(pid|pids|port)$")
_ENV_PATH = re.compile(r"/envs/[0-9a-f]{16}/")


def _normal(v: Any) -> Any:
    """Values that differ only by the env directory they point into are the same value."""
    return _ENV_PATH.sub("/envs/<key>/", v) if isinstance(v, str) else v


def _dict_diff(label: str, a: dict, b: dict, *, ignore: Iterable[str] = ()) -> list[str]:
    out = []
    skip = set(ignore)
    for k in sorted(set(a) | set(b)):
        if k in skip or _VOLATILE_NAME.search(k):
            continue
        va, vb = a.get(k), b.get(k)
        if _normal(va) != _normal(vb):
            out.append(f"{label} {k}: {_fmt(va)} -> {_fmt(vb)}")
    return out


# /server_info fields that change from launch to launch without changing the configuration.
_VOLATILE_SERVER_INFO = frozenset({"port", "host", "pid", "nccl_port", "dist_init_addr", "log_dir",
                                   "served_model_name", "internal_states", "last_gen_throughput",
                                   "dp_controller_port", "metrics_port", "file_storage_path"})


def diff_provenance(run_a: RunRow, run_b: RunRow) -> list[str]:
    """One line per difference between two runs' provenance (a -> b): package versions, tree
    hashes, server flags, /server_info, env vars, arch list, env key, machine. Empty when the runs
    are alike in everything but their measurements."""
    out: list[str] = []
    for label, attr in (("sglang", "sglang_version"), ("flashinfer", "flashinfer_version")):
        va, vb = getattr(run_a, attr), getattr(run_b, attr)
        if va != vb:
            out.append(f"{label} version: {_fmt(va)} -> {_fmt(vb)}")
    for src in sorted(set(run_a.tree_hashes) | set(run_b.tree_hashes)):
        ha, hb = run_a.tree_hashes.get(src), run_b.tree_hashes.get(src)
        if ha != hb:
            out.append(f"tree {src}: {(ha or '(none)')[:12]} -> {(hb or '(none)')[:12]}")
    if list(run_a.arch_list) != list(run_b.arch_list):
        out.append(f"arch list: {' '.join(map(str, run_a.arch_list)) or '(none)'} -> "
                   f"{' '.join(map(str, run_b.arch_list)) or '(none)'}")
    pos_a, opt_a = _argv_options(run_a.server_argv)
    pos_b, opt_b = _argv_options(run_b.server_argv)
    if pos_a != pos_b:
        out.append(f"server command: {shlex.join(pos_a)} -> {shlex.join(pos_b)}")
    for k in sorted(set(opt_a) | set(opt_b)):
        if k in ("--port", "--host"):  # chosen per launch
            continue
        if k not in opt_b:
            out.append(f"server flag removed: {k}" + (f" {opt_a[k]}" if opt_a[k] is not None else ""))
        elif k not in opt_a:
            out.append(f"server flag added: {k}" + (f" {opt_b[k]}" if opt_b[k] is not None else ""))
        elif opt_a[k] != opt_b[k]:
            out.append(f"server flag {k}: {opt_a[k]} -> {opt_b[k]}")
    out += _dict_diff("server_info", run_a.server_info, run_b.server_info, ignore=_VOLATILE_SERVER_INFO)
    out += _dict_diff("env", run_a.env_vars, run_b.env_vars)
    if run_a.env_key != run_b.env_key:
        out.append(f"env key: {(run_a.env_key or '(none)')[:16]} -> {(run_b.env_key or '(none)')[:16]}")
    if run_a.bench_key != run_b.bench_key:
        out.append(f"benchmark: {_describe_bench_diff(run_a, run_b)}")
    if run_a.gpu_key != run_b.gpu_key:
        out.append(f"GPUs: {run_a.gpu_key} -> {run_b.gpu_key}")
    for k in ("driver", "cuda", "driver_version", "cuda_version"):
        va, vb = run_a.machine.get(k), run_b.machine.get(k)
        if va != vb and (va is not None or vb is not None):
            out.append(f"machine {k}: {_fmt(va)} -> {_fmt(vb)}")
    if run_a.host != run_b.host and run_a.host and run_b.host:
        out.append(f"host: {run_a.host} -> {run_b.host}")
    return out
