"""Compare recipes from the results store: per metric and point, baseline vs each variant.

`compare_recipes(store, ["base", "variant", ...])` takes the runs `toolkit.analysis.selection`
chooses (one benchmark, one GPU kind, each recipe's newest env, one sweep when there is one), reduces
them to one value per run and (metric, point) (`selection.reduce`: run-to-run spread is the noise
that matters), and hands baseline and variant values to `toolkit.analysis.stats.compare_values`.

`diff_provenance(run_a, run_b)` lists what else differed between two runs (versions, trees, flags,
env vars, arch list): what a "version gain" is made of.
"""

from __future__ import annotations

import math

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from toolkit.results import metrics as registry
from toolkit.analysis import sequential as seq, stats
from toolkit.analysis.selection import (Criteria, MissingResults, Selection,  # noqa: F401 (re-exported)
                                        describe_bench_diff, reduce, select)
from toolkit.errors import BadInput
from toolkit.results.metrics import MetricSpec
from toolkit.results.records import RunRow
from toolkit.results.store import Store


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
    ratio: float  # variant / baseline (means, or medians with stat="median"; of geometric means where the sequential verdict decided)
    ci_low: float  # confidence interval of `ratio`
    ci_high: float
    p_value: float  # Mann-Whitney U, two-sided; nan where the sequential verdict decided the row (its interval in ci_*)
    verdict: str  # faster | slower | not significant | too few repeats (higher/lower: unknown metric)
    speedup: float  # > 1: variant better (direction-aware)
    text: str  # pyperf-like one-liner
    higher_is_better: bool | None
    base_runs: tuple[str, ...] = ()
    variant_runs: tuple[str, ...] = ()
    sequential: str | None = None  # the sequential verdict's text when it gave `verdict` (too few for the fixed one)
    # the pair was launched until settled (`run`/`sweep` without --repeats): the design recorded with its
    # runs (toolkit.analysis.sequential.Design.record), which judged every row of it
    launched_under: dict | None = None
    launches_each: int | None = None  # the sequential verdict's look (launches each) where it decided the row


def _jsonish(v: Any) -> str:
    return json.dumps(v, sort_keys=True, separators=(",", ":"), default=str)


def _wanted(metric: str, point: int, specs: Sequence[MetricSpec] | None, points: Sequence[int] | None) -> bool:
    if points is not None and point not in points:
        return False
    return specs is None or any(s.metric == metric and s.point in (None, point) for s in specs)


def _as_specs(metrics_: Sequence[str | MetricSpec] | None) -> list[MetricSpec] | None:
    if metrics_ is None:
        return None
    return [m if isinstance(m, MetricSpec) else registry.parse_spec(m) for m in metrics_]


def compare_selection(store: Store, sel: Selection, *, metrics: Sequence[str | MetricSpec] | None = None,
                      points: Sequence[int] | None = None, stat: str = "mean",
                      min_repeats: int = stats.DEFAULT_MIN_REPEATS, alpha: float = stats.DEFAULT_ALPHA,
                      min_effect: float = stats.DEFAULT_MIN_EFFECT, sequential=None,
                      zone: float | None = None) -> list[CompareRow]:
    """Rows for every variant (sel.recipes[1:]) against the baseline (sel.recipes[0]), per metric
    (`NAME[@POINT]` specs; None: all) and point measured by both, sorted by variant, metric, point.
    `sequential` (a `toolkit.analysis.sequential.Design`): a row too small for the fixed verdict
    takes the sequential one when that is settled (`CompareRow.sequential` says so). A pair launched
    until settled (`sel.launched_under`) is judged at every row by the design its runs recorded, over
    the sequences its launching counted (`sel.pair`), at any number of launches: the verdicts `run`
    printed (`zone`: the command line's --min-effect, which replaces the recorded indifference zone)."""
    import dataclasses

    specs = _as_specs(metrics)
    base = sel.recipes[0]
    rows: list[CompareRow] = []
    for variant in sel.recipes[1:]:  # each pair within one sweep where one measured both
        ids_a, ids_b = sel.pair(base, variant)
        launched = sel.launched_under(base, variant)
        apart, left = None, ""  # a launched pair whose sides share no campaign; runs left out: toolkit.analysis.campaigns
        if launched is not None:
            ids_a, ids_b, apart, left = launched_together(store, base, variant, ids_a, ids_b)
        if launched is not None and zone is not None:
            launched = dataclasses.replace(launched, min_effect=zone)
        design = launched if launched is not None else sequential
        obs_a, obs_b = reduce(store.samples(ids_a), ids_a), reduce(store.samples(ids_b), ids_b)
        for key in sorted(set(obs_a) & set(obs_b)):
            metric, point, kind = key
            if not _wanted(metric, point, specs, points):
                continue
            a, b = obs_a[key], obs_b[key]
            unit = a.unit or b.unit
            hib = registry.higher_is_better(metric)
            c = stats.compare_values(a.values, b.values, higher_is_better=hib, unit=unit,
                                     stat=stat, min_repeats=min_repeats, alpha=alpha,
                                     min_effect=min_effect)
            verdict, text, seq_text, each = c.verdict, stats.format_comparison(c), None, None
            ci, p = (c.ci_low, c.ci_high), c.p_value
            if (c.verdict == stats.TOO_FEW or launched is not None) and design is not None:
                settled = sequential_row(a.values, b.values, hib, design, stored_counts(store, a.runs, b.runs),
                                         launched=launched is not None)
                if settled is not None and apart:  # never a faster/slower from a shift between campaigns
                    settled = dataclasses.replace(settled, verdict=seq.UNSETTLED, futile=True)
                if settled is not None:  # the row shows the values, interval and verdict of the rule that decided it
                    verdict, text = seq.verdict_word(settled), settled.text + (f" ({apart})" if apart else left)
                    seq_text, each = text, settled.n
                    ci, p = (settled.low, settled.high), math.nan
                    # the launches its look used (the first n each, oldest first; later ones are another
                    # point's or a later campaign's), and its estimate, which its interval holds
                    a, b = _first(a, each), _first(b, each)
                    c = dataclasses.replace(stats.compare_values(a.values, b.values, higher_is_better=hib, unit=unit,
                                                                 stat=stat, min_effect=min_effect),
                                            ratio=settled.ratio)
                elif launched is not None and seq.unjudgeable(a.values, b.values):
                    c = seq.not_judged(c)
                    verdict, text, ci, p = c.verdict, stats.format_comparison(c), (math.nan, math.nan), math.nan
            rows.append(CompareRow(
                baseline=base, recipe=variant, metric=metric, unit=unit, point=point, point_kind=kind,
                n_base=c.n_a, n_variant=c.n_b, base_mean=c.mean_a, base_median=c.median_a,
                base_std=c.std_a, variant_mean=c.mean_b, variant_median=c.median_b,
                variant_std=c.std_b, ratio=c.ratio, ci_low=ci[0], ci_high=ci[1],
                p_value=p, verdict=verdict, speedup=c.speedup,
                text=text, higher_is_better=hib,
                base_runs=a.runs, variant_runs=b.runs, sequential=seq_text,
                launched_under=launched.record() if launched is not None and seq_text is not None else None,
                launches_each=each))
    return rows


def _first(obs, n: int):
    """An Observation cut to its first n values (and runs)."""
    import dataclasses

    return dataclasses.replace(obs, values=tuple(obs.values[:n]), runs=tuple(obs.runs[:n]))


def launched_together(store: Store, base: str, variant: str, ids_a, ids_b):
    """(base runs, variant runs, None, what the text adds): the runs of a launched pair made in a campaign
    of both sides, as `run` judged them (toolkit.analysis.campaigns), and the others named; when the sides
    share no campaign, all of them and a qualifier naming the campaigns, with which the row claims no
    faster/slower."""
    from toolkit.analysis import campaigns

    sp = campaigns.split_ids(store, ids_a, ids_b)
    rows = {r.run_id: r for r in store.runs(run_ids=[*ids_a, *ids_b])} if ids_a or ids_b else {}
    if sp.a and sp.b:
        return list(sp.a), list(sp.b), None, campaigns.qualifier(campaigns.left_out(base, variant, sp, rows))
    sides = [campaigns.describe(name, [rows[i] for i in ids if i in rows], [])
             for name, ids in ((base, ids_a), (variant, ids_b)) if ids]
    return list(ids_a), list(ids_b), ("not launched together, no faster/slower across campaigns: " + "; ".join(
        x.replace(" not judged against launches made since", "") for x in sides)), ""


def sequential_row(a: Sequence[float], b: Sequence[float], hib: bool | None, design, stored=(0, 0), *,
                   launched: bool = False):
    """The sequential verdict (toolkit.analysis.sequential, launch order) of a pair too small for
    the fixed one, when it has stopped (a `run` that launched until settled stops at 2 launches
    each, its verdict keeps its rate at that look; or it stopped unsettled as futile); None otherwise.
    `launched`: the pair was launched under `design`, whose verdict stands at any look, stopped or
    not. `stored`: as `run` counts it (`stored_counts`), so the stored spread it pooled is pooled
    here too."""
    if not a or not b or any(v <= 0 for v in (*a, *b)):
        return None
    v = seq.verdict(list(a), list(b), higher_is_better=hib, design=design, stored=stored)
    return v if launched or seq.stopped(v) else None


def sequential_legends(rows: Sequence[CompareRow], design) -> list[str]:
    """The legend line of each sequential design that judged rows: the one a pair was launched under
    ("pairs launched until settled: ..."), and `design` for rows too small for the fixed rule."""
    launched = dict.fromkeys(seq.Design.from_record(r.launched_under) for r in rows if r.launched_under)
    out = ["pairs launched until settled (every row, the design their runs recorded): " + seq.legend(d)
           for d in launched]
    if any(r.sequential and not r.launched_under for r in rows):
        out.append(f"rows with {stats.too_few_rows()} whose sequential verdict has stopped (the others: too few "
                   "repeats): " + seq.legend(design))
    if out:
        out.append("speedup [interval]: a row the fixed rule decided shows its 95% CI (p given), a sequential row "
                   "('seq.') its confidence sequence at its look, an 'equal within' row its two one-sided bounds "
                   "(TOST, each at alpha: a 90% interval)")
    return out


def spread_flags_of(store: Store, rows: Sequence[CompareRow]) -> list[dict]:
    """toolkit.analysis.spread_flag over the recipes' per-launch values of the rows' headline throughput,
    at each point (the runs each row judged): a configuration far noisier than its peers, as `run` flags it."""
    metric = next((m for m in registry.throughput_headline() if any(r.metric == m for r in rows)), None)
    out = []
    for point in sorted({r.point for r in rows if r.metric == metric}):
        ids: dict[str, list[str]] = {}
        for r in (r for r in rows if r.metric == metric and r.point == point):
            ids.setdefault(r.baseline, list(r.base_runs))
            ids.setdefault(r.recipe, list(r.variant_runs))
        out += flags_at(store, metric, point, ids)
    return out


def flags_at(store: Store, metric: str, point: int, runs: dict[str, Sequence[str]]) -> list[dict]:
    """toolkit.analysis.spread_flag over each recipe's per-launch values (`runs`: recipe -> run ids) of
    `metric` at `point`, as dicts with the metric and point (what `run` and `compare` print)."""
    from toolkit.analysis import spread_flag
    from toolkit.analysis.selection import values_at

    values = {name: values_at(store.samples(list(rs), metric=metric), metric, point, list(rs)) for name, rs in runs.items()}
    return [{**f.to_dict(), "metric": metric, "point": point} for f in spread_flag.flags(values)]


def fixed_rule_used(rows: Sequence[CompareRow]) -> bool:
    """Whether any row took the fixed rule's verdict (its legend is then printed)."""
    return any(not r.sequential and r.verdict != stats.NOT_JUDGED for r in rows)


def stored_counts(store: Store, runs_a: Sequence[str], runs_b: Sequence[str]) -> tuple[int, int]:
    """The leading runs of each side that started before the other side's first
    (toolkit.analysis.noise_prior.stored_before), as `run` counts them."""
    from toolkit.analysis import noise_prior

    ids = [*runs_a, *runs_b]
    at = {r.run_id: r.started_at for r in store.runs(run_ids=ids)} if ids else {}
    return noise_prior.stored_before([at.get(r) for r in runs_a], [at.get(r) for r in runs_b])


def compare_recipes(store: Store, recipes: Sequence[str], *, metrics: Sequence[str | MetricSpec] | None = None,
                    points: Sequence[int] | None = None, criteria: Criteria | None = None,
                    group_id: str | None = None, require_verified: bool = True, current: dict | None = None,
                    **kw: Any) -> list[CompareRow]:
    """`compare_selection` over `select(store, recipes, criteria)` (recipes[0] is the baseline)."""
    if len(dict.fromkeys(recipes)) < 2:
        raise BadInput("compare needs at least two recipes (the first is the baseline)")
    if criteria is None:
        criteria = Criteria(group_id=group_id, unverified=not require_verified)
    return compare_selection(store, select(store, recipes, criteria, current=current), metrics=metrics,
                             points=points, **kw)


def missing_recipes(store: Store, recipes: Sequence[str], criteria: Criteria = Criteria(),
                    current: dict | None = None) -> list[str]:
    """Recipes (in the order given) without a single usable run of their current definition under
    `criteria`: what `--run` measures."""
    out = []
    for r in dict.fromkeys(recipes):
        try:
            select(store, [r], criteria, current={r: current[r]} if current and r in current else None)
        except MissingResults:
            out.append(r)
    return out


_VERDICT_STYLE = {stats.FASTER: "bold green", stats.SLOWER: "bold red",
                  stats.NOT_SIGNIFICANT: "dim", stats.TOO_FEW: "yellow", stats.NOT_JUDGED: "dim",
                  seq.NOISY: "yellow", seq.UNSETTLED: "yellow"}


def _style(verdict: str) -> str:
    return "dim" if verdict.startswith("equal within") else _VERDICT_STYLE.get(verdict, "")


def render_compare(rows: Sequence[CompareRow], *, title: str | None = None,
                   where: dict[tuple[str, str], str] | None = None, quality: dict | None = None) -> Table:
    """A rich Table: one line per (variant, metric, point), pyperf-style figures and verdict;
    `where` ((recipe, metric) -> where it was measured, toolkit.analysis.where) goes beside a value;
    with `quality` ({variant: {point: QualityVerdict}}, toolkit.analysis.quality_runs) the answers'
    verdict beside the speed verdict ("faster, answers changed" is never styled as a win)."""
    from toolkit.analysis.answers_verdict import combined, is_plain_win

    where = where or {}

    def value(recipe: str, metric: str, mean: float, std: float, unit: str) -> str:
        text = stats.format_mean_std(mean, std, unit)
        return f"{text}\n({where[recipe, metric]})" if (recipe, metric) in where else text

    base = rows[0].baseline if rows else ""
    table = Table(title=escape(title or (f"compared with {base}" if base else "comparison")))
    table.add_column("variant")
    table.add_column("metric")
    table.add_column("point", justify="right")
    table.add_column(escape(f"{base or 'baseline'}"), justify="right")
    table.add_column("variant value", justify="right")
    # the interval of the rule that decided the row: the fixed rule's 95% CI, a sequential row's confidence
    # sequence, an "equal" row's two one-sided 95% bounds (TOST, a 90% interval): the legend says which
    table.add_column("speedup [interval]" if any(r.sequential for r in rows) else "speedup [95% CI]", justify="right")
    table.add_column("p", justify="right")
    table.add_column("n", justify="right")
    table.add_column("verdict")
    for r in rows:
        table.add_row(
            escape(r.recipe), r.metric, f"{'bs' if r.point_kind == 'batch' else 'c'}={r.point}",
            value(r.baseline, r.metric, r.base_mean, r.base_std, r.unit),
            value(r.recipe, r.metric, r.variant_mean, r.variant_std, r.unit),
            escape(stats.format_speedup(r.speedup, *speedup_interval(r))),
            f"{r.p_value:.3f}" if r.p_value == r.p_value else "seq.",
            f"{r.n_base}/{r.n_variant}",
            _verdict_text(r, _answers_at((quality or {}).get(r.recipe, {}), r.point), combined, is_plain_win))
    return table


def speedup_interval(r: CompareRow) -> tuple[float, float]:
    """A row's interval turned, as its speedup is, to "> 1 is better" (inverted for lower-is-better metrics)."""
    lo, hi = r.ci_low, r.ci_high
    if r.higher_is_better is False:
        return (1.0 / hi if hi else float("inf")), (1.0 / lo if lo else float("inf"))
    return lo, hi


def interval_legends(rows: Sequence[CompareRow]) -> list[str]:
    """The line saying why a row has no interval, when one has none (stats.interval_text)."""
    shown = [stats.interval_text(*speedup_interval(r)) for r in rows if math.isfinite(r.speedup)]
    return [stats.NO_INTERVAL_LEGEND] if any(s.endswith(f"({stats.NO_INTERVAL})") for s in shown) else []


NOT_CHECKED = "answers not checked at this point"


def _answers_at(per: dict, point: int):
    """The answers' verdict at `point`; at a point the check did not run, a changed or broken verdict
    of another point (named), so a gain elsewhere is not shown as a plain win either, else (when the
    check ran at other points) NOT_CHECKED: such a point never reads as a checked one."""
    import dataclasses

    if point in per:
        return per[point]
    bad = [q for q in per.values() if q.verdict in ("broken output", "answers changed")]
    if not bad:
        return NOT_CHECKED if per else None
    worst = min(bad, key=lambda q: q.verdict != "broken output")
    return dataclasses.replace(worst, verdict=f"{worst.verdict} (at c={worst.point})")


def _verdict_text(r: CompareRow, q, combined, is_plain_win) -> Text:
    if q is None:
        return Text(r.verdict, style=_style(r.verdict))
    if q == NOT_CHECKED:
        return Text(f"{r.verdict}, {q}", style="yellow" if r.verdict == stats.FASTER else _style(r.verdict))
    style = _style(r.verdict)
    if r.verdict == stats.FASTER and not is_plain_win(r.verdict, q):
        style = "bold red" if q.verdict.startswith("broken output") else "bold yellow"
    return Text(combined(r.verdict, q), style=style)


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


# /server_info fields that change from launch to launch without changing the configuration
# (sglang 0.5.23: `startup_time`, the launch's own timings; `launch_command`, the server's command line
# with its per-launch port, whose flags are compared above as "server flag").
_VOLATILE_SERVER_INFO = frozenset({"port", "host", "pid", "nccl_port", "dist_init_addr", "log_dir",
                                   "served_model_name", "internal_states", "last_gen_throughput",
                                   "dp_controller_port", "metrics_port", "file_storage_path",
                                   "startup_time", "launch_command"})


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
        out.append(f"benchmark: {describe_bench_diff(run_a, run_b)}")
    if run_a.gpu_key != run_b.gpu_key:
        out.append(f"GPUs: {run_a.gpu_key} -> {run_b.gpu_key}")
    for k in ("driver", "cuda", "driver_version", "cuda_version"):
        va, vb = run_a.machine.get(k), run_b.machine.get(k)
        if va != vb and (va is not None or vb is not None):
            out.append(f"machine {k}: {_fmt(va)} -> {_fmt(vb)}")
    if run_a.host != run_b.host and run_a.host and run_b.host:
        out.append(f"host: {run_a.host} -> {run_b.host}")
    return out
