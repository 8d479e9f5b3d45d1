"""`patchbench show RECIPE`: the fully resolved recipe (after `extends` and `${VAR}` expansion),
with the file every value came from."""

from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table

from toolkit.commands.common import console, load, print_json, recipe_arg

HELP = "print the fully resolved recipe (after extends and ${VAR} expansion) and where each value came from"


def add_arguments(parser) -> None:
    recipe_arg(parser)
    parser.add_argument("--json", action="store_true", help="print {key: {value, file}} as JSON")


def _leaves(table: dict, prefix: str = "") -> list[tuple[str, object]]:
    out = []
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.extend(_leaves(value, dotted + "."))
        else:
            out.append((dotted, value))
    return out


def _origin(key: str, origins: dict, default: Path) -> Path:
    """The file of the longest recorded prefix of `key` (tables such as server.args are recorded per entry)."""
    parts = key.split(".")
    for n in range(len(parts), 0, -1):
        found = origins.get(".".join(parts[:n]))
        if found:
            return found
    return default


def _short(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root.parent))
    except ValueError:
        return str(path)


def _with_config_file(rows: list) -> list:
    """After `server.args.config`, the options its file gives the server (toolkit.recipe.server_config), each
    from that file; one the recipe sets itself is the recipe's (sglang's command line wins)."""
    from toolkit.recipe.server_config import file_args

    at = next((i for i, (k, _, _) in enumerate(rows) if k == "server.args.config"), None)
    if at is None:
        return rows
    path = Path(str(rows[at][1]))
    own = {k for k, _, _ in rows}
    given = [(f"server.args.{flag}", value, path) for flag, value in file_args(rows[at][2], str(path))
             if f"server.args.{flag}" not in own]
    return rows[:at + 1] + given + rows[at + 1:]


def _generated_description(recipe) -> bool:
    """Whether the description is the loader's words (a recipe that extends another and has none of its
    own: toolkit.recipe.load.child_description), not a file's."""
    import tomllib

    try:
        own = tomllib.loads(recipe.path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return False
    return "extends" in own and "description" not in own


def run(args) -> int:
    recipe = load(args.recipe)
    root = recipe.patches_dir.parent / "recipes"
    from toolkit.recipe.matrix import variants_of

    generated = _generated_description(recipe)
    rows = [(k, v, recipe.path if k == "description" and generated else _origin(k, dict(recipe.origins), recipe.path))
            for k, v in _leaves(dict(recipe.raw))]
    rows = _with_config_file(rows)
    if not rows:  # an empty file: nothing to show, and nothing apply, build or run could use
        from toolkit.tree.applied import require_sources

        require_sources(recipe)
    variants = variants_of(recipe)
    if variants:  # every variant is a recipe: a bad [matrix] value is refused here, not at the sweep's launch
        from toolkit.recipe.load import expand_recipe

        expand_recipe(recipe)
    if args.json:
        print_json({"recipe": recipe.name, "path": str(recipe.path),
                    "values": {k: {"value": v, "file": str(f), **({"generated": True} if k == "description"
                                                                 and generated else {})} for k, v, f in rows},
                    "variants": [{"name": v.name, "settings": dict(v.settings)} for v in variants]})
        return 0
    table = Table(title=f"recipe {recipe.name} ({_short(recipe.path, root)})", title_justify="left")
    table.add_column("key", overflow="fold")
    table.add_column("value", overflow="fold")
    table.add_column("from", overflow="fold")
    for key, value, origin in rows:
        where = f"generated from what {_short(recipe.path, root)} sets" if key == "description" and generated \
            else _short(origin, root)
        table.add_row(key, json.dumps(value), where)
    console.print(table)
    if variants:
        console.print(f"[bold]matrix[/]: {len(variants)} variant(s) (`patchbench sweep {recipe.name}` measures them)")
        for v in variants:
            console.print(f"  {v.name}", markup=False, highlight=False)
    return 0
