"""`patchbench attribute RECIPE`: measure the prefix chain of the recipe's stack (base, +p1, +p1+p2,
...) and, with --leave-one-out, the stack minus each patch; print each patch's incremental speedup."""

from __future__ import annotations

import uuid

from rich.markup import escape

from toolkit.commands.common import (console, err, home_of, load, positive_int, print_json,
                                     require_measured_point, store_of)
from toolkit.executors.config import add_executor_arguments

HELP = "what each patch of a recipe's stack buys: prefix chain (and leave-one-out) with CIs and verdicts"


def add_arguments(parser) -> None:
    from toolkit.results import metrics
    from toolkit.analysis.selection import add_min_effect_argument

    parser.add_argument("recipe", metavar="RECIPE")
    parser.add_argument("--metric", default="output_tok_s", metavar="NAME[@POINT]",
                        help=f"default output_tok_s at the first point. Known: {metrics.help_text()}")
    parser.add_argument("--repeats", type=positive_int, default=None,
                        help="values per prefix, fixed (default: sequential, each step measured until its verdict is "
                             "settled; see --fixed)")
    add_sequential_step_arguments(parser)
    parser.add_argument("--leave-one-out", action="store_true", help="also measure the stack minus each patch")
    add_min_effect_argument(parser, sequential=True)
    parser.add_argument("--missing-evidence", action="store_true",
                        help="also count runs stored invalid because a patch's activation evidence was missing "
                             "(in the first measurement and in every replay alike)")
    parser.add_argument("--json", action="store_true")
    add_executor_arguments(parser)


def require_gpu_if_needed(recipe, args=None) -> None:
    """NoGPU (exit 3) when the recipe needs a GPU that this machine lacks; a Slurm node has its own."""
    if getattr(args, "executor", "local") == "slurm":
        return
    from toolkit.run import machine
    from toolkit.errors import NoGPU
    from toolkit.run.pipeline import needs_gpu

    if needs_gpu(recipe) and not machine.has_cuda_gpu():
        raise NoGPU(f"recipe {recipe.name} needs a CUDA GPU to measure; none here "
                    "(`patchbench run RECIPE --until check` verifies everything before the launch)")


def print_gates(gates: dict) -> None:
    """The gate's verdict of each measured variant ("gate: +K PATCH: ..."), then its rule once."""
    from toolkit.analysis import quality_runs

    for line in quality_runs.gate_lines(gates):
        console.print(f"gate: {line}", markup=False, highlight=False)
    for rule in quality_runs.gate_rules(gates):
        console.print(f"[dim]{escape(rule)}[/]")


def print_runs_used(meter, judged: dict | None = None) -> None:
    """One line per measured variant: its env key, the runs its values came from, and when. `judged`
    (VariantMeter.judged): only the runs its verdicts judged, then a line naming the others."""
    for label, key, _, ids in meter.log:
        ids = judged[label][0] if judged and label in judged else ids
        dates = sorted(r.started_at or "" for r in meter.store.runs(run_ids=ids)) if ids else []
        when = f"{dates[0][:16]} .. {dates[-1][:16]}".replace("T", " ") if dates else "?"
        console.print(f"[dim]runs used:[/] {escape(label)} (identity {(key or '-')[:10]}): {len(ids)} run(s) "
                      f"{', '.join(i[:8] for i in ids)}, {when}", highlight=False)
    for line in (meter.judged_lines(judged) if judged else {}).values():
        console.print(f"left out: {line}", markup=False, highlight=False)


def judged_values(meter, judged: dict | None, label: str, values: list | None) -> list | None:
    """`label`'s values as its verdicts judged them (`judged`: VariantMeter.judged; None, or a label no
    verdict judged: all `values`): its stored runs of another campaign left out, as in `values_from`."""
    if values is None or not judged or label not in judged:
        return values
    kept = set(judged[label][0])
    return [v for lab, _, vals, ids in meter.log if lab == label for v, i in zip(vals, ids) if i in kept]


def values_from(meter, judged: dict | None = None) -> list[dict]:
    """Each measured variant's values and their runs as its verdicts judged them (`judged`:
    VariantMeter.judged; None: all), its stored runs of another campaign apart (`left_out`, described)."""
    lines = meter.judged_lines(judged) if judged else {}
    out = []
    for label, key, vals, ids in meter.log:
        kept = set(judged[label][0]) if judged and label in judged else set(ids)
        out.append({"label": label, "identity": key, "values": [v for v, i in zip(vals, ids) if i in kept],
                    "runs": [i for i in ids if i in kept], "left_out": [i for i in ids if i not in kept],
                    "left_out_text": lines.get(label)})
    return out


def run(args) -> int:
    from toolkit.results import metrics
    from toolkit.analysis import stats
    from toolkit.analysis.attribute import attribute, render_attribution
    from toolkit.analysis.variants import (VariantMeter, patch_label, prefix_overrides, stack_of,
                                           without_overrides)
    from toolkit.errors import BadInput

    spec = metrics.parse_spec(args.metric)
    # the fixed rule's floor; the sequential design takes --min-effect when given, else the recipe's
    min_effect = stats.DEFAULT_MIN_EFFECT if args.min_effect is None else args.min_effect
    recipe = load(args.recipe)
    require_measured_point(spec, recipe)
    stack = stack_of(recipe)
    if not stack:
        raise BadInput(f"recipe {recipe.name} has no patches to attribute")
    require_gpu_if_needed(recipe, args)
    meter = VariantMeter(recipe, home_of(args), store_of(args), spec, err, group_id=uuid.uuid4().hex[:12],
                         missing_evidence=args.missing_evidence)
    if args.executor == "slurm":  # each variant one Slurm job
        from toolkit.executors.config import cluster_config
        from toolkit.executors.slurm_variants import SlurmVariantMeter

        meter = SlurmVariantMeter(recipe, meter.home, meter.store, spec, err, group_id=meter.group_id,
                                  missing_evidence=args.missing_evidence,
                                  cfg=cluster_config(args, meter.home), command="attribute")
    repeats = args.repeats or recipe.benchmark.repeats
    design = meter.design = step_design(args, recipe)
    if design is not None:  # sequential launches: a prefix asks its answers only while their verdict is unsettled
        from toolkit.analysis.answers_sequential import Design as AnswersDesign

        meter.answers_design = AnswersDesign()
    names = [patch_label(recipe, p) for _, p in stack]
    if args.executor == "slurm":  # every variant at once, on as many nodes
        meter.submit_ahead([(f"prefix{k}", prefix_overrides(recipe, k), repeats) for k in range(len(stack) + 1)]
                           + [(f"without{i}", without_overrides(recipe, i), repeats)
                              for i in range(1, len(stack) + 1) if args.leave_one_out])
    prefix_values = []
    steps = None
    if design is not None:  # sequential: every step measured until its verdict is settled
        prefix_values, loo, skipped, steps = measure_steps(meter, recipe, stack, names, design,
                                                           spec.info.higher_is_better, args.leave_one_out)
    for k in range(len(stack) + 1 if design is None else 0):
        label = "base" if k == 0 else f"+{k}"
        err.print(f"[bold]prefix {k}/{len(stack)}[/] {escape(label if k == 0 else names[k - 1])}")
        prefix_values.append(meter.measure(f"prefix{k}", prefix_overrides(recipe, k), repeats))
    if design is None:
        loo, skipped = {}, {}
    if args.leave_one_out and design is None:
        for i in range(1, len(stack) + 1):
            err.print(f"[bold]without {escape(names[i - 1])}[/]")
            values = meter.measure(f"without{i}", without_overrides(recipe, i), repeats)
            if values:
                loo[i] = values
            else:
                skipped[i] = meter.skipped.get(f"without{i}", "no values")
    info = spec.info
    result = attribute(prefix_values, higher_is_better=info.higher_is_better, names=names,
                       leave_one_out=loo or None, unit=info.unit, skipped=skipped or None,
                       min_effect=min_effect, sequential=design, stored=meter.stored if design else None,
                       together=meter.together if design else None)
    from toolkit.analysis import quality_runs

    from toolkit.results.artifacts import VouchedStore

    vouched = VouchedStore(meter.store)  # answers only from bytes with the stored sha256
    answers = quality_runs.meter_verdicts(vouched, meter.log, names)
    gates = quality_runs.meter_gates(vouched, meter.log, names)
    unmeasured = unmeasured_prefixes(meter, prefix_values, names)
    # the runs a verdict judged, per variant: the steps' and the table's cumulative rows' (base against each prefix)
    judged = meter.judged([*steps, *(("prefix0", f"prefix{k}") for k in range(2, len(stack) + 1))]) if steps else None
    cost = steps_cost(meter, recipe, judged) if design is not None else None
    if args.json:
        print_json({"recipe": recipe.name, "metric": spec.metric, "point": meter.point, "lines": result.lines(),
                    "unmeasured": unmeasured,
                    "quality": {k: {str(p): q.to_dict() for p, q in per.items()} for k, per in answers.items()},
                    "gate": {k: g.to_dict() for k, g in gates.items()},
                    # the values the verdicts judged (values_from's), never a stored run of another campaign
                    "prefix_values": [judged_values(meter, judged, f"prefix{k}", v) for k, v in enumerate(prefix_values)],
                    "leave_one_out": {i: judged_values(meter, judged, f"without{i}", v) for i, v in loo.items()},
                    "skipped": skipped,
                    "builds": meter.builds, "runs": meter.runs, "min_effect": min_effect,
                    "notes": vouched.notes,
                    "sequential": steps_json(steps, names, meter), "sequential_legend": step_legend(design),
                    "cost": cost,
                    "values_from": values_from(meter, judged)})
        return 1 if unmeasured else 0
    worst = {int(k.split()[0][1:]): quality_runs.worst(per) for k, per in answers.items()}
    for k, g in gates.items():  # "faster, gate failed" never reads as a plain win either
        if g.verdict != "gate passed":
            i = int(k.split()[0][1:])
            worst[i] = ", ".join(x for x in (worst.get(i), g.verdict) if x)
    console.print(render_attribution(result, title=f"{recipe.name}: {spec.metric} at point {meter.point}",
                                     answers=worst))
    if design is None:  # the fixed rule judged every row; launched until settled, the sequential one (its legend below)
        console.print(f"[dim]{escape(stats.verdict_legend(min_effect=min_effect))}[/]")
    else:
        console.print("[dim]every row: the sequential verdict of the values launched until settled (p column "
                      "\"seq.\", its interval; the rule below)[/]")
    print_steps(steps, names, design, meter)
    for line in quality_runs.lines(answers):
        console.print(f"answers: {line}", markup=False, highlight=False)
    if answers:
        for rule in quality_runs.legends(answers):
            console.print(f"[dim]{rule}[/]", markup=True)
    print_gates(gates)
    for line in vouched.notes:
        console.print(f"note: {line}", markup=False, highlight=False)
    print_runs_used(meter, judged)
    if cost is not None:
        from toolkit.analysis.launch_cost import describe

        console.print(describe(cost), markup=False, highlight=False)
    console.print(f"{meter.builds} variant(s) prepared, {meter.runs} new run(s); cached values reused per env key")
    for line in unmeasured:  # a row of dashes is no attribution: say why, and fail
        err.print(f"error: {line}", markup=False, highlight=False)
    return 1 if unmeasured else 0


def unmeasured_prefixes(meter, prefix_values: list, names: list[str]) -> list[str]:
    """One line per prefix of the stack that has no values (it did not apply, build or run): the patch
    it adds, why (the first line of the failure) and the log that says more."""
    import re

    out = []
    for k, values in enumerate(prefix_values):
        if values:
            continue
        why = meter.skipped.get(f"prefix{k}", "no values")
        logs = re.findall(r"\[log(?: kept)?: ([^\]]+)\]", why)
        first = why.splitlines()[0].rstrip(":; ") if why else "no values"
        what = "the base (no patch)" if k == 0 else f"prefix {k} (+{names[k - 1]})"
        out.append(f"{what} not measured: {first}" + (f" (log: {logs[-1]})" if logs and logs[-1] not in first else ""))
    return out


# -- sequential steps (issue 30): each step launched until its verdict is settled ----------------

def add_sequential_step_arguments(parser) -> None:
    parser.add_argument("--fixed", action="store_true",
                        help="the fixed design: the recipe's `[benchmark] repeats` values per variant (as --repeats N)")
    parser.add_argument("--max-repeats", type=positive_int, default=None, metavar="N",
                        help="sequential: launches each at most while a step is not settled "
                             "(default: the recipe's `[benchmark] max_repeats`, 16)")


def steps_cost(meter, recipe, judged: dict | None) -> dict:
    """What the sequential steps cost (toolkit.analysis.launch_cost.cost): the launches of this call, the
    stored ones its verdicts read, against the fixed design (`[benchmark] repeats` a variant). Every
    variant is the recipe with other patches: its launch holds the recipe's GPUs."""
    import dataclasses

    from toolkit.analysis import launch_cost

    label_of = {rid: label for label, _, _, ids in meter.log for rid in ids}  # a variant's runs may carry
    # another recipe's name (a stored run of the base recipe itself): each is costed under its variant
    used = [rid for ids, _ in judged.values() for rid in ids] if judged else list(label_of)

    def rows(ids):
        found = meter.store.runs(run_ids=list(dict.fromkeys(ids))) if ids else []
        return [dataclasses.replace(r, recipe=label_of.get(r.run_id, r.recipe)) for r in found]

    launched, counted = rows(meter.launched), rows(used)
    return launch_cost.cost(launched, counted, {r.recipe: recipe for r in [*launched, *counted]})


def step_design(args, recipe):
    """The sequential design of the steps (no --repeats, no --fixed, local), else None."""
    from toolkit.errors import BadInput

    if args.repeats is not None or args.fixed or getattr(args, "executor", "local") == "slurm":
        if args.max_repeats is not None and (args.repeats is not None or args.fixed):
            raise BadInput("--max-repeats is the sequential design's; --repeats/--fixed are the fixed one")
        return None
    from toolkit.analysis import sequential_design as designs

    return designs.for_bench(recipe.benchmark, min_effect=args.min_effect, max_repeats=args.max_repeats)


def measure_steps(meter, recipe, stack, names, design, hib, leave_one_out: bool):
    """Prefixes (and the stack without each patch) measured until every step's verdict is settled:
    (prefix values, leave-one-out values, skipped, {(A label, B label): Sequential})."""
    from toolkit.analysis.sequential_steps import settle_pairs
    from toolkit.analysis.variants import prefix_overrides, without_overrides

    n = len(stack)
    over = {f"prefix{k}": prefix_overrides(recipe, k) for k in range(n + 1)}
    pairs = [(f"prefix{k - 1}", f"prefix{k}") for k in range(1, n + 1)]
    if leave_one_out:
        over.update({f"without{i}": without_overrides(recipe, i) for i in range(1, n + 1)})
        pairs += [(f"without{i}", f"prefix{n}") for i in range(1, n + 1)]
    err.print(f"sequential: {len(over)} variant(s), each step launched until settled "
              f"({design.min_repeats}..{design.max_repeats} each)")
    values, verdicts = settle_pairs(lambda label, k: meter.measure(label, over[label], k), list(over), pairs,
                                    design, hib, stored=lambda label: meter.stored.get(label, 0),
                                    together=meter.together)
    loo = {i: values[f"without{i}"] for i in range(1, n + 1) if leave_one_out and values.get(f"without{i}")}
    skipped = {i: meter.skipped.get(f"without{i}", "no values") for i in range(1, n + 1)
               if leave_one_out and not values.get(f"without{i}")}
    return [values[f"prefix{k}"] for k in range(n + 1)], loo, skipped, verdicts


def _step_name(a: str, b: str, names) -> str:
    if a.startswith("without"):
        return f"without {names[int(a[len('without'):]) - 1]}"
    return f"+{b[len('prefix'):]} {names[int(b[len('prefix'):]) - 1]}"


def steps_json(steps, names, meter=None):
    if steps is None:
        return None
    return [{"a": a, "b": b, "step": _step_name(a, b, names), "verdict": v.verdict, "settled": v.settled,
             "noisy": v.noisy, "launches_each": v.n, "ratio": v.ratio, "low": v.low, "high": v.high,
             "prior_dof": v.prior_dof, "left_out": list(_left_out(meter, a, b)), "text": _step_text(v, meter, a, b)}
            for (a, b), v in steps.items()]


def _left_out(meter, a: str, b: str) -> tuple[str, ...]:
    """The step's runs from another campaign, left out of its verdict (toolkit.analysis.campaigns)."""
    return meter.left_out(a, b) if meter is not None and hasattr(meter, "left_out") else ()


def _step_text(v, meter, a: str, b: str) -> str:
    from toolkit.analysis.campaigns import qualifier

    return v.text + qualifier(_left_out(meter, a, b))


def step_legend(design):
    from toolkit.analysis import sequential as seq

    return seq.legend(design) if design is not None else None


def print_steps(steps, names, design, meter=None) -> None:
    if steps is None:
        return
    for (a, b), v in steps.items():
        console.print(f"sequential: {_step_name(a, b, names)}: {_step_text(v, meter, a, b)}", markup=False,
                      highlight=False)
    console.print(f"[dim]{escape(step_legend(design))}[/]")
