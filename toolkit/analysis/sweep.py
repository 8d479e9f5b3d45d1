"""`patchbench sweep`: a recipe and its `[matrix]` variants, checked, measured and searched.

1. **Static check** of the default recipe and every variant (`prepare(until="check")`: apply, build,
   sglang's or the miniature's own validation for the `[target]`, the model-shape rules). A variant
   refused there is pruned with the refusal's message before any server time.
2. **Measure** the rest with repeats interleaved (`runner`: the pipeline's `run_sweep`, or one Slurm
   job per chunk), reusing what the store already holds: ok, verified runs of the same recipe name
   and benchmark (bench key) count toward the repeats, so an interrupted sweep resumes.
3. **SLA search** (`bounds`): per variant, bisection over the concurrency range (toolkit/analysis/
   sla.py: the highest concurrency meeting ceilings such as `itl_ms_p99<=50`, the lowest meeting
   floors such as `output_tok_s>=500`), one point per variant per round, each round one interleaved
   `runner` call; a point is the variant with `benchmark.concurrency = [c]`, its runs stored under
   the variant's own name, each bound judged there with its runs' spread (`sla.judge`).

Effects: runs stored through the pipeline; nothing else written.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from rich.console import Console
from rich.markup import escape

from toolkit.analysis.sla import Bound, Search, judge, load_breaks
from toolkit.analysis.selection import values_at
from toolkit.errors import BadInput, PatchbenchError
from toolkit.recipe.load import Recipe, expand_recipe
from toolkit.results.records import bench_key
from toolkit.results.store import Store

Runner = Callable[[list[Recipe]], dict]  # run_sweep(recipes) -> {"runs", "failed", ...}


@dataclass
class Outcome:
    """One variant's part of a sweep."""

    name: str
    recipe: Recipe | None = None
    env_key: str | None = None  # the env the static check ran in (reuse needs the same)
    pruned: str | None = None  # the refusal's message
    failed: str | None = None
    runs: list[str] = field(default_factory=list)  # ok runs that count (reused + new; a sequential sweep: judged)
    reused: int = 0
    # a sequential sweep: stored runs of another campaign its verdict left out (it launched again here)
    reused_runs: list[str] = field(default_factory=list)
    search: Search | None = None
    at_best: dict = field(default_factory=dict)  # metric -> {"mean", "ci": [lo, hi], "n"}
    breaks: list[str] = field(default_factory=list)  # where a bound's metric moved against its direction
    points: dict = field(default_factory=dict)  # concurrency -> [run ids] (SLA search)
    same_as: str | None = None  # the configuration whose server its launch was (toolkit.run.same_server)


def plan(recipe: Recipe) -> list[Recipe]:
    """The default configuration (the unexpanded recipe) first, then its variants."""
    variants = expand_recipe(recipe)
    if not variants:
        raise BadInput(f"recipe `{recipe.name}` has no [matrix]: nothing to sweep",
                       hint="add [matrix] with lists of server.args.X / benchmark.Y values, or use `patchbench run`")
    return [recipe, *variants]


def prune_the_default_twice(outcomes: list[Outcome]) -> None:
    """A variant whose settings are the default configuration's (the [matrix] lists the default's own
    values: the same env, server arguments and benchmark, so the same run identity) is pruned: its
    runs would be the default's, measured once as the default, not a variant that failed."""
    from toolkit.run.identity import expected_identity

    default = outcomes[0]
    if default.pruned or default.failed or default.env_key is None:
        return
    key = expected_identity(default.recipe, default.env_key, "")
    for o in outcomes[1:]:
        if not (o.pruned or o.failed) and o.env_key and expected_identity(o.recipe, o.env_key, "") == key:
            o.pruned = (f"the default configuration's own settings (run identity {key[:12]}): measured once, "
                        "as the default")


def static_checks(recipes: Sequence[Recipe], *, home: Path, console: Console,
                  frozen: bool = False) -> list[Outcome]:
    """Check every recipe statically; refused ones come back with `pruned` set."""
    from toolkit.run.pipeline import prepare
    from toolkit.tree.lock import FrozenDrift

    out = []
    for r in recipes:
        o = Outcome(r.name, r)
        try:
            p = prepare(r, home, until="check", frozen=frozen, console=console)
            o.env_key = p.env.key if p.env else None
        except FrozenDrift:  # not a configuration sglang refused: the sweep stops, naming the variant
            raise
        except BadInput as exc:
            o.pruned = exc.message + (f" ({exc.hint})" if exc.hint else "")
            console.print(f"[yellow]pruned[/] {escape(r.name)}: {escape(o.pruned)}", highlight=False)
        except PatchbenchError as exc:
            o.failed = str(exc)
            console.print(f"[red]failed[/] {escape(r.name)}: {escape(str(exc))}", highlight=False)
        out.append(o)
    return out


def bench_key_of(recipe: Recipe) -> str:
    return bench_key(recipe.benchmark.driver, recipe.benchmark.params())


def reusable_runs(store: Store, recipe: Recipe, env_key: str | None = None) -> list[str]:
    """The stored runs that count for this variant as its file defines it now (toolkit.analysis.
    selection: benchmark runs with samples, verified, measured here), of the run identity a new run
    in env `env_key` on this machine's GPUs would have when the env is known; oldest first."""
    from toolkit.analysis.selection import Criteria, MissingResults, select
    from toolkit.errors import BadInput
    from toolkit.run.identity import expected_identity, recipe_definition
    from toolkit.run.machine import this_gpu_key

    ident = expected_identity(recipe, env_key, this_gpu_key()) if env_key else None
    try:
        sel = select(store, [recipe.name], Criteria(identity=ident, prefer_group=False),
                     current={recipe.name: recipe_definition(recipe)})
    except (MissingResults, BadInput):
        return []
    return sel.run_ids(recipe.name)


def _with_repeats(recipe: Recipe, repeats: int) -> Recipe:
    return dataclasses.replace(recipe, benchmark=dataclasses.replace(recipe.benchmark, repeats=repeats))


def at_concurrency(recipe: Recipe, c: int) -> Recipe:
    """The recipe measured at one concurrency (same name: its runs are the variant's)."""
    raw = {**recipe.raw, "benchmark": {**recipe.raw.get("benchmark", {}), "concurrency": [c]}}
    bench = dataclasses.replace(recipe.benchmark, concurrency=(c,))
    return dataclasses.replace(recipe, benchmark=bench, raw=raw)


def measure(store: Store, recipes: Sequence[Recipe], repeats: int | None, runner: Runner,
            console: Console, env_keys: dict | None = None) -> tuple[dict, dict, dict, dict]:
    """Bring every recipe to `repeats` ok runs (default: its own), reusing stored ones. Returns
    (name -> ok run ids, name -> failure, name -> how many were reused, name -> the configuration
    whose server its launch was: not measured, toolkit.run.same_server)."""
    todo, have, reused = [], {}, {}
    for r in recipes:
        want = repeats or r.benchmark.repeats
        have[r.name] = reusable_runs(store, r, (env_keys or {}).get(r.name))[-want:]
        reused[r.name] = len(have[r.name])
        if len(have[r.name]) < want:
            todo.append(_with_repeats(r, want - len(have[r.name])))
    failed: dict[str, str] = {}
    same: dict[str, str] = {}
    if reused and any(reused.values()):
        console.print(escape("reused: " + ", ".join(f"{n} ({k} run(s))" for n, k in reused.items() if k)), highlight=False)
    if todo:
        result = runner(todo)
        same.update(result.get("same_server") or {})
        for name, msg in result.get("failed", []):
            failed.setdefault(name, msg)
        for name, rid in result.get("runs", []):
            if store.get_run(rid).status == "ok":
                have[name].append(rid)
    return have, failed, reused, same


def values(store: Store, run_ids: Sequence[str], metric: str, point: int) -> list[float]:
    return values_at(store.samples(list(run_ids), metric), metric, point, list(run_ids)) if run_ids else []


def mean_ci(xs: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean and its t interval. One value has no interval (nan, nan): a zero-width one would pass a single
    launch for a certainty. A measured quantity that cannot be negative (every value >= 0: throughputs,
    latencies) keeps its lower bound at 0 (the interval holds the mean as often; 2 launches' t interval
    otherwise read "758.6 [-1386, 2904]" tok/s)."""
    n = len(xs)
    if n == 0:
        return (math.nan, math.nan, math.nan)
    m = sum(xs) / n
    if n == 1:
        return (m, math.nan, math.nan)
    from scipy import stats as sp

    s = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    half = float(sp.t.ppf(0.5 + confidence / 2, n - 1)) * s / math.sqrt(n)
    lo = max(m - half, 0.0) if min(xs) >= 0 else m - half
    return (m, lo, m + half)


def sla_search(store: Store, outcomes: Sequence[Outcome], bounds: Sequence[Bound], *, lo: int, hi: int,
               repeats: int | None, runner: Runner, console: Console) -> None:
    """Search each measurable outcome's concurrency range in rounds (see the module docstring)."""
    active = [o for o in outcomes if o.recipe is not None and not o.pruned and not o.failed]
    for o in active:
        o.search = Search(lo, hi, tuple(bounds))
    rnd = 0
    while True:
        asks = [(o, c) for o in active if o.search and not o.failed and not o.same_as
                and (c := o.search.next_point()) is not None]
        if not asks:
            break
        rnd += 1
        console.print(escape(f"SLA round {rnd}: " + ", ".join(f"{o.name} @ {c}" for o, c in asks)), highlight=False)
        have, failed, reused, same = measure(store, [at_concurrency(o.recipe, c) for o, c in asks], repeats, runner,
                                             console, {o.name: o.env_key for o, _ in asks})
        for o, c in asks:
            if o.name in same:  # another variant's server: its search is that one's
                o.same_as, o.search = same[o.name], None
                continue
            runs = have.get(o.name, [])
            o.reused += reused.get(o.name, 0)
            o.points[c] = runs
            if not runs:
                o.failed = failed.get(o.name, f"no ok run at concurrency {c}")
                continue
            o.search.feed(c, [judge(b, values(store, runs, b.metric, c)) for b in bounds])
    for o in active:
        if o.search is None:
            continue
        for metric in dict.fromkeys(b.metric for b in bounds):
            o.breaks += load_breaks({c: values(store, runs, metric, c) for c, runs in o.points.items()}, metric)
        best = o.search.best
        if best is None:
            continue
        o.runs = o.points.get(best, [])
        for name in dict.fromkeys([*(b.metric for b in bounds), "output_tok_s"]):
            m, l, h = mean_ci(values(store, o.runs, name, best))
            o.at_best[name] = {"mean": m, "ci": [l, h], "n": len(o.runs)}
