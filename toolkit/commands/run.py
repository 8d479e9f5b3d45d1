"""`patchbench run RECIPE...`: apply, build, static check, launch, verify, benchmark, store.

Several recipes interleave their repeats (A B A B ...) on the same machine. Without a CUDA GPU
(and a recipe that needs one) it stops after the static check with a clear message.
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
        from toolkit.executors.config import cluster_config
        from toolkit.executors.slurm import run_on_slurm

        result = run_on_slurm(recipes, home=home, store=store, cfg=cluster_config(args, home), repeats=args.repeats,
                              until=args.until, frozen=args.frozen, console=err, strict=args.strict_check)
    else:
        result = run_sweep(recipes, home=home, store=store, repeats=args.repeats, until=args.until,
                           frozen=args.frozen, console=err, strict=args.strict_check)
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
        err.print(f"stopped after `{args.until}` as asked")
    if result.get("bad_input"):  # a recipe refused as bad input (e.g. --strict-check): exit 2, as alone
        return 2
    if result["failed"]:
        return 1
    statuses = {r.status for r in store.runs(run_ids=[rid for _, rid in result["runs"]])}
    return 0 if statuses <= {"ok"} else 1

