"""`patchbench apply RECIPE`: materialise each source and apply its patch stack (one commit each)."""

from __future__ import annotations

from rich.table import Table

from toolkit.commands.common import console, home_of, load, print_json, recipe_arg
from toolkit.errors import PatchbenchError, raise_refused
from toolkit.tree.applied import apply_recipe

HELP = "materialise the recipe's sources and apply its patch stacks (one git commit per patch)"


def add_arguments(parser) -> None:
    recipe_arg(parser)
    parser.add_argument("--frozen", action="store_true", help="fail if a tag moved or an artifact/patch changed since the lock")
    parser.add_argument("--refresh", action="store_true", help="fetch git mirrors even when the rev is known")
    parser.add_argument("--offline", action="store_true", help="use only cached mirrors and artifacts")
    parser.add_argument("--json", action="store_true", help="print the trees as JSON")


def run(args) -> int:
    recipe = load(args.recipe)
    home = home_of(args)
    try:
        results = apply_recipe(recipe, home, frozen=args.frozen, refresh=args.refresh, offline=args.offline)
    except PatchbenchError as exc:
        raise exc.located(recipe=recipe.name, step="apply")
    except OSError as exc:  # the disk refused a write (permission, read-only, full)
        raise_refused(exc, home=home, recipe=recipe.name, step="apply")
    if args.json:
        print_json({"recipe": recipe.name, "trees": [dict(t.to_dict(), reused=r) for t, r in results]})
        return 0
    table = Table(title=f"recipe {recipe.name}: sources", title_justify="left")
    for col in ("source", "base", "head", "tree", "patches", "state", "path"):
        table.add_column(col, overflow="fold")
    for tree, reused in results:
        table.add_row(
            tree.source,
            tree.base_commit[:12],
            tree.head_commit[:12],
            tree.tree_hash[:12],
            str(len(tree.patches)),
            "reused" if reused else "applied",
            str(tree.path),
        )
    console.print(table)
    return 0
