"""Helpers shared by the verb modules: recipe loading with errors located, the console."""

from __future__ import annotations

import json
import os
import sys

from rich.console import Console

from toolkit.errors import PatchbenchError
from toolkit.recipe.load import Recipe, load_recipe
from toolkit.workspace import resolve_home

def _width() -> int | None:
    """COLUMNS when set (also when piped), the terminal's width on a tty, else 160 for logs and CI."""
    cols = os.environ.get("COLUMNS", "")
    if cols.isdigit() and int(cols) > 20:
        return int(cols)
    return None if sys.stdout.isatty() else 160


console = Console(highlight=False, width=_width())
err = Console(stderr=True, highlight=False, soft_wrap=True)


def positive_int(text: str) -> int:
    """argparse type of a count (repeats, jobs): an integer of at least 1, else a one-line exit 2."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed: give a whole number of at least 1")
    return value


def recipe_arg(parser, many: bool = False) -> None:
    parser.add_argument(
        "recipes" if many else "recipe",
        nargs="+" if many else None,
        metavar="RECIPE",
        help="recipe name in recipes/ (e.g. baseline, demo/fast) or a path to a .toml",
    )


def load(ref: str) -> Recipe:
    try:
        return load_recipe(ref)
    except PatchbenchError as exc:
        raise exc.located(step="load recipe")


def definitions(names) -> dict:
    """Each loadable recipe's definition as its file says now (toolkit.run.identity): selection
    leaves out runs of older definitions and names them."""
    from toolkit.run.identity import current_definitions

    return current_definitions(names, load_recipe)


def home_of(args):
    return resolve_home(getattr(args, "home", None))


def store_of(args):
    from toolkit.results.store import Store

    from pathlib import Path

    from toolkit.results.engine import load_store_config, store_location

    home = home_of(args)
    store = Store(store_location(home, getattr(args, "store", None)))
    kept = load_store_config(home).artifacts
    store.artifacts_dir = Path(kept).expanduser() if kept else None
    return store


JSON_SCHEMA_VERSION = 1  # docs/JSON.md: bumped when a key is removed or changes meaning


def print_json(data, *, versioned: bool = True) -> None:
    """Every verb's --json output: one object carrying `schema_version` (docs/JSON.md); a list
    is wrapped as {"schema_version", "items"}."""
    if versioned:
        data = {"schema_version": JSON_SCHEMA_VERSION,
                **(data if isinstance(data, dict) else {"items": data})}
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def known_recipes(store, names: list[str]) -> None:
    """BadInput for a name that is neither a recipe file nor a recipe with stored runs (a typo in
    `compare A B` must not read as "no results"), with the closest name as a hint."""
    import difflib

    from toolkit.errors import BadInput
    from toolkit.recipe.load import list_recipe_names, resolve_recipe_path

    stored = set(store.recipe_names())
    for name in names:
        if name in stored:
            continue
        try:
            resolve_recipe_path(name)
            continue
        except PatchbenchError:
            pass
        pool = sorted(stored | set(list_recipe_names()))
        close = difflib.get_close_matches(name, pool, n=1)
        raise BadInput(f"no such recipe `{name}`: no recipe file and no stored runs",
                       hint=f"did you mean `{close[0]}`?" if close else None)
