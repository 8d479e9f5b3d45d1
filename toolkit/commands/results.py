"""`patchbench results`: list stored runs, or export them as JSON/CSV."""

from __future__ import annotations

import sys
from collections import defaultdict

from rich.table import Table

from toolkit.commands.common import console, store_of
from toolkit.report import HEADLINE, efficiency

HELP = "list stored runs (status, provenance, headline numbers) or export them (JSON/CSV)"


def add_arguments(parser) -> None:
    parser.add_argument("recipes", nargs="*", metavar="RECIPE", help="only these recipes")
    parser.add_argument("--status", choices=["ok", "failed", "invalid", "running", "interrupted"], default=None)
    parser.add_argument("--export", choices=["json", "csv"], default=None, help="write runs and samples")
    parser.add_argument("--output", "-o", default=None, help="export file (default: stdout)")
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--jobs", action="store_true",
                        help="Slurm jobs (queued, running, done) with their logs; imports the runs of finished ones")


def _headline(samples) -> str:
    by_metric = defaultdict(dict)
    for s in samples:
        by_metric[s.metric][s.point] = s.value
    for metric in HEADLINE:
        if metric in by_metric:
            pts = by_metric[metric]
            return f"{metric}: " + " ".join(f"{p}:{v:.1f}" for p, v in sorted(pts.items()))
    return ""


def _efficiency(run, samples) -> str:
    """Measured tok/s at batch/concurrency 1 over the recipe's theoretical roofline, when named."""
    eff = efficiency(run, samples)
    return eff.text() if eff else ""


def render_runs(store, runs) -> Table:
    table = Table(title="results", title_justify="left")
    for col in ("run", "group", "recipe", "rep", "status", "env", "gpu", "headline (point:value)", "vs roofline", "error"):
        table.add_column(col, overflow="fold")
    for run in runs:
        samples = store.samples([run.run_id])
        status = run.display_status()
        style = {"ok": "green", "invalid": "yellow"}.get(status, "red")
        table.add_row(run.run_id[:8], run.group_id or "", run.recipe, str(run.repeat), f"[{style}]{status}[/]",
                      (run.env_key or "")[:10], run.gpu_key, _headline(samples), _efficiency(run, samples),
                      (run.error or "")[:120])
    return table


def run(args) -> int:
    store = store_of(args)
    if args.jobs:
        from toolkit.commands.common import home_of
        from toolkit.executors.slurm import show_jobs

        return show_jobs(home_of(args), store, console)
    filters = {"recipe": args.recipes or None, "status": args.status}
    if args.export:
        out = args.output or sys.stdout
        n = store.export(args.export, out, **filters)
        if args.output:
            console.print(f"exported {n} runs to {args.output}")
        return 0
    runs = store.runs(**filters, limit=args.limit, newest_first=True)
    if not runs:
        console.print(f"no runs in {store.path}")
        return 0
    console.print(render_runs(store, list(reversed(runs))))
    return 0
