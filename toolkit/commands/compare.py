"""`patchbench compare A B [C ...]`: ratio to the first recipe per point and metric, with a 95% CI
and a significance verdict; `--run` measures the recipes that have no results first (interleaved).
The runs used are chosen by `toolkit.analysis.selection` and named under the table."""

from __future__ import annotations

from toolkit.commands.common import definitions, known_recipes, same_configuration_labels, same_twice, console, err, home_of, load, positive_int, print_json, store_of

HELP = "compare stored results of recipes against the first (ratio, 95% CI, Mann-Whitney verdict)"


def add_arguments(parser) -> None:
    from toolkit.results import metrics
    from toolkit.analysis.selection import add_min_effect_argument, add_selection_arguments

    parser.add_argument("recipes", nargs="+", metavar="RECIPE", help="baseline first, then the variants")
    parser.add_argument("--run", action="store_true", help="measure recipes without results first (interleaved)")
    parser.add_argument("--repeats", type=positive_int, default=None, help="with --run: server launches per recipe")
    parser.add_argument("--metric", action="append", default=None, metavar="NAME[@POINT]",
                        help=f"metrics (default: {', '.join(metrics.default_names())}). Known: {metrics.help_text()}")
    parser.add_argument("--point", type=int, action="append", default=None, help="only these batch sizes / concurrencies")
    parser.add_argument("--all-metrics", action="store_true", help="every stored metric")
    add_min_effect_argument(parser, sequential=True)
    add_selection_arguments(parser)
    parser.add_argument("--kernels", action="store_true", help="kernel-family diff of stored profiles (patchbench profile)")
    parser.add_argument("--kernels-table", action="store_true",
                        help="per-shape diff of stored kernel tables (patchbench kernels); --op/--backend narrow it")
    parser.add_argument("--op", default=None, help="with --kernels-table: only this op")
    parser.add_argument("--backend", default=None, help="with --kernels-table: only this backend")
    parser.add_argument("--json", action="store_true")


def explain_differences(sel) -> list[str]:
    """What else differed between the baseline's newest selected run and each variant's."""
    from toolkit.analysis.compare import diff_provenance
    from toolkit.analysis.provenance import run_env_differences

    base = sel.recipes[0]
    lines = []
    for name in sel.recipes[1:]:
        diffs = diff_provenance(sel.newest(base), sel.newest(name)) + run_env_differences(sel.newest(base), sel.newest(name))
        lines.append(f"{base} -> {name}: " + ("; ".join(diffs) if diffs else "no other difference recorded"))
    return lines


def box_lines(sel) -> list[str]:
    """GPU-state flags of the runs used (throttling, foreign processes, clocks apart from the others)."""
    from toolkit.results.box_flags import box_lines as lines

    return lines([r for name in sel.recipes for r in sel.runs[name]],
                 {r.run_id: name for name in sel.recipes for r in sel.runs[name]})


def server_lines(sel) -> list[str]:
    """What the servers said of the runs used: their accounts (retractions, eager decode passes,
    prefix-cache hits) and their capacity (launches sized apart, concurrency above the running limit)."""
    from toolkit.results import capacity
    from toolkit.run.bench.server_account import run_lines

    runs = [r for name in sel.recipes for r in sel.runs[name]]
    label = {r.run_id: name for name in sel.recipes for r in sel.runs[name]}
    return capacity.lines(runs, label) + run_lines(runs, label)


def tactic_lines(sel) -> list[str]:
    """Which FlashInfer tactics the runs used chose (toolkit.analysis.tactics): per recipe across its
    launches, and each variant against the baseline; none where nothing was tuned."""
    from toolkit.analysis.tactics import lines

    return lines({name: sel.runs[name] for name in sel.recipes}, base=sel.recipes[0])


def efficiency_lines(store, sel) -> list[str]:
    """Decode-only tok/s at point 1 over the decode roofline (toolkit.analysis.efficiency), for recipes
    naming model and GPU."""
    from toolkit.analysis.efficiency import efficiency

    lines = []
    for name in sel.recipes:
        eff = efficiency(sel.newest(name), store.samples(sel.run_ids(name)))
        if eff is not None:
            lines.append(f"{name}: {eff.text()}")
    return lines


def run(args) -> int:
    from toolkit.results import metrics
    from toolkit.analysis import stats
    from toolkit.analysis.compare import compare_selection, missing_recipes, render_compare
    from toolkit.analysis.selection import MissingResults, criteria_from_args, select
    from toolkit.analysis.where import where_by_recipe
    from toolkit.errors import BadInput
    from rich.markup import escape

    if len(args.recipes) < 2:
        raise BadInput("compare needs a baseline and at least one variant")
    explicit = args.min_effect  # sets the fixed rule's and the sequential verdict's zone alike
    args.min_effect = stats.DEFAULT_MIN_EFFECT if explicit is None else explicit
    same_twice(args.recipes)
    specs = None if args.all_metrics else metrics.parse_specs(args.metric or metrics.default_names())
    if args.kernels_table:  # per-shape kernel tables live in toolkit.kernels
        from toolkit.kernels.compare import compare_recipes

        items, data = compare_recipes(home_of(args), list(args.recipes), op=args.op, backend=args.backend,
                                      min_effect=args.min_effect)
        if args.json:
            print_json(data)
        else:
            for item in items:
                console.print(item)
        return 0
    store = store_of(args)
    known_recipes(store, list(args.recipes))
    if args.kernels:  # the kernel-family diff lives in toolkit.profile
        from toolkit.profile.render import kernel_compare

        items, data = kernel_compare(store, args.recipes)
        if args.json:
            print_json(data)
            return 0
        for item in items:
            console.print(item)
        return 0
    criteria = criteria_from_args(args)
    if args.run:
        missing = missing_recipes(store, args.recipes, criteria, current=definitions(args.recipes))
        if missing:
            from toolkit.analysis.same_server_runs import refusal
            from toolkit.run.pipeline import run_sweep

            same = refusal(store, list(args.recipes), missing, definitions(args.recipes))
            if same is not None:  # measuring it would launch the other's server again, under its name
                raise same

            err.print(f"measuring {', '.join(missing)} first")
            run_sweep([load(r) for r in missing], home=home_of(args), store=store, repeats=args.repeats,
                      console=err)
    try:
        sel = select(store, args.recipes, criteria, current=definitions(args.recipes),
                     metrics=sorted({s.metric for s in specs}) if specs else None)
    except MissingResults as exc:
        from toolkit.analysis.same_server_runs import refusal

        same = refusal(store, list(args.recipes), exc.recipes, definitions(args.recipes))
        if same is not None:  # a sweep found it to be another configuration's server: no runs of its own
            raise same from None
        elsewhere = {n: same_configuration_labels(store, n) for n in exc.recipes}
        named = "; ".join(f"{n}'s configuration is stored as {', '.join(o)}" for n, o in elsewhere.items() if o)
        if named:
            exc.hint = (f"{named} (a sequential run counts those runs for it): compare that label, "
                        "or `patchbench run ... --fixed` to measure it under its own name")
            raise exc from None
        raise
    from toolkit.analysis.sequential_design import for_ref as sequential_design

    design = sequential_design(args.recipes[0], explicit)
    rows = compare_selection(store, sel, metrics=specs, points=args.point, min_effect=args.min_effect,
                             sequential=design, zone=explicit)
    if not rows and args.metric:
        base_samples = store.samples(sel.run_ids(sel.recipes[0]))
        measured = sorted({s.metric for s in base_samples})
        points = metrics.measured_points(base_samples, specs or [])  # NAME@POINT at a point not measured
        raise BadInput(f"{', '.join(args.metric)}: not measured by both {sel.recipes[0]} and the variants"
                       + (f" at point(s) {', '.join(map(str, args.point))}" if args.point else ""),
                       hint=f"{sel.recipes[0]}: {points}" if points
                       else f"{sel.recipes[0]} measured: {', '.join(measured) or 'nothing'}")
    diffs = explain_differences(sel)
    from toolkit.analysis.compare import fixed_rule_used, interval_legends, sequential_legends

    # the rule of each row: the fixed one, the sequential design a pair was launched under, or the sequential
    # verdict of rows too small for the fixed rule (only the rules that judged a row are stated)
    legend = "\n".join(([stats.verdict_legend(min_effect=args.min_effect)] if fixed_rule_used(rows) else [])
                       + sequential_legends(rows, design) + interval_legends(rows))
    from toolkit.analysis import quality_runs

    answers = quality_runs.verdicts(sel)
    floor = quality_runs.reference_floor(sel)
    from toolkit.analysis.compare import spread_flags_of

    noisy = spread_flags_of(store, rows)  # a configuration far noisier than its peers, as run flags it
    from toolkit.analysis import verdict_cost

    # what every launch of these configurations cost, said apart, and each verdict's: the lines results and report print
    recipe_costs, pair_costs = verdict_cost.of_selection(store, sel, rows)
    if args.json:
        print_json({"rows": [r.__dict__ for r in rows], "differences": diffs, "legend": legend,
                    "spread_flags": noisy,
                    "cost": {"recipes": {c.recipe: c.to_dict() for c in recipe_costs},
                             "pairs": [p.to_dict() for p in pair_costs]},
                    "quality": {v: {str(p): q.to_dict() for p, q in per.items()} for v, per in answers.items()},
                    "quality_floor": {v: {str(p): q.to_dict() for p, q in per.items()} for v, per in floor.items()},
                    "gate": {v: g.to_dict() for v, g in quality_runs.gate_verdicts(sel).items()},
                    "efficiency": efficiency_lines(store, sel), "runs": {r: sel.run_ids(r) for r in sel.recipes},
                    "judged_runs": judged_runs(sel, rows),
                    "box": box_lines(sel), "server": server_lines(sel), "tactics": tactic_lines(sel),
                    "group": sel.group_id, "selection": sel.describe(), "notes": list(sel.notes),
                    "min_effect": args.min_effect,
                    "measured_where": {f"{r}:{m}": t for (r, m), t in where_by_recipe(sel.runs).items()}})
        return 0
    if not rows:
        looked = "; ".join(sel.describe())
        raise BadInput("nothing to compare: no metric measured by both at the points asked "
                       f"(runs looked at: {looked})", hint="`patchbench results --selected "
                       + " ".join(args.recipes) + "` lists them")
    console.print(render_compare(rows, title=f"{' vs '.join(args.recipes[1:])} against {args.recipes[0]}",
                                 where=where_by_recipe(sel.runs), quality=answers))
    console.print(f"[dim]{legend}[/]")
    for f in noisy:
        console.print(f"[yellow]noisy:[/] {escape(f['metric'])} @ {f['point']}: {escape(f['text'])}", highlight=False)
    if noisy:
        from toolkit.analysis import spread_flag

        console.print(f"[dim]{escape(spread_flag.legend())}[/]")
    for line in quality_runs.lines({**{f"{name} (against itself)": per for name, per in floor.items()}, **answers}):
        console.print(f"answers: {escape(line)}", highlight=False)
    gates = quality_runs.gate_verdicts(sel)
    for name, gate in gates.items():
        console.print(f"gate: {escape(name)}: {escape(gate.text)}", highlight=False)
    for rule in dict.fromkeys(g.rule for g in gates.values() if g.rule):
        console.print(f"[dim]{escape(rule)}[/]")
    if any(answers.values()) or floor:
        for rule in quality_runs.legends({**floor, **answers}):
            console.print(f"[dim]{escape(rule)}[/]")
    for line in sel.describe():
        console.print(f"[dim]runs used:[/] {escape(line)}", highlight=False)
    for line in judged_lines(sel, rows):
        console.print(f"[dim]judged:[/] {escape(line)}", highlight=False)
    for line in sel.notes:
        console.print(f"[yellow]note:[/] {escape(line)}")
    for line in diffs:
        console.print(f"[dim]what else differed:[/] {escape(line)}")
    for line in box_lines(sel):
        console.print(f"[yellow]box:[/] {escape(line)}", highlight=False)
    for line in server_lines(sel):
        console.print(f"[yellow]server:[/] {escape(line)}", highlight=False)
    for line in tactic_lines(sel):
        console.print(f"[dim]tactics:[/] {escape(line)}", highlight=False)
    for line in efficiency_lines(store, sel):
        console.print(f"[dim]vs roofline:[/] {escape(line)}")
    for line in [*(c.text() for c in recipe_costs), *(p.text() for p in pair_costs)]:
        console.print(f"cost: {line}", markup=False, highlight=False)
    console.print(f"[dim]{escape(verdict_cost.LEGEND)}[/]")
    return 0


def judged_runs(sel, rows) -> dict[str, list[str]]:
    """Each recipe's runs that its rows judged (a sequential pair's: the launches made with the other side,
    up to its deciding look), in the selection's order."""
    judged: dict[str, set] = {}
    for r in rows:
        judged.setdefault(r.baseline, set()).update(r.base_runs)
        judged.setdefault(r.recipe, set()).update(r.variant_runs)
    return {name: [i for i in sel.run_ids(name) if i in judged.get(name, ())] for name in sel.recipes}


def judged_lines(sel, rows) -> list[str]:
    """One line per recipe whose rows judged fewer runs than `runs used` lists: which, and why the rest are not."""
    out = []
    for name, ids in judged_runs(sel, rows).items():
        every = sel.run_ids(name)
        if ids and len(ids) < len(every):
            out.append(f"{name}: the rows judged {len(ids)} of its {len(every)} run(s) [{', '.join(i[:8] for i in ids)}]: "
                       "a sequential pair is read over the launches made with the other side, up to its deciding look; "
                       "the others are another campaign's or later")
    return out
