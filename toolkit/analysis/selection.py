"""Which runs count: the one rule every table uses (compare, report, results, efficiency, "what else
differed", the variant cache), and the one rule that reduces repeats to values.

`choose(rows, recipes, criteria, measured=, current=, metrics=)` is pure over stored runs;
`select(store, recipes, criteria, current=, metrics=)` is the thin store query in front of it (and
`vouched`: the chosen runs' kept answers and GPU series checked against their sha256, a note for
each missing or altered one, altered answers not used). The rule, in order:

1. **Measurements only**: status `ok`; configuration verified (unless `unverified`); made by the
   recipe's benchmark driver (`RunRow.kind == "benchmark"`: `--until verify` runs and profiler runs
   never count, they stay visible in `results`); with samples (of an asked metric, when metrics are
   given); measured here (imported runs only with `imported`); a known run identity; runs stored
   `invalid` because a patch's activation evidence was missing only with `missing_evidence` (their
   samples are stored); and the explicit filters given (group, env key, bench key, GPU key, identity).
2. **The recipe as its file says now** (`current`: toolkit.run.identity.recipe_definition per
   recipe): runs of an older definition (server arguments, [server.env], model, [target],
   [benchmark]) are left out and named with what changed. When the recipes' current benchmarks
   differ, nothing is compared: the error says how and how to align them.
3. **One benchmark on one GPU kind**: among the (bench key, GPU key) pairs every recipe has runs for,
   the one whose last complete set is newest (`mix_gpus` drops the GPU from the pair).
4. **One run identity per recipe** (toolkit/results/identity.py): the newest counts; runs of
   another identity are left out and the note says what differed (unless `mix_envs`, which pools
   identities that differ only in their env key). Imported runs too (with `imported`), unless they
   carry no env key (measured outside patchbench: sglang's JSONL), which no identity can match.
5. **One interleaved sweep** when there is one: the newest group (`group_id`) holding runs of every
   recipe; otherwise every run left, pooled, and a note says the comparison crosses sweeps. A sweep
   launched until settled (a sequential `run`/`sweep`, which records its design in each run) keeps
   every run of each recipe's identity: its launching counted the stored runs of earlier sweeps, and
   the tables judge what it judged (`Selection.launched_under`, `Selection.pair`).

`Selection.describe()` names the runs, groups, dates, env keys and GPUs used; `Selection.notes`
says what was left out or mixed. Repeats: `reduce(samples)` gives, per (metric, point, kind), one
value per run (the mean of that run's samples there) and the list of those values across runs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from toolkit.analysis.missing_results import MissingResults  # noqa: F401 (re-exported)
from toolkit.errors import BadInput
from toolkit.results.identity import UNKNOWN, components_of, definition_differences, differences
from toolkit.results.records import RunRow, SampleRow, comparable_bench_params


@dataclass(frozen=True)
class Criteria:
    """What a user asked for; the defaults are the rule in the module docstring."""

    group_id: str | None = None
    env_key: str | None = None
    bench_key: str | None = None
    gpu_key: str | None = None
    identity: str | None = None
    unverified: bool = False  # also runs whose configuration was not verified
    imported: bool = False  # also imported runs
    missing_evidence: bool = False  # also runs stored `invalid` for missing activation evidence
    broken_output: bool = False  # also runs stored `invalid` for degenerate answers (toolkit.run.quality)
    mix_envs: bool = False  # every env key of a recipe, not only its newest
    mix_gpus: bool = False  # runs on different GPUs together
    prefer_group: bool = True  # one interleaved sweep when there is one


@dataclass(frozen=True)
class Selection:
    """The runs chosen per recipe (recipes in the order given; each list oldest first)."""

    recipes: tuple[str, ...]
    runs: dict  # recipe -> list[RunRow]
    bench_key: str | None
    gpu_key: str
    group_id: str | None = None  # the one sweep used, when one was
    notes: tuple[str, ...] = field(default=())  # what was mixed or left out, on request
    # recipe -> every run of its chosen identity (rule 4, before rule 5 keeps one sweep): the sequence a
    # sequential `run`/`sweep` counted, stored runs of earlier sweeps included
    sequences: dict = field(default_factory=dict)

    def run_ids(self, recipe: str) -> list[str]:
        return [r.run_id for r in self.runs[recipe]]

    def _sweep_pair(self, base: str, variant: str) -> tuple[list[RunRow], list[RunRow]]:
        if self.group_id is None:
            shared = {r.group_id for r in self.runs[base] if r.group_id} & {r.group_id for r in self.runs[variant]}
            if shared:
                g = max(shared, key=lambda g: max(_when(r) for r in self.runs[base] + self.runs[variant]
                                                  if r.group_id == g))
                return ([r for r in self.runs[base] if r.group_id == g], [r for r in self.runs[variant] if r.group_id == g])
        return self.runs[base], self.runs[variant]

    def launched_under(self, base: str, variant: str):
        """The sequential design (toolkit.analysis.sequential.Design) the pair was launched under
        (`run`/`sweep` without --repeats record it in each run), None for a fixed one: the newest of the
        variant's runs that records one (the reference's runs may be another campaign's, against another
        variant, under another design), else the reference's when it was launched against this variant
        (its `campaign`, the configurations `run` launched together, names the variant's identity; runs
        of a sweep or attribute record none): a variant measured by a fixed design on its own, beside a
        reference another sequential campaign launched, is judged by the fixed rule on all its runs."""
        from toolkit.analysis.sequential import Design

        record = sequential_record(*self._sweep_pair(base, variant))
        return None if record is None else Design.from_record(record)

    def pair(self, base: str, variant: str) -> tuple[list[str], list[str]]:
        """Run ids of `base` and `variant` to compare with each other: when no sweep measured every
        recipe but one measured these two, only that sweep's runs (the newest such); else all. A pair
        launched sequentially: the sequences its launching counted (every run of each side's identity,
        oldest first, earlier sweeps' included), so a table reads the runs `run` judged."""
        if self.sequences and self.launched_under(base, variant) is not None:
            return ([r.run_id for r in self.sequences.get(base, self.runs[base])],
                    [r.run_id for r in self.sequences.get(variant, self.runs[variant])])
        a, b = self._sweep_pair(base, variant)
        return [r.run_id for r in a], [r.run_id for r in b]

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


def launched_sequentially(run: RunRow) -> bool:
    """Whether the run was launched by a sequential `run`/`sweep` (it records the design in extra)."""
    return isinstance((run.extra or {}).get("sequential"), dict)


def sequential_record(base: Sequence[RunRow], variant: Sequence[RunRow]) -> dict | None:
    """The design record the pair (base, variant runs) was launched under (Selection.launched_under's rule)."""
    marked = [r for r in sorted(variant, key=_when) if launched_sequentially(r)]
    if marked:
        return marked[-1].extra["sequential"]
    mine = {r.identity for r in variant}
    against = [r for r in sorted(base, key=_when) if launched_sequentially(r)
               and ((r.extra or {}).get("campaign") is None or mine & set(r.extra["campaign"]))]
    return against[-1].extra["sequential"] if against else None


def _day_time(iso: str) -> str:
    return iso[:16].replace("T", " ") if iso else "?"


def _when(run: RunRow) -> tuple[str, str]:
    return (run.started_at or "", run.run_id)


def _why_not(run: RunRow, c: Criteria, measured: dict | None = None, metrics: Sequence[str] | None = None) -> str | None:
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
    if run.kind != "benchmark":
        return f"{run.kind} runs measure nothing that counts"
    if run.config_verified is not True and not c.unverified and not (run.imported and c.imported):
        return "configuration not verified (use --unverified)"
    if measured is not None:
        have = measured.get(run.run_id, set())
        if not have:
            return "no samples"
        if metrics and not have & set(metrics):
            return f"no samples of {', '.join(metrics)} (measured: {', '.join(sorted(have))})"
    if (run.identity or UNKNOWN) == UNKNOWN and not run.imported:
        return "run identity unknown (stored before identities; never reused)"
    for attr in ("group_id", "env_key", "bench_key", "gpu_key", "identity"):
        want = getattr(c, attr)
        if want is not None and getattr(run, attr) != want:
            return f"none with {attr.replace('_id', '').replace('_', ' ')} {want}"
    return None


def _points(run: RunRow) -> str:
    pts = (run.bench_params or {}).get("points")
    return ",".join(map(str, pts)) if isinstance(pts, list) else "?"


def _params_diff(a: dict | None, b: dict | None, sep: str = " vs ", end: str = "") -> str:
    """"points [1, 4, 16] vs [1, 8, 32]": the benchmark parameters in which two differ."""
    pa, pb = comparable_bench_params(None, a), comparable_bench_params(None, b)

    def shown(params: dict, k: str) -> str:
        value = params.get(k)
        return "(default)" if value is None else str(value)  # None: left to the driver's default

    return ", ".join(f"{k} {shown(pa, k)}{sep}{shown(pb, k)}{end}"
                     for k in sorted(set(pa) | set(pb)) if pa.get(k) != pb.get(k))


def _older_definition(name: str, runs: list[RunRow], current: dict) -> tuple[list[RunRow], list[str]]:
    """Runs of `name` whose definition is the recipe's current one, and notes naming the others
    ("2 run(s) of an older [benchmark] of mine/quick left out: points 1,4,16")."""
    keep, left = [], defaultdict(list)
    for r in runs:
        diffs = definition_differences(components_of(r), current)
        if not diffs:
            keep.append(r)
            continue
        other = [d for d in diffs if not d.startswith("[benchmark]")]
        if r.bench_key != current.get("bench_key"):
            what = "[benchmark]" + (" and server settings" if other else "")
            detail = _params_diff(r.bench_params, current.get("bench_params"), " (now ", ")")
            detail = "; ".join([detail, *other] if detail else other)
        else:
            what, detail = "definition", "; ".join(other)
        left[(what, detail)].append(r)
    notes = [f"{len(rs)} run(s) of an older {what} of {name} left out" + (f": {detail}" if detail else "")
             for (what, detail), rs in left.items()]
    return keep, notes


def describe_bench_diff(a: RunRow, b: RunRow) -> str:
    """The benchmark parameters in which two runs differ ("input_len 128 vs 256")."""
    return (_params_diff({"driver": a.bench_driver, **(a.bench_params or {})},
                         {"driver": b.bench_driver, **(b.bench_params or {})})
            or f"bench_key {(a.bench_key or '?')[:12]} vs {(b.bench_key or '?')[:12]}")


def require_same_benchmark(definitions: dict[str, dict]) -> None:
    """BadInput naming the first recipe whose `[benchmark]` (as its file says now: `definitions`,
    toolkit.run.identity) differs from the first one's: a verdict between them would be the
    benchmarks' difference, not the recipes'."""
    names = list(definitions)
    if len(names) < 2:
        return
    ref = definitions[names[0]]
    for n in names[1:]:
        if definitions[n].get("bench_key") != ref.get("bench_key"):
            diff = _params_diff(ref.get("bench_params"), definitions[n].get("bench_params")) or "benchmark keys"
            raise BadInput(f"cannot compare: the [benchmark] of {names[0]} and {n} differ now: {diff}",
                           hint=f"give both the same [benchmark] (copy {names[0]}'s [benchmark] table into {n}, or "
                                f"drop {n}'s own), then `patchbench run {names[0]} {n}`")


def choose(rows: Iterable[RunRow], recipes: Sequence[str], criteria: Criteria = Criteria(), *,
           measured: dict[str, set[str]] | None = None, current: dict[str, dict] | None = None,
           metrics: Sequence[str] | None = None) -> Selection:
    """The runs that count for `recipes` among `rows` (see the module docstring). `measured`: run
    id -> metrics it has samples of; `current`: recipe -> its definition now; `metrics`: the metrics
    asked. Raises MissingResults (a recipe has no usable run) or BadInput (nothing in common)."""
    c = criteria
    current = current or {}
    names = list(dict.fromkeys(recipes))
    if not names:
        raise BadInput("no recipe given")
    defined = [n for n in names if n in current]
    if c.bench_key is None and c.group_id is None:
        require_same_benchmark({n: current[n] for n in defined})
    rows = sorted((r for r in rows if r.recipe in names), key=_when)
    usable: dict[str, list[RunRow]] = {n: [] for n in names}
    reasons: dict[str, set[str]] = defaultdict(set)
    stopped: dict[str, list[RunRow]] = defaultdict(list)  # failed, interrupted, ...: said when nothing counts
    for run in rows:
        why = _why_not(run, c, measured, metrics)
        if why is None:
            usable[run.recipe].append(run)
        elif why.startswith("status"):
            stopped[run.recipe].append(run)
        else:
            reasons[run.recipe].add(why)
    notes: list[str] = []
    for n in defined:
        usable[n], left = _older_definition(n, usable[n], current[n])
        notes.extend(left)
        reasons[n].update(left)
    missing = [n for n in names if not usable[n]]
    if missing:
        raise MissingResults(missing, reasons=reasons, stopped=stopped)

    # 3. one (bench key, GPU key) that every recipe has; the newest complete one
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
        left_out = [r for r in usable[n] if cohort(r) != key]
        if left_out and (c.bench_key is None and c.group_id is None):
            notes.append(f"{n}: {len(left_out)} run(s) of another benchmark or GPU left out "
                         f"({describe_bench_diff(left_out[-1], chosen[n][-1]) if left_out[-1].bench_key != chosen[n][-1].bench_key else 'GPU ' + left_out[-1].gpu_key})")
    gpus = sorted({r.gpu_key for n in names for r in chosen[n]})
    if len(gpus) > 1:
        notes.append(f"mixing GPUs on request: {', '.join(gpus)}")

    # 4. one run identity per recipe: the newest
    for n in names:
        newest = chosen[n][-1]
        ident = components_of(newest)
        keep, other = [], defaultdict(list)
        for r in chosen[n]:
            # an imported run patchbench measured (an env key: a moved store, another site's export) is held to
            # the identity as any run; only one measured outside patchbench (sglang's JSONL) cannot be matched
            if r.identity == newest.identity or (r.imported and not r.env_key):
                keep.append(r)
                continue
            diffs = differences(components_of(r), ident)
            if c.mix_envs and all(d.startswith("env key") for d in diffs):
                keep.append(r)
                continue
            other["; ".join(diffs)].append(r)
        chosen[n] = keep
        for what, rs in other.items():
            notes.append(f"{n}: {len(rs)} run(s) of another configuration left out ({what})")
        if c.mix_envs and len({r.env_key for r in keep}) > 1:
            notes.append(f"{n}: mixing {len({r.env_key for r in keep})} env keys on request")
    imported = [n for n in names if any(r.imported for r in chosen[n])]
    if imported:
        notes.append(f"imported runs used on request: {', '.join(imported)}")
    evidence = [n for n in names if any(r.status == "invalid" and not r.broken_output for r in chosen[n])]
    broken = [n for n in names if any(r.status == "invalid" and r.broken_output for r in chosen[n])]
    if broken:
        notes.append(f"runs with broken output used on request: {', '.join(broken)}")
    if evidence:
        notes.append(f"runs with missing activation evidence used on request: {', '.join(evidence)}")

    # 5. one interleaved sweep when there is one
    sequences = {n: list(chosen[n]) for n in names}
    group = c.group_id
    if c.prefer_group and group is None and len(names) > 1:
        complete = set.intersection(*({r.group_id for r in chosen[n] if r.group_id} for n in names))
        if complete:
            group = max(complete, key=lambda g: max(_when(r) for n in names for r in chosen[n] if r.group_id == g))
            in_group = {n: [r for r in chosen[n] if r.group_id == group] for n in names}
            if not any(launched_sequentially(r) for rs in in_group.values() for r in rs):
                chosen = in_group
            elif any(len(in_group[n]) < len(chosen[n]) for n in names):  # its launching counted them: they count
                notes.append(f"sweep {group[:12]} was launched by a sequential run: a pair's verdicts read the launches "
                             "of each side made in a sweep that launched both sides, oldest first, as its launching did; "
                             "stored runs of one side from another campaign are left out of them "
                             "(toolkit.analysis.campaigns)")
        else:
            base = names[0]
            base_groups = {r.group_id for r in chosen[base] if r.group_id}
            crossing = [n for n in names[1:] if not base_groups & {r.group_id for r in chosen[n]}]
            if len(names) > 2 and len(crossing) < len(names) - 1:
                notes.append(f"no sweep measured all of {', '.join(names)}: each pair is compared within the "
                             "newest sweep that measured both")
            for n in crossing:
                if sequential_record(chosen[base], chosen[n]) is not None:  # reuse is its design
                    notes.append(f"{n} was launched by a sequential run against {base}'s stored runs of the same "
                                 "configuration (other sweeps): the pair is judged on those runs, as its launching did")
                    continue
                notes.append(f"{base} and {n} were never measured in one sweep: compared across sweeps "
                             f"(`patchbench run {base} {n} --fixed` measures both afresh, interleaved; without "
                             "--fixed, run reuses stored runs of the same configuration)")
    ref = chosen[names[0]][-1]
    return Selection(tuple(names), chosen, ref.bench_key, ref.gpu_key if len(gpus) == 1 else " + ".join(gpus),
                     group, tuple(notes), sequences)


def select(store, recipes: Sequence[str], criteria: Criteria = Criteria(), *, current: dict[str, dict] | None = None,
           metrics: Sequence[str] | None = None) -> Selection:
    """`choose` over the store's ok and invalid runs of `recipes` (invalid ones count only with
    `missing_evidence`; reading them lets a refusal say why), with the metrics each run measured."""
    rows = store.runs(recipe=list(dict.fromkeys(recipes)), status=["ok", "invalid"])
    measured = store.measured_metrics([r.run_id for r in rows])
    try:
        return vouched(store, choose(rows, recipes, criteria, measured=measured, current=current, metrics=metrics))
    except MissingResults as exc:  # runs that stopped (failed, interrupted) say why nothing counts
        raise exc.with_stopped(store.runs(recipe=exc.recipes, status=["failed", "interrupted", "running"])) from None


def vouched(store, sel: Selection) -> Selection:
    """`sel` with its runs' kept verdict files checked (toolkit/results/artifacts.vouch): answers
    read only from bytes with the stored sha256, a note per missing or altered file."""
    from dataclasses import replace

    from toolkit.results.artifacts import vouch

    before = list({r.run_id: r for rs in [*sel.runs.values(), *sel.sequences.values()] for r in rs}.values())
    runs, lines = vouch(store, before)
    if runs == before and not lines:
        return sel
    by_id = {r.run_id: r for r in runs}
    return replace(sel, runs={n: [by_id[r.run_id] for r in rs] for n, rs in sel.runs.items()},
                   sequences={n: [by_id[r.run_id] for r in rs] for n, rs in sel.sequences.items()},
                   notes=(*sel.notes, *lines))


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


def add_min_effect_argument(parser, *, sequential: bool = False) -> None:
    """`--min-effect`: the smallest effect a verdict calls faster/slower (shown in the legend).
    `sequential`: the command also launches until a sequential verdict is settled, whose indifference
    zone it sets too; its default is then None (the fixed rule's 1%, the recipe's `[benchmark]
    min_effect` for the sequential verdict)."""
    from toolkit.analysis.stats import DEFAULT_MIN_EFFECT

    if sequential:
        parser.add_argument("--min-effect", type=_fraction, default=None, metavar="FRACTION",
                            help=f"smallest effect a verdict calls faster/slower, fixed and sequential alike "
                                 f"(default: {DEFAULT_MIN_EFFECT:g} for the fixed rule, the recipe's [benchmark] "
                                 "min_effect for the sequential verdict; shown in the legends)")
        return
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
