"""Which runs count: the one rule every table uses (compare, report, results, efficiency, "what else
differed", the variant cache), and the one rule that reduces repeats to values.

`choose(rows, recipes, criteria)` is pure over stored runs; `select(store, recipes, criteria)` is
the thin store query in front of it. The rule, in order:

1. **Usable runs** per recipe: status `ok`; configuration verified (unless `unverified`); measured
   here (imported runs only with `imported`, and then whatever their verification); runs stored
   `invalid` because a patch's activation evidence was missing only with `missing_evidence`;
   and the explicit filters given (group, env key, bench key, GPU key).
2. **One benchmark on one GPU kind**: among the (bench key, GPU key) pairs every recipe has runs
   for, the one whose last complete set is newest. Editing a recipe's `[benchmark]` and re-running
   therefore moves every table to the new runs; old ones become history. `mix_gpus` drops the GPU
   from the pair (and says so).
3. **The recipe as it is now**: per recipe, only runs of its newest env key (a recipe whose patches
   or flags changed has a new env key), unless `mix_envs`.
4. **One interleaved sweep** when there is one: the newest group (`group_id`) holding runs of every
   recipe; otherwise every run left, pooled (and the groups named).

`Selection.describe()` names the runs, groups, dates, env keys and GPUs used; `Selection.notes`
says what was mixed on request. Repeats: `reduce(samples)` gives, per (metric, point, kind), one
value per run (the mean of that run's samples there) and the list of those values across runs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from toolkit.errors import BadInput
from toolkit.results.records import RunRow, SampleRow, comparable_bench_params


@dataclass(frozen=True)
class Criteria:
    """What a user asked for; the defaults are the rule in the module docstring."""

    group_id: str | None = None
    env_key: str | None = None
    bench_key: str | None = None
    gpu_key: str | None = None
    unverified: bool = False  # also runs whose configuration was not verified
    imported: bool = False  # also imported runs
    missing_evidence: bool = False  # also runs stored `invalid` for missing activation evidence
    broken_output: bool = False  # also runs stored `invalid` for degenerate answers (toolkit.run.quality)
    mix_envs: bool = False  # every env key of a recipe, not only its newest
    mix_gpus: bool = False  # runs on different GPUs together
    prefer_group: bool = True  # one interleaved sweep when there is one


class MissingResults(BadInput):
    """Some recipes have no usable runs. `recipes` lists them, in the order given."""

    def __init__(self, recipes: Sequence[str], detail: str = "") -> None:
        self.recipes = list(recipes)
        names = ", ".join(self.recipes)
        msg = f"no ok, verified results for recipe{'s' if len(self.recipes) > 1 else ''} {names}"
        super().__init__(msg + (f" ({detail})" if detail else ""),
                         hint="run them first, or compare with --run")


@dataclass(frozen=True)
class Selection:
    """The runs chosen per recipe (recipes in the order given; each list oldest first)."""

    recipes: tuple[str, ...]
    runs: dict  # recipe -> list[RunRow]
    bench_key: str | None
    gpu_key: str
    group_id: str | None = None  # the one sweep used, when one was
    notes: tuple[str, ...] = field(default=())  # what was mixed or left out, on request

    def run_ids(self, recipe: str) -> list[str]:
        return [r.run_id for r in self.runs[recipe]]

    def newest(self, recipe: str) -> RunRow:
        return self.runs[recipe][-1]

    def describe(self) -> list[str]:
        """One line per recipe: how many runs, which groups, env keys, GPU, from when to when."""
        out = []
        for name in self.recipes:
            runs = self.runs[name]
            groups = sorted({r.group_id or "-" for r in runs})
            envs = sorted({(r.env_key or "-")[:10] for r in runs})
            dates = sorted(r.started_at or "" for r in runs)
            span = _day_time(dates[0]) if dates[0] == dates[-1] else f"{_day_time(dates[0])} .. {_day_time(dates[-1])}"
            ids = ", ".join(r.run_id[:8] for r in runs)
            out.append(f"{name}: {len(runs)} run(s) [{ids}], group {', '.join(groups)}, env "
                       f"{', '.join(envs)}, GPU {', '.join(sorted({r.gpu_key for r in runs}))}, {span}")
        return out


def _day_time(iso: str) -> str:
    return iso[:16].replace("T", " ") if iso else "?"


def _when(run: RunRow) -> tuple[str, str]:
    return (run.started_at or "", run.run_id)


def _why_not(run: RunRow, c: Criteria) -> str | None:
    """Why `run` does not count under `c`, or None when it does."""
    if run.imported and not c.imported:
        return "imported (use --imported)"
    if run.status == "invalid" and run.missing_evidence:
        if not c.missing_evidence:
            return "activation evidence missing (use --missing-evidence)"
    elif run.status == "invalid" and run.broken_output:
        if not c.broken_output:
            return "broken output (use --broken-output)"
    elif run.status != "ok":
        return f"status {run.status}"
    if run.config_verified is not True and not c.unverified and not (run.imported and c.imported):
        return "configuration not verified (use --unverified)"
    for attr in ("group_id", "env_key", "bench_key", "gpu_key"):
        want = getattr(c, attr)
        if want is not None and getattr(run, attr) != want:
            return f"none with {attr.replace('_id', '').replace('_', ' ')} {want}"
    return None


def describe_bench_diff(a: RunRow, b: RunRow) -> str:
    """The benchmark parameters in which two runs differ ("input_len 128 vs 256")."""
    pa = comparable_bench_params(a.bench_driver, a.bench_params)
    pb = comparable_bench_params(b.bench_driver, b.bench_params)
    diffs = [f"{k} {pa.get(k, '(unset)')} vs {pb.get(k, '(unset)')}"
             for k in sorted(set(pa) | set(pb), key=lambda k: (k != "driver", k)) if pa.get(k) != pb.get(k)]
    return ", ".join(diffs) or f"bench_key {(a.bench_key or '?')[:12]} vs {(b.bench_key or '?')[:12]}"


def choose(rows: Iterable[RunRow], recipes: Sequence[str], criteria: Criteria = Criteria()) -> Selection:
    """The runs that count for `recipes` among `rows` (see the module docstring). Raises
    MissingResults (a recipe has no usable run) or BadInput (no benchmark/GPU in common)."""
    c = criteria
    names = list(dict.fromkeys(recipes))
    if not names:
        raise BadInput("no recipe given")
    rows = sorted((r for r in rows if r.recipe in names), key=_when)
    usable: dict[str, list[RunRow]] = {n: [] for n in names}
    reasons: dict[str, set[str]] = defaultdict(set)
    for run in rows:
        why = _why_not(run, c)
        if why is None:
            usable[run.recipe].append(run)
        elif not why.startswith("status"):
            reasons[run.recipe].add(why)
    missing = [n for n in names if not usable[n]]
    if missing:
        detail = "; ".join(f"{n}: {', '.join(sorted(reasons[n]))}" for n in missing if reasons[n])
        raise MissingResults(missing, detail)
    notes: list[str] = []

    # 2. one (bench key, GPU key) that every recipe has; the newest complete one
    def cohort(r: RunRow) -> tuple:
        return (r.bench_key,) if c.mix_gpus else (r.bench_key, r.gpu_key)

    newest_at: dict[str, dict[tuple, tuple]] = {n: {} for n in names}
    for n in names:
        for r in usable[n]:
            newest_at[n][cohort(r)] = max(newest_at[n].get(cohort(r), ("", "")), _when(r))
    common = set.intersection(*(set(v) for v in newest_at.values()))
    if not common:
        base, ref = names[0], usable[names[0]][-1]
        for n in names[1:]:
            other = usable[n][-1]
            if other.bench_key != ref.bench_key:
                raise BadInput(
                    f"cannot compare: no benchmark measured for all of {', '.join(names)}; newest runs "
                    f"differ: {base} (run {ref.run_id[:8]}) and {n} (run {other.run_id[:8]}): "
                    f"{describe_bench_diff(ref, other)}",
                    hint="re-run the recipes with the same [benchmark] (patchbench run A B), or pick one with --group")
            if other.gpu_key != ref.gpu_key:
                raise BadInput(f"cannot compare: {base} ran on {ref.gpu_key} (run {ref.run_id[:8]}), "
                               f"{n} on {other.gpu_key} (run {other.run_id[:8]})",
                               hint="measure both on one machine, or compare anyway with --mix-gpus")
        raise BadInput(f"cannot compare: no benchmark and GPU measured for all of {', '.join(names)}")
    key = max(common, key=lambda k: min(newest_at[n][k] for n in names))
    chosen = {n: [r for r in usable[n] if cohort(r) == key] for n in names}
    for n in names:
        left = len(usable[n]) - len(chosen[n])
        if left and (c.bench_key is None and c.group_id is None):
            notes.append(f"{n}: {left} older run(s) of another benchmark or GPU left out")
    gpus = sorted({r.gpu_key for n in names for r in chosen[n]})
    if len(gpus) > 1:
        notes.append(f"mixing GPUs on request: {', '.join(gpus)}")

    # 3. the newest env key per recipe
    for n in names:
        envs = list(dict.fromkeys(r.env_key for r in chosen[n]))
        if len(envs) > 1:
            if c.mix_envs:
                notes.append(f"{n}: mixing {len(envs)} env keys on request")
            else:
                newest = chosen[n][-1].env_key
                chosen[n] = [r for r in chosen[n] if r.env_key == newest]
    imported = [n for n in names if any(r.imported for r in chosen[n])]
    if imported:
        notes.append(f"imported runs used on request: {', '.join(imported)}")
    evidence = [n for n in names if any(r.status == "invalid" and not r.broken_output for r in chosen[n])]
    broken = [n for n in names if any(r.status == "invalid" and r.broken_output for r in chosen[n])]
    if broken:
        notes.append(f"runs with broken output used on request: {', '.join(broken)}")
    if evidence:
        notes.append(f"runs with missing activation evidence used on request: {', '.join(evidence)}")

    # 4. one interleaved sweep when there is one
    group = c.group_id
    if c.prefer_group and group is None and len(names) > 1:
        complete = set.intersection(*({r.group_id for r in chosen[n] if r.group_id} for n in names))
        if complete:
            group = max(complete, key=lambda g: max(_when(r) for n in names for r in chosen[n] if r.group_id == g))
            chosen = {n: [r for r in chosen[n] if r.group_id == group] for n in names}
    ref = chosen[names[0]][-1]
    return Selection(tuple(names), chosen, ref.bench_key, ref.gpu_key if len(gpus) == 1 else " + ".join(gpus),
                     group, tuple(notes))


def select(store, recipes: Sequence[str], criteria: Criteria = Criteria()) -> Selection:
    """`choose` over the store's ok and invalid runs of `recipes` (invalid ones count only with
    `missing_evidence`; reading them lets a refusal say why)."""
    return choose(store.runs(recipe=list(dict.fromkeys(recipes)), status=["ok", "invalid"]), recipes, criteria)


def criteria_from_args(args) -> Criteria:
    """Criteria from the selection options `add_selection_arguments` defines."""
    return Criteria(group_id=getattr(args, "group", None), unverified=getattr(args, "unverified", False),
                    imported=getattr(args, "imported", False),
                    missing_evidence=getattr(args, "missing_evidence", False),
                    broken_output=getattr(args, "broken_output", False),
                    mix_envs=getattr(args, "mix_envs", False), mix_gpus=getattr(args, "mix_gpus", False))


def add_selection_arguments(parser) -> None:
    """The options every table verb shares to widen the default selection (each is then printed)."""
    parser.add_argument("--group", default=None, help="only runs of one sweep (its group id, shown by `results`)")
    parser.add_argument("--unverified", action="store_true", help="also runs whose configuration was not verified")
    parser.add_argument("--imported", action="store_true", help="also imported runs (not measured here)")
    parser.add_argument("--missing-evidence", action="store_true",
                        help="also runs stored invalid because a patch's activation evidence was missing")
    parser.add_argument("--broken-output", action="store_true",
                        help="also runs stored invalid because the output check found degenerate answers")
    parser.add_argument("--mix-envs", action="store_true", help="pool every env key of a recipe, not only its newest")
    parser.add_argument("--mix-gpus", action="store_true", help="pool runs on different GPUs")


def _fraction(text: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction in [0, 1) (0.01 is 1%)")
    return value


def add_min_effect_argument(parser) -> None:
    """`--min-effect`: the smallest effect a verdict calls faster/slower (shown in the legend)."""
    from toolkit.analysis.stats import DEFAULT_MIN_EFFECT

    parser.add_argument("--min-effect", type=_fraction, default=DEFAULT_MIN_EFFECT, metavar="FRACTION",
                        help=f"smallest effect a verdict calls faster/slower (default {DEFAULT_MIN_EFFECT:g}, "
                             "i.e. 1%%; shown in the verdict legend)")


# -- repeats -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Observation:
    """Values of one (metric, point): one per run, in run order."""

    unit: str
    values: tuple[float, ...]
    runs: tuple[str, ...]


def reduce(samples: Iterable[SampleRow], run_order: Sequence[str] | None = None) -> dict[tuple[str, int, str], Observation]:
    """(metric, point, point_kind) -> Observation: per run, the mean of its samples there (one
    value per run); across runs, the list of those values (in `run_order`, else first seen)."""
    acc: dict[tuple, dict[str, list[float]]] = defaultdict(dict)
    units: dict[tuple, str] = {}
    for s in samples:
        key = (s.metric, s.point, s.point_kind)
        acc[key].setdefault(s.run_id, []).append(float(s.value))
        units.setdefault(key, s.unit)
    out = {}
    for key, per in acc.items():
        order = [r for r in run_order if r in per] if run_order is not None else list(per)
        out[key] = Observation(units[key], tuple(sum(per[r]) / len(per[r]) for r in order), tuple(order))
    return out


def values_at(samples: Iterable[SampleRow], metric: str, point: int, run_order: Sequence[str]) -> list[float]:
    """One value per run (in `run_order`, runs without one left out) of `metric` at `point`."""
    obs = [o for (m, p, _), o in reduce(samples, run_order).items() if m == metric and p == point]
    return list(obs[0].values) if obs else []
