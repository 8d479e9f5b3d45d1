"""`patchbench run RECIPE...`: apply, build, static check, launch, verify, benchmark, store.

Several recipes interleave their launches (A B B A ...) on the same machine, by default until every
pair's sequential verdict is settled (toolkit.analysis.sequential_runs); `--repeats N` or `--fixed`
(the recipes' `[benchmark] repeats`) is the fixed design. Without a CUDA GPU (and a recipe that needs
one) it stops after the static check with a clear message.
"""

from __future__ import annotations

from toolkit.commands.common import console, err, home_of, load, positive_int, print_json, recipe_arg, store_of
from toolkit.executors.config import add_executor_arguments
from toolkit.run.pipeline import STOPS, run_sweep

HELP = "run recipes end to end (apply -> build -> check -> launch -> verify -> benchmark -> store)"


def add_arguments(parser) -> None:
    recipe_arg(parser, many=True)
    parser.add_argument("--repeats", type=positive_int, default=None, help="server launches per recipe (default: the recipe's)")
    parser.add_argument("--until", choices=STOPS, default="store",
                        help="stop after this step on purpose (verify: launch and check /server_info, no benchmark)")
    parser.add_argument("--frozen", action="store_true", help="refuse drift from the recipes' lock files")
    parser.add_argument("--strict-box", action="store_true",
                        help="store a run `invalid` when its GPUs throttled, ran other processes or ran at clocks "
                             "apart from the sweep's (as `[benchmark] strict_box = true`)")
    parser.add_argument("--strict-check", action="store_true",
                        help="a static check that could not resolve sglang's defaults stops the recipe (exit 2), "
                             "as `[target] strict = true` does")
    add_sequential_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the run ids as JSON")
    add_executor_arguments(parser)


def run(args) -> int:
    recipes = [load(r) for r in args.recipes]
    if args.strict_box:
        import dataclasses

        recipes = [dataclasses.replace(r, benchmark=dataclasses.replace(r.benchmark, strict_box=True)) for r in recipes]
    home = home_of(args)
    store = store_of(args)
    if args.executor == "slurm":  # the same sweep as one Slurm job; its runs imported here
        from toolkit.executors.config import cluster_config, fixed_design_only
        from toolkit.executors.slurm import run_on_slurm

        asked = [flag for flag, given in (("--sequential", args.sequential), ("--min-repeats", args.min_repeats),
                                          ("--max-repeats", args.max_repeats), ("--min-effect", args.min_effect))
                 if given not in (None, False)]
        note = fixed_design_only("run", asked, plain=len(recipes) > 1 and args.repeats is None and not args.fixed
                                 and args.until == "store")
        if note:
            from rich.markup import escape

            err.print(f"[yellow]note[/]: {escape(note)}")

        result = run_on_slurm(recipes, home=home, store=store, cfg=cluster_config(args, home), repeats=args.repeats,
                              until=args.until, frozen=args.frozen, console=err, strict=args.strict_check)
    else:
        design = sequential_design(args, recipes)
        if design:  # a verdict between recipes: one benchmark for all, checked before anything is built
            from toolkit.analysis.selection import require_same_benchmark
            from toolkit.commands.common import definitions, same_twice

            same_twice(args.recipes)
            require_same_benchmark(definitions([r.name for r in recipes]))
            same_configuration_early(recipes)
            from rich.markup import escape

            from toolkit.analysis.sequential_design import unused_settings

            for line in unused_settings(recipes[0], recipes[1:]):
                err.print(f"[yellow]note[/]: {escape(line)}")
        result = run_sweep(recipes, home=home, store=store, repeats=args.repeats, until=args.until,
                           frozen=args.frozen, console=err, strict=args.strict_check,
                           measure=sequential_measure(design) if design else None)
        if design and "sequential" in result:
            print_sequential(result, design, store, recipes, quiet=args.json)
    if args.json:
        print_json(result)
    elif result["runs"]:
        from toolkit.commands.results import render_runs

        ids = [rid for _, rid in result["runs"]]
        console.print(render_runs(store, store.runs(run_ids=ids)))
    elif args.until in ("apply", "build", "check"):
        if len(result.get("resolved", {})) > 1:
            from toolkit.run.sglang_args import diff_resolved

            rows = diff_resolved(result["resolved"])
            names = list(result["resolved"])
            console.print(f"resolved config, {' vs '.join(names)}: " + ("no key field differs" if not rows else ""))
            for key, values in rows:
                console.print(f"  {key}: {' | '.join(values)}", markup=False, highlight=False)
        if not result["failed"]:  # a recipe that failed before it stopped did not stop as asked
            err.print(f"stopped after `{args.until}` as asked")
    if result.get("bad_input"):  # a recipe refused as bad input (e.g. --strict-check): exit 2, as alone
        return 2
    if result["failed"]:
        return 1
    statuses = {r.status for r in store.runs(run_ids=[rid for _, rid in result["runs"]])}
    return 0 if statuses <= {"ok"} else 1



# -- sequential verdicts (issue 30): without --repeats, several recipes launch until settled --------

# Without --repeats or --fixed, several recipes measure sequentially (issue 30): launches until settled.
SEQUENTIAL_BY_DEFAULT = True


def add_sequential_arguments(parser) -> None:
    from toolkit.analysis import sequential as seq

    parser.add_argument("--sequential", action="store_true",
                        help="several recipes: launch in rounds until every pair's sequential verdict (the first "
                             "recipe against each other, at every point) is settled (the default for several "
                             "recipes without --repeats/--fixed)")
    parser.add_argument("--fixed", action="store_true",
                        help="the fixed design: each recipe's `[benchmark] repeats` launches (or --repeats N), "
                             "interleaved, whatever the data say")
    parser.add_argument("--min-repeats", type=int, default=None, metavar="N",
                        help=f"launches each before the first sequential verdict (default {seq.DEFAULT_MIN_REPEATS})")
    parser.add_argument("--max-repeats", type=int, default=None, metavar="N",
                        help="launches each at most while a pair is not settled (default: the baseline recipe's "
                             "`[benchmark] max_repeats`, 16)")
    parser.add_argument("--min-effect", type=float, default=None, metavar="FRACTION",
                        help="the sequential verdict's indifference zone (default: the reference's "
                             "`[benchmark] min_effect`, 0.02)")


def sequential_design(args, recipes):
    """The sequential design when it applies (several recipes, no --repeats, measuring, local)."""
    from toolkit.errors import BadInput

    fixed = getattr(args, "fixed", False)
    if fixed and (args.sequential or args.min_repeats is not None or args.max_repeats is not None):
        raise BadInput("--fixed is the fixed design; --sequential/--min-repeats/--max-repeats are the sequential one")
    if args.repeats is not None and (args.sequential or args.min_repeats is not None or args.max_repeats is not None
                                     or getattr(args, "min_effect", None) is not None):
        raise BadInput(f"--repeats {args.repeats} is the fixed design (that many launches each, whatever the data "
                       "say); --sequential/--min-repeats/--max-repeats/--min-effect are the sequential one",
                       hint="drop --repeats to launch until the verdict is settled, or drop the others")
    asked_for = [flag for flag, given in (("--sequential", args.sequential), ("--min-repeats", args.min_repeats is not None),
                                          ("--max-repeats", args.max_repeats is not None),
                                          ("--min-effect", getattr(args, "min_effect", None) is not None)) if given]
    if len(recipes) < 2 and asked_for:  # a verdict is between recipes: one recipe launches its fixed repeats
        raise BadInput(f"{'/'.join(asked_for)}: the sequential design judges a pair of recipes; one recipe ({recipes[0].name}) "
                       f"launches its `[benchmark] repeats` ({recipes[0].benchmark.repeats}), or --repeats N",
                       hint="name the reference and the candidate: `patchbench run BASE CANDIDATE`")
    from toolkit.analysis import sequential_design as designs

    # the settings are checked whatever the call does with them (--until check too): before anything is built
    design = designs.for_bench(recipes[0].benchmark, min_effect=args.min_effect, min_repeats=args.min_repeats,
                               max_repeats=args.max_repeats)
    asked = SEQUENTIAL_BY_DEFAULT or args.sequential or args.min_repeats is not None or args.max_repeats is not None
    if fixed or not asked or args.repeats is not None or len(recipes) < 2 or args.until != "store" \
            or args.executor == "slurm":
        return None
    return design


def same_configuration_early(recipes) -> None:
    """Before anything is built: a recipe whose tables that make its runs' identity (sources, patches,
    build, server, benchmark, target) equal the reference's is the reference's configuration under
    another name, refused as the prepared check would refuse it after building
    (toolkit.analysis.sequential_runs.without_the_reference_twice)."""
    from toolkit.errors import BadInput

    ref = recipes[0].configuration()
    same = [r.name for r in recipes[1:] if r.configuration() == ref]
    if same and len(same) == len(recipes) - 1:
        raise BadInput(f"{recipes[0].name} and {', '.join(same)} are one configuration (the same sources, patches, "
                       "build, server and benchmark): a comparison would read the same runs on both sides",
                       hint="compare recipes that differ; one recipe's launch-to-launch spread is in "
                            f"`patchbench report {recipes[0].name}`")


def sequential_measure(design):
    from toolkit.analysis.sequential_runs import measure_until_settled

    def measure(prepared, *, result, **kw):
        if len(prepared) < 2:  # one recipe left after the others failed to prepare: nothing to compare
            from toolkit.run.pipeline import run_once

            for rep in range(prepared[0].recipe.benchmark.repeats if prepared else 0):
                result["runs"].append((prepared[0].name, run_once(prepared[0], repeat=rep, **kw)))
            return
        result["sequential"] = [v.to_dict() for v in measure_until_settled(prepared, design=design, result=result, **kw)]
    return measure


def _as_named(store, named: list) -> list:
    """The stored rows of (name, run id) pairs, each under the name the call counted it as (a sweep's
    default counts the runs stored under its base recipe's name: same configuration, another label)."""
    import dataclasses

    if not named:
        return []
    rows = {r.run_id: r for r in store.runs(run_ids=[rid for _, rid in named])}
    return [dataclasses.replace(rows[rid], recipe=name) for name, rid in named if rid in rows]


def recorded_designs(store, result) -> list:
    """The sequential designs the runs a call used were launched under (each run records its own)."""
    from toolkit.analysis import sequential as seq

    used = [rid for ids in result.get("used", {}).values() for rid in ids]
    found = [seq.Design.from_record((r.extra or {}).get("sequential")) for r in store.runs(run_ids=used)] if used else []
    return list(dict.fromkeys(d for d in found if d is not None))


def _design_words(d) -> str:
    return f"{d.min_repeats}..{d.max_repeats} launches each, min_effect {100 * d.min_effect:g}%"


def print_sequential(result, design, store, recipes, *, quiet: bool, to=None) -> None:
    from toolkit.analysis import launch_cost, sequential as seq

    from toolkit.analysis import spread_flag

    result["sequential_legend"] = seq.legend(design)
    result["spread_flag_legend"] = spread_flag.legend()
    used = [rid for ids in result.get("used", {}).values() for rid in ids]
    result["cost"] = launch_cost.cost(_as_named(store, result["runs"]),
                                      _as_named(store, [(n, rid) for n, ids in result.get("used", {}).items() for rid in ids]),
                                      {r.name: r for r in recipes})
    if used and any(not v["settled"] for v in result["sequential"]):  # what else ran on the box, when it matters
        from toolkit.results.box_flags import notes

        result["box"] = notes(store.runs(run_ids=used))
    recorded = recorded_designs(store, result)
    if not result["runs"] and recorded and design not in recorded:  # judged now under another design than launched
        result["design_note"] = (
            "nothing launched: these verdicts use this call's design (" + _design_words(design) + "); the stored runs "
            "were launched under " + " and ".join(_design_words(d) for d in recorded) + ", which compare and the "
            "report judge them with (pass the same flags to compare, or --min-effect)")
    if quiet:
        return
    out = to or console
    out.print(launch_cost.describe(result["cost"]), markup=False, highlight=False)
    if result.get("design_note"):
        out.print(f"note: {result['design_note']}", markup=False, highlight=False)
    for v in result["sequential"]:
        out.print(f"{v['recipe']} vs {v['reference']}, {v['metric']} @ {v['point']}: {v['text']}", markup=False,
                  highlight=False)
    for f in result.get("spread_flags", []):
        out.print(f"noisy: {f['metric']} @ {f['point']}: {f['text']}", markup=False, highlight=False)
    for line in result.get("box", []):
        out.print(f"box: {line}", markup=False, highlight=False)
    err.print(f"[dim]{seq.legend(design)}[/]")
