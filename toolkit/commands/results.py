"""`patchbench results`: list stored runs, or export them as JSON/CSV."""

from __future__ import annotations

import sys
from collections import defaultdict

from rich import box
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from toolkit.results import metrics
from toolkit.analysis.efficiency import efficiency
from toolkit.analysis.selection import add_selection_arguments, criteria_from_args, reduce, select
from toolkit.commands.common import console, positive_int, store_of
from toolkit.errors import plural

HELP = "list stored runs (status, provenance, headline numbers) or export them (JSON/CSV/PyTorch HUD v3)"


def add_arguments(parser) -> None:
    parser.add_argument("recipes", nargs="*", metavar="RECIPE", help="only these recipes")
    parser.add_argument("--status", choices=["ok", "failed", "invalid", "interrupted", "running"], default=None)
    parser.add_argument("--export", choices=["json", "csv", "hud"], default=None,
                        help="write runs and samples: json (re-importable), csv (one row per sample), hud "
                             "(PyTorch HUD v3 benchmark records: one per configuration, metric and point, "
                             "the repeats as values; ok runs unless --status)")
    parser.add_argument("--output", "-o", default=None, help="export file (default: stdout)")
    parser.add_argument("--limit", type=positive_int, default=50, help="newest runs listed (default %(default)s)")
    parser.add_argument("--selected", action="store_true",
                        help="only the runs compare/report would use for RECIPEs (the first is the baseline)")
    add_selection_arguments(parser)
    parser.add_argument("--check-artifacts", action="store_true",
                        help="check the kept files ([store] artifacts) of the runs listed: ok, missing or altered "
                             "(exit 1 if any is not ok)")
    parser.add_argument("--jobs", action="store_true",
                        help="Slurm jobs (queued, running, done) with their logs; imports the runs of finished ones")


def _headline(samples) -> str:
    """The run's first headline throughput per point (one value per point, as every table reduces)."""
    by_metric = defaultdict(dict)
    for (metric, point, _), obs in reduce(samples).items():
        by_metric[metric][point] = obs.values[0]
    for metric in metrics.throughput_headline():
        if metric in by_metric:
            pts = by_metric[metric]
            return f"{metric}: " + " ".join(f"{p}:{v:.1f}" for p, v in sorted(pts.items()))
    return ""


def _efficiency(run, samples) -> str:
    """Decode-only tok/s at batch/concurrency 1 over the decode roofline, when the recipe names one."""
    eff = efficiency(run, samples)
    return eff.text() if eff else ""


def evidence_flag(run) -> str:
    """Activation evidence of a run's patches: ok, missing, undeclared (N), or - (no patches)."""
    status = (run.extra or {}).get("evidence") or {}
    if not status:
        return "-"
    if "missing" in status.values():
        return "missing"
    undeclared = sum(1 for v in status.values() if v == "undeclared")
    return f"undeclared ({undeclared})" if undeclared else "ok"


def box_flags(runs) -> dict[str, list[str]]:
    """GPU-state flags per run; clocks are compared within each sweep (group) shown."""
    from toolkit.results.box_flags import run_flags

    by_group = defaultdict(list)
    for r in runs:
        by_group[r.group_id or r.run_id].append(r)
    return {rid: f for group in by_group.values() for rid, f in run_flags(group).items()}


def box_cell(run, flags: list[str], wide: bool = False) -> str:
    """The box column: "no GPU state", "ok" or the flags (yellow); wide tables add the median SM
    clock, mean power / limit and peak temperature."""
    from toolkit.results.box_flags import short, state_of

    text = short(run, flags)
    m = state_of(run).get("metrics") or {}
    if wide and m.get("gpu_sm_clock_mhz_median"):
        power = f" {m['gpu_power_w_mean']:.0f}/{m.get('gpu_power_limit_w', 0):.0f} W" if m.get("gpu_power_w_mean") else ""
        temp = f" {m['gpu_temp_c_max']:.0f} C" if m.get("gpu_temp_c_max") is not None else ""
        text += f" ({m['gpu_sm_clock_mhz_median']:.0f} MHz{power}{temp})"
    return f"[yellow]{text}[/]" if flags else text


WIDE = 140  # below this many columns the table drops group/env/gpu and keeps one line per run


def render_runs(store, runs, width: int | None = None):
    """One row per run. Narrow terminals get the columns that identify and judge a run, one line
    each: identifiers are never cut, the box flags, headline and error are shortened at their end;
    the efficiency against the roofline, too long for a cell there, follows the table as one
    "vs roofline: RUN RECIPE: ..." line per run that has one (a Group of both)."""
    width = width or console.width
    wide = width >= WIDE
    table = Table(title="results", title_justify="left", box=box.HEAVY_HEAD if wide else box.SIMPLE_HEAD)
    cols = ["run", "group", "recipe", "rep", "status", "evidence", "box", "env", "gpu", "headline (point:value)",
            "vs roofline", "error"] if wide else ["run", "recipe", "status", "evidence", "box", "headline", "error"]
    rows, effs = [], []
    flags = box_flags(runs)
    for run in runs:
        samples = store.samples([run.run_id])
        effs.append((run, _efficiency(run, samples)))
        status = run.display_status()
        style = {"ok": "green", "invalid": "yellow"}.get(status, "red")
        if run.kind != "benchmark":  # a verification or a profile: shown, never counted in tables
            status, style = f"{status} ({run.kind})", "dim"
        row = {"run": run.run_id[:8], "group": run.group_id or "", "recipe": escape(run.recipe), "rep": str(run.repeat),
               "status": f"[{style}]{status}[/]", "evidence": evidence_flag(run),
               "box": box_cell(run, flags[run.run_id], wide), "env": (run.env_key or "")[:10],
               "gpu": run.gpu_key, "headline (point:value)": _headline(samples), "headline": _headline(samples).split(": ", 1)[-1],
               "vs roofline": effs[-1][1], "error": escape((run.error or "")[:120])}
        rows.append([row[c] for c in cols])
    if wide:
        for c in cols:
            table.add_column(c, overflow="fold")
    else:
        # Fixed widths: identifiers whole, the headline and the error share what is left, cut at the end.
        widest = {c: max([len(c)] + [len(Text.from_markup(r[i]).plain) for r in rows]) for i, c in enumerate(cols)}
        fixed = {c: n for c, n in widest.items() if c not in ("headline", "error", "box")}
        left = max(24, width - sum(fixed.values()) - 3 * len(cols) - 1)
        box_w = min(widest["box"], max(12, left // 2))  # "no GPU state" whole
        left -= box_w
        sizes = {**fixed, "box": box_w, "headline": max(8, left * 2 // 5), "error": max(8, left - left * 2 // 5)}
        for c in cols:
            table.add_column(c, width=sizes[c], no_wrap=True, overflow="ellipsis")
    for r in rows:
        table.add_row(*r)
    if wide:
        return table
    from rich.console import Group

    below = [Text(f"vs roofline: {run.run_id[:8]} {run.recipe}: {text}") for run, text in effs if text]
    return Group(table, *below) if below else table


def _check_artifacts(store, runs) -> int:
    """One line per kept file of `runs`, its state from its bytes now; 1 if any is missing or altered."""
    from toolkit.results.artifacts import check

    found = check(store, [r.run_id for r in runs])
    for a in found:
        style = "green" if a.state == "ok" else "red"
        console.print(f"{a.run_id[:8]} {escape(a.name)}: [{style}]{a.state}[/] {escape(a.path)}")
    bad = [a for a in found if a.state != "ok"]
    console.print(f"{len(found)} kept file(s) of {len(runs)} run(s): " + (f"{len(bad)} not to be trusted (missing or "
                  "altered)" if bad else "all as stored"), markup=False)
    return 1 if bad else 0


def print_cost(store, sel) -> None:
    """Every launch's GPU minutes per recipe, said apart (used, reused, left out, failed, interrupted) and,
    with a baseline and variants, per verdict of the headline throughput against the fixed design's
    (toolkit.analysis.verdict_cost: the lines compare and report print)."""
    from toolkit.analysis import verdict_cost
    from toolkit.analysis.compare import compare_selection
    from toolkit.analysis.sequential_design import for_ref

    rows = compare_selection(store, sel, metrics=metrics.throughput_headline(), sequential=for_ref(sel.recipes[0])) \
        if len(sel.recipes) > 1 else []
    for line in verdict_cost.lines_of(store, sel, rows):
        console.print(f"cost: {line}", markup=False, highlight=False)
    console.print(f"[dim]{escape(verdict_cost.LEGEND)}[/]")


def run(args) -> int:
    store = store_of(args)
    if args.jobs:
        from toolkit.commands.common import home_of
        from toolkit.executors.slurm import show_jobs

        return show_jobs(home_of(args), store, console)
    filters = {"recipe": args.recipes or None, "status": args.status}
    group = getattr(args, "group", None)
    if group:  # one sweep's runs (its group id as `results` shows it)
        if not store.runs(group_id=group, limit=1):
            from toolkit.errors import BadInput

            raise BadInput(f"--group {group}: no runs of that group in {store.path}",
                           hint="`patchbench results` shows each run's group id")
        filters["group_id"] = group
    if args.recipes and not args.jobs:  # a typo must not read as "no runs"
        from toolkit.commands.common import known_recipes

        known_recipes(store, list(args.recipes))
    if args.export:
        out = args.output or sys.stdout
        from toolkit.results.exchange import export

        n = export(store, args.export, out, require_runs=True, **filters)
        if args.output:
            console.print(f"exported {plural(n, 'run')} to {args.output}", markup=False)
        return 0
    if args.selected:
        if not args.recipes:
            from toolkit.errors import BadInput

            raise BadInput("--selected needs the recipes to select for")
        from toolkit.commands.common import definitions

        sel = select(store, args.recipes, criteria_from_args(args), current=definitions(args.recipes))
        console.print(render_runs(store, [r for name in sel.recipes for r in sel.runs[name]]))
        for line in sel.notes:
            console.print(f"note: {line}", markup=False)
        print_cost(store, sel)
        return 0
    if args.status in ("interrupted", "running"):  # a `running` run whose process died reads (and is listed) as interrupted
        runs = [r for r in store.runs(**{**filters, "status": ["running", "interrupted"]}, limit=None, newest_first=True)
                if r.display_status() == args.status][:args.limit]
    else:
        runs = store.runs(**filters, limit=args.limit, newest_first=True)
    if args.check_artifacts:
        return _check_artifacts(store, runs)
    if not runs:
        total = len(store.runs(limit=None)) if (args.recipes or args.status or group) else 0
        what = " ".join(x for x in (args.status, "runs of " + ", ".join(args.recipes) if args.recipes else "runs") if x)
        what += f" in group {group}" if group else ""
        console.print(f"no {what} in {store.path}" + (f" ({total} runs in all; `patchbench results` lists them)"
                                                      if total else ""))
        labelled = sorted(n for n in store.recipe_names() for r in args.recipes or () if n.startswith(f"{r}@"))
        if labelled:  # attribute's prefixes, bisect's probes, track's points: each under its own label
            shown = ", ".join(labelled[:6]) + (f", ... ({len(labelled)} labels)" if len(labelled) > 6 else "")
            console.print(f"its variants' runs are stored under their own labels: {shown} "
                          f"(`patchbench results {labelled[0]}`)", markup=False)
        return 0
    console.print(render_runs(store, list(reversed(runs))))
    from toolkit.analysis import verdict_cost

    by_recipe: dict = defaultdict(list)
    for r in reversed(runs):
        by_recipe[r.recipe].append(r)
    for line in verdict_cost.recipe_lines(by_recipe):
        console.print(f"cost: {line} (the runs listed)", markup=False, highlight=False)
    if len(runs) == args.limit:
        total = len(store.runs(**filters, limit=None))
        if total > len(runs):
            console.print(f"the newest {len(runs)} of {total} runs (--limit N lists more)", markup=False)
    return 0
