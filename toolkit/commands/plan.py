"""`patchbench plan RECIPE...`: launches and GPU hours a comparison is expected to take, before it starts.

Per recipe: the launch-to-launch spread of its headline throughput (at its noisiest benchmark point:
`run` launches until the pair is settled at every point) over its stored
runs of its configuration as defined now (3% assumed below two), the median seconds a launch held its GPUs (launch to ready + benchmark;
without such runs, the best stored evidence: toolkit.analysis.launch_time, said in the line), and for no change and effects of 2%, 5% and 20% the
launches each side a sequential verdict is expected to take (toolkit.analysis.launch_plan) and the
GPU time of such a pair (x tp x dp). With several recipes, the campaign: the first against each other,
its launches and GPU time at each effect (the reference launches until its last pair settles), beside
the fixed design's (each recipe's `[benchmark] repeats`).
"""

from __future__ import annotations

from toolkit.commands.common import console, load, print_json, recipe_arg, store_of

HELP = "estimate the launches and GPU hours of comparing recipes (sequential verdicts), before running"


def add_arguments(parser) -> None:
    recipe_arg(parser, many=True)
    parser.add_argument("--max-repeats", type=int, default=None, metavar="N", help="as `run --max-repeats` (default: the recipe's `[benchmark] max_repeats`, 16)")
    parser.add_argument("--min-effect", type=float, default=None, metavar="FRACTION",
                        help="as `run --min-effect` (default: the recipe's `[benchmark] min_effect`)")
    parser.add_argument("--json", action="store_true")


def _load_labelled(ref: str, store):
    """(recipe, the name its runs are stored under): a recipe, or a variant label with stored runs
    (`full-stack@prefix2` of attribute/bisect, `demo/update@0.1.5` of track), planned with its base
    recipe's benchmark and server."""
    from toolkit.errors import BadInput

    try:
        recipe = load(ref)
        return recipe, recipe.name
    except BadInput:
        if "@" not in ref or not store.runs(recipe=ref, limit=1):
            raise
    return load(ref.split("@", 1)[0]), ref


def run(args) -> int:
    from toolkit.analysis import launch_cost, launch_plan, launch_time, noise_prior, sequential as seq, sequential_design as designs
    from toolkit.analysis.selection import values_at
    from toolkit.results.records import bench_key

    store = store_of(args)
    out = []
    loaded = [_load_labelled(ref, store) for ref in args.recipes]
    swept = []
    if len(loaded) == 1:  # a recipe with a [matrix]: planned as `sweep` measures it, the default against each variant
        from toolkit.recipe.load import expand_recipe

        swept = expand_recipe(loaded[0][0])
        loaded += [(v, v.name) for v in swept]
    # with several recipes every pair is judged with the reference's design, as `run` judges it (a
    # candidate's own max_repeats/min_effect is unused there): its rows are planned with that design too
    shared = designs.for_bench(loaded[0][0].benchmark, min_effect=args.min_effect, max_repeats=args.max_repeats) \
        if len(loaded) > 1 else None
    notes = designs.unused_settings(loaded[0][0], [r for r, _ in loaded[1:]])
    if swept:
        notes.insert(0, f"{loaded[0][1]} has a [matrix]: planned as `patchbench sweep` measures it, the default "
                        f"configuration against each of its {len(swept)} variants")
    for recipe, name in loaded:
        design = shared or designs.for_bench(recipe.benchmark, min_effect=args.min_effect, max_repeats=args.max_repeats)
        b = recipe.benchmark
        metric = "decode_tok_s" if b.driver == "one-batch" else "output_tok_s"
        runs = current_runs(store, name)
        ids = [r.run_id for r in runs]
        samples = store.samples(ids, metric=metric) if ids else []
        # `run` launches until the pair is settled at every point: the noisiest point decides the launches
        by_point = {c: values_at(samples, metric, c, ids) if ids else []
                    for c in (b.batch_sizes if b.driver == "one-batch" else b.concurrency)}
        spreads = {c: launch_plan.spread_of(v) for c, v in by_point.items()}
        known = [c for c, sp in spreads.items() if sp is not None]
        point = max(known, key=lambda c: spreads[c]) if known else next(iter(by_point))
        values, spread = by_point[point], spreads[point]
        gpus = launch_cost.gpus_held(recipe)
        timed = any(launch_cost.launch_seconds(r) > 0 for r in runs)  # its own runs decide: no other evidence read
        took = launch_time.estimate(runs, [] if timed else evidence_pools(store, recipe, name, ids, gpus),
                                    bench_key=bench_key(b.driver, b.params()), timeout_s=recipe.server.timeout_s)
        seconds = took.seconds
        used, spread_from = launch_plan.planning_spread(spread, len(values))
        # a recipe that pools its stored spread (`pool_stored_spread`): the stopping rule borrows the
        # stored launches' degrees of freedom, as `run` will (this recipe's; a stored counterpart adds its own)
        prior_dof = len(values) - 1 if design.pool_stored and spread is not None else 0
        rows = []
        for eff in launch_plan.EFFECTS:
            e = launch_plan.expected(eff, used, design, prior_dof=prior_dof)
            rows.append({"effect": eff, "launches_each": round(e.launches_each, 2), "settled": e.settled,
                         "hours": round(launch_plan.gpu_hours(e.launches_each, seconds, 1), 3),
                         "gpu_hours": round(launch_plan.gpu_hours(e.launches_each, seconds, gpus), 3)})
        # the worst case of a pair of two such recipes: neither settles nor turns futile before the cap
        worst = {"max_repeats": design.max_repeats, "launches": 2 * design.max_repeats,
                 "hours": round(launch_plan.gpu_hours(design.max_repeats, seconds, 1), 3),
                 "gpu_hours": round(launch_plan.gpu_hours(design.max_repeats, seconds, gpus), 3)}
        out.append({"recipe": name, "metric": metric, "point": point, "runs": len(values),
                    "spreads": {str(c): sp for c, sp in spreads.items()},
                    "spread": used, "spread_measured": spread, "spread_from": spread_from,
                    "seconds_per_launch": round(seconds, 1), "seconds_from": took.source, "seconds_why": took.text,
                    "gpus": gpus, "prior_dof": min(prior_dof, noise_prior.MAX_DOF), "effects": rows,
                    "worst": worst, "legend": seq.legend(design)})
    campaign = campaign_of(out, [r for r, _ in loaded], designs, args) if len(out) > 1 else None
    if args.json:
        print_json({"plans": out, "campaign": campaign, "notes": notes})
        return 0
    for line in notes:
        console.print(f"note: {line}", markup=False, highlight=False)
    for p in out:
        src = {"runs": f"over {p['runs']} runs",
               "few runs": (f"over {p['runs']} runs, too few to take at face value: planned at {100 * p['spread']:.1f}%, "
                            f"the larger of its {100 * launch_plan.UPPER_LEVEL:.0f}% upper bound and the assumed "
                            f"{100 * launch_plan.ASSUMED_SPREAD:g}%"),
               "assumed": "assumed: fewer than 2 runs stored"}[p["spread_from"]]
        secs = p["seconds_why"]
        others = [f"@ {c} {100 * sp:.1f}%" for c, sp in p["spreads"].items() if sp is not None and c != str(p["point"])]
        noisiest = f"; its noisiest point, as every point must settle: {', '.join(others)}" if others else ""
        shown = p["spread"] if p["spread_measured"] is None else p["spread_measured"]
        console.print(f"{p['recipe']}: {p['metric']} @ {p['point']} varies {100 * shown:.1f}% launch to launch "
                      f"({src}{noisiest}); a launch holds {_gpus(p['gpus'])} for {p['seconds_per_launch']:.0f} s ({secs})"
                      + (f"; the stopping rule pools the stored spread (~{p['prior_dof']} df)" if p["prior_dof"] else ""),
                      markup=False, highlight=False)
        for r in p["effects"]:
            cost = _held(r["hours"] * 3600, r["gpu_hours"] * 3600)
            console.print(f"  {_effect(r['effect'])}: ~{r['launches_each']:.1f} launches each, settled in "
                          f"{100 * r['settled']:.0f}%, {cost} a pair of two such recipes", markup=False, highlight=False)
        w = p["worst"]
        console.print(f"  at worst (the pair never settles before the cap, max_repeats {w['max_repeats']}): "
                      f"{w['max_repeats']} launches each, {_held(w['hours'] * 3600, w['gpu_hours'] * 3600)} a pair",
                      markup=False, highlight=False)
    if campaign:
        console.print(f"campaign: {campaign['reference']} against {', '.join(campaign['variants'])}, every variant's "
                      "effect the same:", markup=False, highlight=False)
        for r in campaign["effects"]:
            console.print(f"  {_effect(r['effect'])}: ~{r['launches']:.0f} launches, {_held(r['seconds'], r['gpu_seconds'])}",
                          markup=False, highlight=False)
        f = campaign["fixed"]
        console.print(f"  the fixed design (each recipe's [benchmark] repeats): {f['launches']} launches, "
                      f"{_held(f['seconds'], f['gpu_seconds'])}", markup=False, highlight=False)
        w = campaign["worst"]
        console.print(f"  at worst (no pair settles before the cap, max_repeats {w['max_repeats']}): {w['launches']} "
                      f"launches, {_held(w['seconds'], w['gpu_seconds'])}; lower the cap with --max-repeats or "
                      "`[benchmark] max_repeats`", markup=False, highlight=False)
    if out:
        console.print(f"[dim]{out[0]['legend']}[/]")
    return 0


def evidence_pools(store, recipe, name: str, current: list[str], gpus: int) -> list:
    """Stored launches that tell a launch's time where the configuration has no runs, best first
    (toolkit.analysis.launch_time): the recipe's own other launches (profile, verify, older definitions),
    other recipes' launches of the same env, then of the same model on as many GPUs."""
    from toolkit.analysis.verdict_cost import run_gpus

    current_ids = set(current)
    own = [r for r in store.runs(recipe=name, limit=None) if r.run_id not in current_ids]
    keys = sorted({r.env_key for r in own if r.env_key})
    env = [r for r in store.runs(env_key=keys, limit=None) if r.recipe != name] if keys else []
    model = (recipe.to_dict().get("server") or {}).get("model") or recipe.server.model  # as stored: tiny:<name>
    same_model = [r for r in store.runs(status=["ok", "invalid"], limit=None)
                  if r.recipe != name and ((r.recipe_resolved or {}).get("server") or {}).get("model") == model] \
        if model else []
    held = [[r for r in rows if run_gpus(r) == gpus] for rows in (own, env, same_model)]  # a launch on as many GPUs
    return [("recipe", "this recipe (profile, verify or an older definition)", held[0]),
            ("env", "the same env", held[1]), ("model", f"the same model ({model}) on as many GPUs", held[2])]


def current_runs(store, name: str) -> list:
    """The stored benchmark runs of `name`'s configuration as its file defines it now, chosen as compare and
    run choose them (toolkit.analysis.selection: its newest identity): runs of an earlier definition, env
    or benchmark measured something else, and their values would pass for launch-to-launch spread."""
    from toolkit.analysis.selection import MissingResults, select
    from toolkit.commands.common import definitions

    try:
        sel = select(store, [name], current=definitions([name]))
    except MissingResults:
        return []
    return [r for r in sel.runs[name] if r.status == "ok" and r.kind == "benchmark"]


def campaign_of(plans: list[dict], recipes: list, designs, args) -> dict:
    """The whole campaign (the first recipe the reference, each other a pair with it): at each effect, each
    pair's expected launches each at the pair's pooled spread; the reference launches until its last pair
    settles (the most of any pair); seconds and GPU seconds at each recipe's launch time; and the fixed
    design's (each recipe's [benchmark] repeats)."""
    import math

    from toolkit.analysis import launch_plan

    ref, others = plans[0], plans[1:]
    design = designs.for_bench(recipes[0].benchmark, min_effect=args.min_effect, max_repeats=args.max_repeats)
    rows = []
    for eff in launch_plan.EFFECTS:
        each = [launch_plan.expected(eff, math.sqrt((ref["spread"] ** 2 + p["spread"] ** 2) / 2), design).launches_each
                for p in others]
        n_ref = max(each)
        seconds = n_ref * ref["seconds_per_launch"] + sum(n * p["seconds_per_launch"] for n, p in zip(each, others))
        gpu = n_ref * ref["seconds_per_launch"] * ref["gpus"] + sum(
            n * p["seconds_per_launch"] * p["gpus"] for n, p in zip(each, others))
        rows.append({"effect": eff, "launches": round(n_ref + sum(each), 1), "seconds": round(seconds, 1),
                     "gpu_seconds": round(gpu, 1)})
    fixed = [(r.benchmark.repeats, p["seconds_per_launch"], p["gpus"]) for r, p in zip(recipes, plans)]
    capped = [(design.max_repeats, p["seconds_per_launch"], p["gpus"]) for p in plans]  # no pair settles nor turns futile
    return {"reference": ref["recipe"], "variants": [p["recipe"] for p in others], "effects": rows,
            "fixed": _total(fixed), "worst": {**_total(capped), "max_repeats": design.max_repeats}}


def _total(launches: list[tuple[int, float, int]]) -> dict:
    """(launches, seconds a launch, GPUs) per recipe -> the campaign's launches, seconds and GPU seconds."""
    return {"launches": sum(n for n, _, _ in launches), "seconds": round(sum(n * s for n, s, _ in launches), 1),
            "gpu_seconds": round(sum(n * s * g for n, s, g in launches), 1)}


def _held(seconds: float, gpu_seconds: float) -> str:
    """"~2.4 GPU-h (0.3 h)", "~12 GPU-min (3.0 min)", "~4.0 min (no GPU)"."""
    wall = f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"
    if not gpu_seconds:
        return f"~{wall} (no GPU)"
    gpu = f"{gpu_seconds / 3600:.1f} GPU-h" if gpu_seconds >= 3600 else f"{gpu_seconds / 60:.0f} GPU-min"
    return f"~{gpu} ({wall} of launches)"


def _gpus(n: int) -> str:
    return "no GPU ([server] gpus = 0)" if n == 0 else f"{n} GPU(s)"


def _effect(effect: float) -> str:
    return f"effect {100 * effect:g}%" if effect else "no change (settled 'equal' or futile)"
