"""`patchbench plan RECIPE...`: launches and GPU hours a comparison is expected to take, before it starts.

Per recipe: the launch-to-launch spread of its headline throughput (first point) over its stored
runs (3% assumed below two), the mean seconds a launch held its GPUs (launch to ready + benchmark;
the recipe's `[server] timeout_s` when none is recorded), and for effects of 2%, 5% and 20% the
launches each side a sequential verdict is expected to take (toolkit.analysis.launch_plan) and the
GPU hours of such a pair (x tp x dp).
"""

from __future__ import annotations

from toolkit.commands.common import console, load, print_json, recipe_arg, store_of

HELP = "estimate the launches and GPU hours of comparing recipes (sequential verdicts), before running"


def add_arguments(parser) -> None:
    recipe_arg(parser, many=True)
    parser.add_argument("--max-repeats", type=int, default=None, metavar="N", help="as `run --max-repeats` (default: the recipe's `[benchmark] max_repeats`, 8)")
    parser.add_argument("--min-effect", type=float, default=None, metavar="FRACTION",
                        help="as `run --min-effect` (default: the recipe's `[benchmark] min_effect`)")
    parser.add_argument("--json", action="store_true")


def run(args) -> int:
    from toolkit.analysis import launch_cost, launch_plan, noise_prior, sequential as seq, sequential_design as designs
    from toolkit.analysis.selection import values_at

    store = store_of(args)
    out = []
    for ref in args.recipes:
        recipe = load(ref)
        design = designs.for_bench(recipe.benchmark, min_effect=args.min_effect, max_repeats=args.max_repeats)
        b = recipe.benchmark
        metric = "decode_tok_s" if b.driver == "one-batch" else "output_tok_s"
        point = (b.batch_sizes if b.driver == "one-batch" else b.concurrency)[0]
        runs = [r for r in store.runs(recipe=recipe.name, status="ok") if r.kind == "benchmark"]
        ids = [r.run_id for r in runs]
        values = values_at(store.samples(ids, metric=metric), metric, point, ids) if ids else []
        spread = launch_plan.spread_of(values)
        timed = [launch_cost.launch_seconds(r) for r in runs if launch_cost.launch_seconds(r) > 0]
        seconds = sum(timed) / len(timed) if timed else float(recipe.server.timeout_s)
        gpus = launch_cost.gpus_held(recipe)
        used = spread if spread is not None else launch_plan.ASSUMED_SPREAD
        # a recipe that pools its stored spread (`pool_stored_spread`): the stopping rule borrows the
        # stored launches' degrees of freedom, as `run` will (this recipe's; a stored counterpart adds its own)
        prior_dof = len(values) - 1 if design.pool_stored and spread is not None else 0
        rows = []
        for eff in launch_plan.EFFECTS:
            e = launch_plan.expected(eff, used, design, prior_dof=prior_dof)
            rows.append({"effect": eff, "launches_each": round(e.launches_each, 2), "settled": e.settled,
                         "hours": round(launch_plan.gpu_hours(e.launches_each, seconds, 1), 3),
                         "gpu_hours": round(launch_plan.gpu_hours(e.launches_each, seconds, gpus), 3)})
        out.append({"recipe": recipe.name, "metric": metric, "point": point, "runs": len(values),
                    "spread": used, "spread_from": "runs" if spread is not None else "assumed",
                    "seconds_per_launch": round(seconds, 1), "seconds_from": "runs" if timed else "timeout_s",
                    "gpus": gpus, "prior_dof": min(prior_dof, noise_prior.MAX_DOF), "effects": rows,
                    "legend": seq.legend(design)})
    if args.json:
        print_json({"plans": out})
        return 0
    for p in out:
        src = f"over {p['runs']} runs" if p["spread_from"] == "runs" else "assumed: fewer than 2 runs stored"
        secs = "recorded" if p["seconds_from"] == "runs" else "[server] timeout_s: none recorded"
        console.print(f"{p['recipe']}: {p['metric']} @ {p['point']} varies {100 * p['spread']:.1f}% launch to launch "
                      f"({src}); a launch holds {_gpus(p['gpus'])} for {p['seconds_per_launch']:.0f} s ({secs})"
                      + (f"; the stopping rule pools the stored spread (~{p['prior_dof']} df)" if p["prior_dof"] else ""),
                      markup=False, highlight=False)
        for r in p["effects"]:
            cost = f"~{r['gpu_hours']:.2f} GPU hours" if p["gpus"] else f"~{r['hours']:.2f} hours (no GPU)"
            console.print(f"  effect {100 * r['effect']:g}%: ~{r['launches_each']:.1f} launches each, settled in "
                          f"{100 * r['settled']:.0f}%, {cost} a pair", markup=False, highlight=False)
    if out:
        console.print(f"[dim]{out[0]['legend']}[/]")
    return 0


def _gpus(n: int) -> str:
    return "no GPU ([server] gpus = 0)" if n == 0 else f"{n} GPU(s)"
