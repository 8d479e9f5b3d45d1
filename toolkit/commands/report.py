"""`patchbench report RECIPE...`: a Markdown table for a pull request (with PNG plots beside it)
and a self-contained HTML page (inline SVG plots) from stored results; the first recipe is the
baseline. Runs are chosen as `compare` chooses them (the same options widen the choice)."""

from __future__ import annotations

from pathlib import Path

from toolkit.commands.common import definitions, known_recipes, console, err, home_of, store_of

HELP = "write report.md (PR-ready table + PNG plots) and report.html (self-contained, SVG plots) for recipes"


def add_arguments(parser) -> None:
    from toolkit.results import metrics
    from toolkit.analysis.selection import add_min_effect_argument, add_selection_arguments

    parser.add_argument("recipes", nargs="+", metavar="RECIPE", help="baseline first, then the variants")
    parser.add_argument("-o", "--output", default="./patchbench-report", metavar="DIR",
                        help="directory for report.md, its PNG plots and report.html (default ./patchbench-report)")
    parser.add_argument("--metric", action="append", default=None, metavar="NAME[@POINT]",
                        help="metric to report (repeatable; default: the headline metrics stored). "
                             f"Known: {metrics.help_text()}")
    parser.add_argument("--title", default=None, help="report title")
    add_min_effect_argument(parser, sequential=True)
    add_selection_arguments(parser)


def _kernel_bars(store, recipes, out: Path) -> tuple[Path, Path] | None:
    """The stacked bar of step time by kernel family for recipes with stored profiles (PNG, SVG)."""
    from toolkit.profile.families import load_families
    from toolkit.profile.figure import stacked_bar
    from toolkit.profile.render import bar_data

    families = load_families()
    bars, floors = bar_data(store, list(recipes), families)
    if not bars:
        return None
    return tuple(stacked_bar(bars, out / f"kernel_families.{ext}", families=families, floors_ms=floors)
                 for ext in ("png", "svg"))


def _kernels_only(args, out: Path) -> int:
    """report.md / report.html holding only the kernel tables (the recipes have no stored runs)."""
    from toolkit.errors import BadInput
    from toolkit.report.kernels import kernel_section
    from toolkit.report.plots import write_text

    title = args.title or f"Kernel tables: {' vs '.join(args.recipes)}"
    try:
        out.mkdir(parents=True, exist_ok=True)
        kern = kernel_section(home_of(args), list(args.recipes), out)
        md, page = out / "report.md", out / "report.html"
        write_text(md, f"## {title}\n" + "\n".join(kern.markdown) + "\n")
        write_text(page, f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title></head>'
                     f"<body><h1>{title}</h1>\n{kern.html}\n</body></html>\n")
    except OSError as exc:
        raise BadInput(f"cannot write the report to {out}: {exc.strerror or exc}") from None
    console.print(str(md), markup=False)
    console.print(str(page), markup=False)
    return 0


def run(args) -> int:
    from toolkit.analysis.selection import criteria_from_args
    from toolkit.errors import BadInput
    from toolkit.report.document import collect, render_html, render_markdown
    from toolkit.report.plots import plots, write_png, write_text

    store = store_of(args)
    known_recipes(store, list(args.recipes))
    out = Path(args.output).expanduser()
    try:
        data = collect(store, args.recipes, args.metric, title=args.title,
                       criteria=criteria_from_args(args), min_effect=args.min_effect,
                       current=definitions(args.recipes))
    except BadInput as exc:  # no stored runs: a report of the kernel tables alone, when there are some
        from toolkit.analysis.same_server_runs import refusal
        from toolkit.kernels import records

        if not records.latest(home_of(args), args.recipes[0]):
            same = refusal(store, list(args.recipes), getattr(exc, "recipes", []), definitions(args.recipes),
                           verb="report")
            if same is not None:  # a sweep found it to be another configuration's server
                raise same from None
            raise
        return _kernels_only(args, out)
    figures = plots(data)
    try:
        out.mkdir(parents=True, exist_ok=True)
        images = [(p.title, write_png(p.figure, out / f"{p.name}.png").name) for p in figures]
        svgs = []
        bars = _kernel_bars(store, args.recipes, out)
        if bars:
            images.append(("decode step by kernel family (profiles), with the roofline floor", bars[0].name))
            svgs.append(bars[1].read_text())
        md, page = out / "report.md", out / "report.html"
        from toolkit.report.kernels import kernel_section  # stored `patchbench kernels` tables, if any

        kern = kernel_section(home_of(args), list(args.recipes), out)
        write_text(md, render_markdown(data, images).rstrip("\n") + "\n".join(kern.markdown) + "\n")
        write_text(page, render_html(data, figures, svgs).replace("</body></html>", kern.html + "\n</body></html>"))
    except OSError as exc:
        raise BadInput(f"cannot write the report to {out}: {exc.strerror or exc}") from None
    for line in data.selection:
        console.print(f"used {line}", markup=False)
    for line in data.notes:
        if line.startswith("artifact: "):  # a kept file a verdict stands on is missing or altered
            err.print(f"warning: {line}", markup=False, highlight=False)
    console.print(str(md), markup=False)
    console.print(str(page), markup=False)
    return 0
