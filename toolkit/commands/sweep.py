"""`patchbench sweep RECIPE`: the recipe and its `[matrix]` variants: statically checked (refusals
pruned with sglang's or the miniature's message before any server time), measured with repeats
interleaved (stored runs of the same variant and benchmark reused: a sweep resumes), optionally an
SLA search per variant (`--sla "itl_ms_p99<=50"`), then a ranked table with verdicts against the
default configuration and the Pareto front (PNG + SVG) in `-o DIR` (toolkit/analysis/sweep.py)."""

from __future__ import annotations

import re
from pathlib import Path

from toolkit.commands.common import console, err, home_of, load, positive_int, print_json, recipe_arg, store_of
from toolkit.executors.config import add_executor_arguments

HELP = "sweep a recipe's [matrix] variants: static check, interleaved measurement, SLA search, Pareto front"


def add_arguments(parser) -> None:
    from toolkit.analysis.sla import LOAD

    recipe_arg(parser)
    parser.add_argument("--sla", action="append", default=[], metavar="METRIC<=VALUE",
                        help="search each variant's concurrency meeting this bound (repeatable; <=, >=, <, >): "
                             "the highest for a latency ceiling (itl_ms_p99<=50), the lowest for a throughput "
                             "floor (output_tok_s>=500); metrics measured at every concurrency: " + ", ".join(LOAD))
    parser.add_argument("--range", dest="crange", default=None, metavar="LO:HI",
                        help="SLA search concurrency range (default: the recipe's lowest to highest concurrency)")
    parser.add_argument("--metric", default=None, metavar="NAME[@POINT]",
                        help="rank a plain sweep by this metric (default output_tok_s at the highest concurrency)")
    parser.add_argument("--repeats", type=positive_int, default=None,
                        help="runs per variant (and per SLA point), fixed; default: the recipe's for an SLA search, "
                             "else sequential (each variant launched until its verdict against the default "
                             "configuration is settled, as `run`; see --fixed)")
    parser.add_argument("--fixed", action="store_true",
                        help="a plain sweep's fixed design: the recipe's `[benchmark] repeats` runs per variant")
    parser.add_argument("--max-repeats", type=positive_int, default=None, metavar="N",
                        help="sequential: launches each at most while a variant is not settled (default: the recipe's `[benchmark] max_repeats`, 16); not with --sla")
    parser.add_argument("--min-effect", type=float, default=None, metavar="FRACTION",
                        help="sequential: the verdict's indifference zone (default: the recipe's `[benchmark] "
                             "min_effect`, 0.02), as `run --min-effect`; not with --sla, --repeats or --fixed")
    parser.add_argument("--until", choices=("check", "store"), default="store",
                        help="check: stop after the static check of every variant (prints what is pruned)")
    parser.add_argument("--slurm-jobs", type=positive_int, default=4, metavar="N",
                        help="--executor slurm: spread the variants over at most N jobs (default 4)")
    parser.add_argument("--frozen", action="store_true", help="refuse drift from the recipe's lock file")
    parser.add_argument("-o", "--output", default="./patchbench-sweep", metavar="DIR",
                        help="directory for sweep.md, sweep.html, pareto.png and pareto.svg")
    parser.add_argument("--json", action="store_true", help="print the sweep as JSON (docs/JSON.md)")
    add_executor_arguments(parser)


def _range(text: str | None, recipe) -> tuple[int, int]:
    from toolkit.errors import BadInput

    if text is None:
        pts = list(recipe.benchmark.concurrency)
        return min(pts), max(pts)
    m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise BadInput(f"--range `{text}` is not LO:HI with 1 <= LO <= HI (e.g. 1:128)")
    return int(m.group(1)), int(m.group(2))


UNKNOWN_SAME_SERVER = ("whether sglang resolves two of these configurations to one server is known only from a "
                       "launch (its /server_info): a sweep launches such a variant once, finds it another's server "
                       "and measures it no further (same server as ...)")


def _dry_run(args, recipe, outcomes, kept, bounds, store) -> int:
    """`--until check`: each configuration's static verdict; those the store's launches already showed to be
    another's server (the same-server guard seeded as the sweep would); and what no launch decided yet."""
    from toolkit.analysis import sweep_results as res
    from toolkit.run.same_server import Guard

    guard = Guard([o.name for o in outcomes])
    guard.seed(store, [(o.name, o.recipe, o.env_key) for o in kept])
    for o in kept:
        o.same_as = guard.same.get(o.name)
    unknown = len(kept) - len(guard.same)
    note = (f"{unknown} configuration(s) to launch; " + UNKNOWN_SAME_SERVER) if unknown > 1 else None
    if args.json:
        print_json({**res.document([], outcomes, [], recipe=recipe.name, metric="", sla=bounds), "same_server": note})
        return 0
    for o in outcomes:
        status = "pruned" if o.pruned else "failed" if o.failed else "same" if o.same_as else "ok"
        why = o.pruned or o.failed or (f"same server as {o.same_as} (its stored launches): not launched, "
                                       f"{o.same_as}'s numbers stand for it" if o.same_as else "")
        console.print(f"{status}  {o.name}" + (f": {why}" if why else ""), markup=False)
    if note:
        console.print(f"note: {note}", markup=False)
    return 0


def _ranking(spec, recipes) -> tuple[str, int]:
    """The metric and point a plain sweep ranks by, checked before anything is measured: a metric
    measured at each point of the recipe's benchmark, at a point every configuration measures."""
    from toolkit.analysis.sla import where_measured
    from toolkit.errors import BadInput

    default = recipes[0]
    serving = default.benchmark.driver == "serving"
    word = "concurrency" if serving else "batch size"
    points = [set(r.benchmark.concurrency if serving else r.benchmark.batch_sizes) for r in recipes]
    common = sorted(set.intersection(*points))
    if spec is None:
        return "output_tok_s" if serving else "decode_tok_s", max(common or points[0])
    kind = spec.info.point_kind
    if kind != ("concurrency" if serving else "batch"):
        where = (where_measured(spec.metric) if kind is None or serving
                 else f"by the serving benchmark, not by driver {default.benchmark.driver!r}")
        raise BadInput(f"--metric {spec}: `{spec.metric}` is measured {where}, so a sweep cannot rank by it",
                       hint=f"{default.name} uses driver {default.benchmark.driver!r}")
    if spec.point is None:
        return spec.metric, max(common or points[0])
    if spec.point not in common:
        missing = [r.name for r, p in zip(recipes, points) if spec.point not in p]
        who = (f"the benchmark of {default.name}" if len(missing) == len(recipes) else missing[0] if len(missing) == 1
               else f"{len(missing)} of the {len(recipes)} configurations")
        raise BadInput(f"--metric {spec}: {word} {spec.point} is not measured by {who}",
                       hint=f"every configuration measures {word} {', '.join(map(str, common)) or 'none in common'}"
                            f" (e.g. {spec.metric}@{common[-1] if common else 1})")
    return spec.metric, spec.point


def _runner(args, home, store, guard):
    from toolkit.run.pipeline import run_sweep

    if args.executor == "slurm":
        from toolkit.executors.config import cluster_config
        from toolkit.executors.slurm_sweep import slurm_runner

        return slurm_runner(cluster_config(args, home), home=home, store=store, jobs=args.slurm_jobs,
                            frozen=args.frozen, console=err)
    return lambda recipes: run_sweep(recipes, home=home, store=store, frozen=args.frozen, console=err,
                                     keep_going=True,  # a variant that fails to build leaves the others measurable
                                     same_server=guard)


def run(args) -> int:
    from toolkit.analysis import sweep as sw, sweep_results as res
    from toolkit.analysis.pareto import dominated_variants
    from toolkit.analysis.sla import parse_bounds
    from toolkit.results import metrics

    bounds = parse_bounds(args.sla)  # bad bounds: exit 2 before any work
    if bounds and args.max_repeats is not None:  # an SLA search measures each point a fixed number of times
        from toolkit.errors import BadInput

        raise BadInput("--max-repeats is the sequential design's cap; an SLA search (--sla) measures each point "
                       "the recipe's `[benchmark] repeats` times, or --repeats N", hint="drop --max-repeats, or --sla")
    if args.min_effect is not None and (bounds or args.repeats is not None or args.fixed):
        from toolkit.errors import BadInput

        raise BadInput("--min-effect is the sequential verdict's zone; an SLA search (--sla) and the fixed design "
                       "(--repeats/--fixed) do not use it", hint="drop --min-effect, or the others")
    if args.executor == "slurm":  # a Slurm job measures the fixed design: said, or refused when asked otherwise
        from rich.markup import escape

        from toolkit.executors.config import fixed_design_only

        note = fixed_design_only("sweep", [f for f, v in (("--max-repeats", args.max_repeats), ("--min-effect", args.min_effect))
                                           if v is not None],
                                 plain=not bounds and args.repeats is None and not args.fixed and args.until == "store")
        if note:
            err.print(f"[yellow]note[/]: {escape(note)}")
    spec = metrics.parse_spec(args.metric) if args.metric else None
    recipe = load(args.recipe)
    if args.min_effect is not None:  # a bad zone is one line before anything is built
        from toolkit.analysis import sequential_design as designs

        designs.for_bench(recipe.benchmark, min_effect=args.min_effect, max_repeats=args.max_repeats)
    if bounds and recipe.benchmark.driver != "serving":
        from toolkit.errors import BadInput

        raise BadInput(f"--sla needs the serving benchmark: {recipe.name} uses driver {recipe.benchmark.driver!r}",
                       hint="an SLA search varies the concurrency of a live server")
    recipes = sw.plan(recipe)
    metric, point = _ranking(spec, recipes) if not bounds else ("output_tok_s", None)
    lo, hi = _range(args.crange, recipe)
    home, store = home_of(args), store_of(args)
    err.print(f"sweep {recipe.name}: the default configuration and {len(recipes) - 1} variant(s); static check first",
              highlight=False)
    outcomes = sw.static_checks(recipes, home=home, console=err, frozen=args.frozen)
    sw.prune_the_default_twice(outcomes)
    kept = [o for o in outcomes if not o.pruned and not o.failed]
    err.print(f"static check: {len(kept)} to measure, {sum(bool(o.pruned) for o in outcomes)} pruned, "
              f"{sum(bool(o.failed) for o in outcomes)} failed", highlight=False)
    from toolkit.run.same_server import Guard

    if args.until == "check":
        return _dry_run(args, recipe, outcomes, kept, bounds, store)

    guard = Guard([o.name for o in outcomes])  # which variants sglang resolves to one server: stored launches first
    guard.seed(store, [(o.name, o.recipe, o.env_key) for o in kept])
    runner = _runner(args, home, store, guard)
    cost, left = None, {}
    if bounds:
        sw.sla_search(store, outcomes, bounds, lo=lo, hi=hi, repeats=args.repeats, runner=runner, console=err)
    else:
        design = _design(args, recipe, kept, recipes)
        if design is not None:  # sequential: launched until every variant's verdict is settled
            have, failed, reused, same, cost, left = _measure_sequential(store, kept, home, args, design, guard)
        else:
            have, failed, reused, same = sw.measure(store, [o.recipe for o in kept], args.repeats, runner, err,
                                                    {o.name: o.env_key for o in kept})
        for o in kept:
            o.same_as = {**same, **guard.same}.get(o.name)  # another variant's server: that one's numbers stand
            o.runs, o.reused = ([], 0) if o.same_as else (have.get(o.name, []), reused.get(o.name, 0))
            o.reused_runs = [] if o.same_as else list(left.get(o.name, []))
            o.failed = None if o.runs or o.same_as else failed.get(o.name, "no ok run")
            bench = o.recipe.benchmark
            o.points = {c: o.runs for c in (bench.concurrency if bench.driver == "serving" else bench.batch_sizes)}
    from toolkit.results.artifacts import VouchedStore

    vouched = VouchedStore(store)  # the verdicts read answers only from bytes with the stored sha256
    gates = res.gates(vouched, outcomes)
    ranked = res.rows(vouched, outcomes, metric, sla=bounds, point=point,
                      sequential=None if bounds else _design(args, recipe, kept, recipes), gate=gates)
    points = res.pareto_points(store, outcomes)
    dominated = dominated_variants(points)
    doc = res.document(ranked, outcomes, points, recipe=recipe.name, metric=metric, sla=bounds,
                       repeats=args.repeats or recipe.benchmark.repeats, gate=gates)
    if cost is not None:  # what the sequential launches cost, and the fixed design would have
        doc["cost"] = cost
    design = None if bounds else _design(args, recipe, kept, recipes)
    if design is not None:  # the rule the verdicts used (its cap, its zone): in the JSON and the written report
        from toolkit.analysis import sequential as seq

        doc["sequential_legend"] = seq.legend(design)
    doc["notes"] = vouched.notes
    doc["server"] = _server_lines(store, outcomes)
    from toolkit.report.sweep import write_sweep_report

    paths = write_sweep_report(doc, Path(args.output).expanduser())
    if args.json:
        print_json(doc)
    else:
        which = "lowest" if res.floors_only(bounds) else "highest"
        title = f"sweep {recipe.name}" + (f": {which} concurrency meeting {', '.join(map(str, bounds))}" if bounds
                                          else f": {metric} at concurrency {point}")
        if ranked:
            console.print(res.render(ranked, metric, outcomes, sla=bounds, dominated=dominated, title=title))
        else:  # measured, and nothing to rank: said, not an empty table
            console.print(f"{title}: no configuration " + ("meets the SLA in concurrency "
                          f"{lo}..{hi}" if bounds else f"has {metric} at concurrency {point}") + " (see below)",
                          markup=False)
        from toolkit.report.sweep import notes

        for line in notes(doc):
            console.print(line, markup=False, highlight=False)
        for p in paths:
            console.print(str(p), markup=False)
    return 1 if any(o.failed for o in outcomes) or not ranked else 0


def _server_lines(store, outcomes) -> list[str]:
    """What the measured servers could hold, as `compare` says it (toolkit.results.capacity): a
    concurrency above a variant's running-request limit (the rest queue: the point measures a batch of
    the limit), launches of one variant that sglang sized apart."""
    from toolkit.results import capacity

    ids = {rid for o in outcomes for rid in [*(o.runs or []), *(r for rs in (o.points or {}).values() for r in rs)]}
    return capacity.lines(store.runs(run_ids=sorted(ids))) if ids else []


def _design(args, recipe, kept, recipes):
    """A plain local sweep without --repeats/--fixed whose default configuration is measured:
    the sequential design (`run`'s), else None."""
    from toolkit.errors import BadInput

    if args.repeats is not None or args.fixed or args.sla or args.executor == "slurm":
        if args.max_repeats is not None and (args.repeats is not None or args.fixed):
            raise BadInput("--max-repeats is the sequential design's; --repeats/--fixed are the fixed one")
        return None
    if len(kept) < 2 or kept[0].name != recipes[0].name:
        return None
    from toolkit.analysis import sequential_design as designs

    return designs.for_bench(recipe.benchmark, min_effect=args.min_effect, max_repeats=args.max_repeats)


def _measure_sequential(store, kept, home, args, design, guard):
    """Every kept configuration launched in rounds until its verdict against the default's is
    settled (toolkit.analysis.sequential_runs; stored runs of the same identity count, so a killed
    sweep resumes where it stopped). Returns (name -> the ok run ids its verdict judged, name -> failure,
    name -> reused, name -> the configuration whose server it was, what the launches cost:
    toolkit.analysis.launch_cost.cost, name -> its stored runs of another campaign, left out of the verdict)."""
    from toolkit.commands.run import print_sequential, sequential_measure
    from toolkit.run.pipeline import run_sweep

    recipes = [o.recipe for o in kept]
    result = run_sweep(recipes, home=home, store=store, frozen=args.frozen, console=err,
                       measure=sequential_measure(design), keep_going=True, same_server=guard)
    if "sequential" in result:
        print_sequential(result, design, store, recipes, quiet=args.json, to=err)
    failed = {}
    for name, msg in result.get("failed", []):
        failed.setdefault(name, msg)
    used = result.get("used", {})
    return ({o.name: list(used.get(o.name, [])) for o in kept}, failed, dict(result.get("reused", {})),
            dict(result.get("same_server") or {}), result.get("cost"), dict(result.get("reused_runs") or {}))
