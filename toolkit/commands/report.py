"""`patchbench report RECIPE...`: a Markdown table for a pull request and a self-contained HTML
page (inline SVG plots) from stored results; the first recipe is the baseline."""

from __future__ import annotations

from pathlib import Path

from toolkit.commands.common import console, store_of

HELP = "write report.md (PR-ready table) and report.html (self-contained, SVG plots) for recipes"


def add_arguments(parser) -> None:
    parser.add_argument("recipes", nargs="+", metavar="RECIPE", help="baseline first, then the variants")
    parser.add_argument("-o", "--output", default="./patchbench-report", metavar="DIR",
                        help="directory for report.md and report.html (default ./patchbench-report)")
    parser.add_argument("--metric", action="append", default=None,
                        help="metric to report (repeatable; default: the headline metrics stored)")
    parser.add_argument("--title", default=None, help="report title")


def _write(path: Path, text: str) -> None:
    import os

    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def run(args) -> int:
    from toolkit.errors import BadInput
    from toolkit.report import collect, render_html, render_markdown

    data = collect(store_of(args), args.recipes, args.metric, title=args.title)
    out = Path(args.output).expanduser()
    try:
        out.mkdir(parents=True, exist_ok=True)
        md, page = out / "report.md", out / "report.html"
        _write(md, render_markdown(data))
        _write(page, render_html(data))
    except OSError as exc:
        raise BadInput(f"cannot write the report to {out}: {exc.strerror or exc}") from None
    console.print(str(md), markup=False)
    console.print(str(page), markup=False)
    return 0
