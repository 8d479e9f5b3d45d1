"""`patchbench publish -o DIR`: a static site of the store (toolkit/report/site.py): an index of the
recipes with their newest verdicts, a page per recipe, compare pages (speedups, answers and gate
verdicts), tracked histories with their change points, sweeps' Pareto fronts and kernel tables.
Plain files with relative links: serve DIR with any web server or open DIR/index.html."""

from __future__ import annotations

from pathlib import Path

from toolkit.commands.common import console, definitions, err, home_of, store_of

HELP = "write a static site of the store (index, recipes, compares, histories, sweeps, kernel tables)"


def add_arguments(parser) -> None:
    parser.add_argument("-o", "--output", default="./patchbench-site", metavar="DIR",
                        help="directory for the site (default ./patchbench-site); index.html is its entry")
    parser.add_argument("--imported", action="store_true",
                        help="count imported runs too (a store filled from another's export), as compare --imported")
    parser.add_argument("--json", action="store_true", help="print the pages written as JSON")


def _stacks(names) -> dict:
    """Each tracked recipe's patch stack digest, from its file where readable (as `history` uses)."""
    from toolkit.errors import PatchbenchError
    from toolkit.history.track import stack_digest
    from toolkit.recipe.load import load_recipe

    out = {}
    for n in names:
        try:
            out[n] = stack_digest(load_recipe(n))
        except (PatchbenchError, OSError):
            continue
    return out


def run(args) -> int:
    from toolkit.report.site import publish

    from toolkit.report.site_history import tracked_recipes

    store = store_of(args)
    names = store.recipe_names()
    tracked = tracked_recipes(store.runs())
    out = Path(args.output).expanduser()
    pub = publish(store, out, home=home_of(args), current=definitions([*names, *tracked]),
                  stacks=_stacks(tracked), console=err, imported=args.imported)
    if args.json:
        from toolkit.commands.common import print_json

        print_json({"output": str(out), "pages": pub.pages, "notes": pub.notes})
        return 0
    for line in pub.notes:
        console.print(f"note: {line}", markup=False)
    console.print(f"{len(pub.pages)} pages: {out / 'index.html'}", markup=False)
    return 0
