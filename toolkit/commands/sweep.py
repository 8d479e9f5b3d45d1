"""`patchbench sweep RECIPE`: the recipe and its `[matrix]` variants: statically checked (refusals
pruned with sglang's or the miniature's message before any server time), measured with repeats
interleaved (stored runs of the same variant and benchmark reused: a sweep resumes), optionally an
SLA search per variant (`--sla "itl_ms_p99<=50"`), then a ranked table with verdicts against the
default configuration and the Pareto front (PNG + SVG) in `-o DIR` (toolkit/analysis/sweep.py)."""

from __future__ import annotations

import re
from pathlib import Path

from toolkit.commands.common import console, err, home_of, load, print_json, recipe_arg, store_of
from toolkit.executors.config import add_executor_arguments

HELP = "sweep a recipe's [matrix] variants: static check, interleaved measurement, SLA search, Pareto front"


def add_arguments(parser) -> None:
    from toolkit.run import metrics

    recipe_arg(parser)
    parser.add_argument("--sla", action="append", default=[], metavar="METRIC<=VALUE",
                        help="search each variant's highest concurrency meeting this bound (repeatable; "
                             "<=, >=, <, >); known metrics: " + ", ".join(metrics.names()))
    parser.add_argument("--range", dest="crange", default=None, metavar="LO:HI",
                        help="SLA search concurrency range (default: the recipe's lowest to highest concurrency)")
    parser.add_argument("--metric", default=None, metavar="NAME[@POINT]",
                        help="rank a plain sweep by this metric (default output_tok_s at the highest concurrency)")
    parser.add_argument("--repeats", type=int, default=None, help="runs per variant (and per SLA point); default: the recipe's")
    parser.add_argument("--until", choices=("check", "store"), default="store",
                        help="check: stop after the static check of every variant (prints what is pruned)")
    parser.add_argument("--slurm-jobs", type=_positive, default=4, metavar="N",
                        help="--executor slurm: spread the variants over at most N jobs (default 4)")
    parser.add_argument("--frozen", action="store_true", help="refuse drift from the recipe's lock file")
    parser.add_argument("-o", "--output", default="./patchbench-sweep", metavar="DIR",
                        help="directory for sweep.md, sweep.html, pareto.png and pareto.svg")
    parser.add_argument("--json", action="store_true", help="print the sweep as JSON (docs/JSON.md)")
    add_executor_arguments(parser)


def _positive(text: str) -> int:
    import argparse

    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return int(text)


def _range(text: str | None, recipe) -> tuple[int, int]:
    from toolkit.errors import BadInput

    if text is None:
        pts = list(recipe.benchmark.concurrency)
        return min(pts), max(pts)
    m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise BadInput(f"--range `{text}` is not LO:HI with 1 <= LO <= HI (e.g. 1:128)")
    return int(m.group(1)), int(m.group(2))


def _runner(args, home, store):
    from toolkit.run.pipeline import run_sweep

    if args.executor == "slurm":
        from toolkit.executors.config import cluster_config
        from toolkit.executors.slurm_sweep import slurm_runner

        return slurm_runner(cluster_config(args, home), home=home, store=store, jobs=args.slurm_jobs,
                            frozen=args.frozen, console=err)
    return lambda recipes: run_sweep(recipes, home=home, store=store, frozen=args.frozen, console=err)


def run(args) -> int:
    from toolkit.analysis import sweep as sw, sweep_results as res
    from toolkit.analysis.pareto import dominated_variants
    from toolkit.analysis.sla import parse_bounds
    from toolkit.run import metrics

    bounds = parse_bounds(args.sla)  # bad bounds: exit 2 before any work
    spec = metrics.parse_spec(args.metric) if args.metric else None
    recipe = load(args.recipe)
    if bounds and recipe.benchmark.driver != "serving":
        from toolkit.errors import BadInput

        raise BadInput(f"--sla needs the serving benchmark: {recipe.name} uses driver {recipe.benchmark.driver!r}",
                       hint="an SLA search varies the concurrency of a live server")
    recipes = sw.plan(recipe)
    lo, hi = _range(args.crange, recipe)
    home, store = home_of(args), store_of(args)
    err.print(f"sweep {recipe.name}: the default configuration and {len(recipes) - 1} variant(s); static check first",
              highlight=False)
    outcomes = sw.static_checks(recipes, home=home, console=err, frozen=args.frozen)
    kept = [o for o in outcomes if not o.pruned and not o.failed]
    err.print(f"static check: {len(kept)} to measure, {sum(bool(o.pruned) for o in outcomes)} pruned, "
              f"{sum(bool(o.failed) for o in outcomes)} failed", highlight=False)
    if args.until == "check":
        doc = res.document([], outcomes, [], recipe=recipe.name, metric="", sla=bounds)
        if args.json:
            print_json(doc)
        for o in outcomes:
            console.print(f"{'pruned' if o.pruned else 'failed' if o.failed else 'ok'}  {o.name}"
                          + (f": {o.pruned or o.failed}" if o.pruned or o.failed else ""), markup=False)
        return 0
    runner = _runner(args, home, store)
    if bounds:
        sw.sla_search(store, outcomes, bounds, lo=lo, hi=hi, repeats=args.repeats, runner=runner, console=err)
        metric, point = "output_tok_s", None  # ranked by what each serves under the SLA
    else:
        have, failed, reused = sw.measure(store, [o.recipe for o in kept], args.repeats, runner, err,
                                          {o.name: o.env_key for o in kept})
        for o in kept:
            o.runs, o.reused = have.get(o.name, []), reused.get(o.name, 0)
            o.failed = None if o.runs else failed.get(o.name, "no ok run")
            o.points = {c: o.runs for c in o.recipe.benchmark.concurrency}
        metric = spec.metric if spec else "output_tok_s"
        point = spec.point if spec and spec.point is not None else max(recipe.benchmark.concurrency)
    ranked = res.rows(store, outcomes, metric, sla=bounds, point=point)
    points = res.pareto_points(store, outcomes)
    dominated = dominated_variants(points)
    doc = res.document(ranked, outcomes, points, recipe=recipe.name, metric=metric, sla=bounds)
    from toolkit.report.sweep import write_sweep_report

    paths = write_sweep_report(doc, Path(args.output).expanduser())
    if args.json:
        print_json(doc)
    else:
        title = f"sweep {recipe.name}" + (f": highest concurrency meeting {', '.join(map(str, bounds))}" if bounds
                                          else f": {metric} at concurrency {point}")
        console.print(res.render(ranked, metric, outcomes, sla=bounds, dominated=dominated, title=title))
        from toolkit.report.sweep import notes

        for line in notes(doc):
            console.print(line, markup=False, highlight=False)
        for p in paths:
            console.print(str(p), markup=False)
    return 1 if any(o.failed for o in outcomes) else 0
