"""`patchbench compare A B [C ...]`: ratio to the first recipe per point and metric, with a 95% CI
and a significance verdict; `--run` measures the recipes that have no results first (interleaved)."""

from __future__ import annotations

from toolkit.commands.common import console, err, home_of, load, print_json, store_of

HELP = "compare stored results of recipes against the first (ratio, 95% CI, Mann-Whitney verdict)"

DEFAULT_METRICS = ("output_tok_s", "itl_ms_median", "ttft_ms_median", "tpot_ms_mean", "decode_tok_s")


def add_arguments(parser) -> None:
    parser.add_argument("recipes", nargs="+", metavar="RECIPE", help="baseline first, then the variants")
    parser.add_argument("--run", action="store_true", help="measure recipes without results first (interleaved)")
    parser.add_argument("--repeats", type=int, default=None, help="with --run: server launches per recipe")
    parser.add_argument("--metric", action="append", default=None, help=f"metrics (default: {', '.join(DEFAULT_METRICS)})")
    parser.add_argument("--point", type=int, action="append", default=None, help="only these batch sizes / concurrencies")
    parser.add_argument("--all-metrics", action="store_true", help="every stored metric")
    parser.add_argument("--group", default=None, help="only runs of one sweep (its group id, shown by `results`)")
    parser.add_argument("--unverified", action="store_true", help="also use runs whose config was not verified (imports)")
    parser.add_argument("--kernels", action="store_true", help="kernel-family diff of stored profiles (patchbench profile)")
    parser.add_argument("--json", action="store_true")


def explain_differences(store, recipes: list[str]) -> list[str]:
    """What else differed between the baseline's newest ok run and each variant's (versions, flags...)."""
    from toolkit.analysis.compare import diff_provenance

    newest = {}
    for name in recipes:
        runs = store.runs(recipe=name, status="ok", newest_first=True, limit=1)
        if runs:
            newest[name] = runs[0]
    lines = []
    base = newest.get(recipes[0])
    for name in recipes[1:]:
        if base and name in newest:
            diffs = diff_provenance(base, newest[name])
            lines.append(f"{recipes[0]} -> {name}: " + ("; ".join(diffs) if diffs else "no other difference recorded"))
    return lines


def run(args) -> int:
    from toolkit.analysis.compare import compare_recipes, missing_recipes, render_compare

    if len(args.recipes) < 2:
        from toolkit.errors import BadInput

        raise BadInput("compare needs a baseline and at least one variant")
    store = store_of(args)
    if args.kernels:  # the kernel-family diff lives in toolkit.profile
        from toolkit.profile.render import kernel_compare

        items, data = kernel_compare(store, args.recipes)
        for item in items if not args.json else []:
            console.print(item)
        return print_json(data) or 0 if args.json else 0
    if args.run:
        missing = missing_recipes(store, args.recipes)
        if missing:
            from toolkit.pipeline import run_sweep

            err.print(f"measuring {', '.join(missing)} first")
            run_sweep([load(r) for r in missing], home=home_of(args), store=store, repeats=args.repeats,
                      console=err)
    metrics = None if args.all_metrics else (args.metric or list(DEFAULT_METRICS))
    rows = compare_recipes(store, args.recipes, metrics=metrics, points=args.point, group_id=args.group,
                           require_verified=not args.unverified)
    diffs = explain_differences(store, args.recipes)
    if args.json:
        print_json({"rows": [r.__dict__ for r in rows], "differences": diffs,
                    "efficiency": efficiency_lines(store, args.recipes)})
        return 0
    console.print(render_compare(rows, title=f"{' vs '.join(args.recipes[1:])} against {args.recipes[0]}"))
    for line in diffs:
        console.print(f"[dim]what else differed:[/] {line}")
    for line in efficiency_lines(store, args.recipes):
        console.print(f"[dim]vs roofline:[/] {line}")
    return 0


def efficiency_lines(store, recipes: list[str]) -> list[str]:
    """Measured tok/s at point 1 over the theoretical roofline, for recipes naming model and GPU."""
    from toolkit.report import efficiency

    lines = []
    for name in recipes:
        runs = store.runs(recipe=name, status="ok", config_verified=True)
        if not runs:
            continue
        eff = efficiency(runs[-1], store.samples([r.run_id for r in runs]))
        if eff is not None:
            lines.append(f"{name}: {eff.text()}")
    return lines
