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
    return _at_least(text, 1)


def _at_least(text: str, least: int) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < least:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed: give a whole number of at least {least}")
    return value


def count_int(text: str) -> int:
    """argparse type of a count that may be 0 (track --limit 0: list the points, measure none)."""
    return _at_least(text, 0)


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


def same_configuration_labels(store, name: str) -> list[str]:
    """Other labels with stored runs whose recipe file is `name`'s configuration now (Recipe.configuration):
    a sequential `run` counts their runs for `name`, `compare` reads them under their own label."""
    try:
        mine = load_recipe(name).configuration()
    except PatchbenchError:
        return []
    found = []
    for other in store.recipe_names():
        try:
            if other != name and load_recipe(other).configuration() == mine:
                found.append(other)
        except PatchbenchError:
            continue
    return found


def home_of(args):
    return resolve_home(getattr(args, "home", None))


def store_of(args):
    from toolkit.results.store import Store

    from pathlib import Path

    from toolkit.results.engine import load_store_config, store_location

    home = home_of(args)
    where = store_location(home, getattr(args, "store", None))
    if getattr(args, "store", None) and isinstance(where, Path) and not where.parent.is_dir():
        from toolkit.errors import BadInput  # a mistyped --store path is not a new, empty store

        raise BadInput(f"--store {args.store}: no directory {where.parent}",
                       hint="give an existing store's path (or a new one in an existing directory)")
    store = Store(where)
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
    sys.stdout.write(json.dumps(_finite(data), indent=2, sort_keys=True, default=str, allow_nan=False) + "\n")


def _finite(value):
    """JSON has no NaN or infinity (jq and most parsers refuse them): null in their place."""
    import math

    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def known_recipes(store, names: list[str]) -> None:
    """BadInput for a name that is neither a recipe file nor a recipe with stored runs (a typo in
    `compare A B` must not read as "no results"), with the closest name as a hint."""
    from toolkit.errors import BadInput

    unknown = first_unknown(names, set(store.recipe_names()))
    if unknown:
        raise BadInput(f"no such recipe `{unknown[0]}`: no recipe file and no stored runs", hint=unknown[1])


def first_unknown(names, known: set[str]) -> tuple[str, str | None] | None:
    """The first of `names` that is neither in `known` nor a recipe file, with a "did you mean" hint
    (None when every name is known)."""
    import difflib

    from toolkit.recipe.load import list_recipe_names, resolve_recipe_path

    for name in names:
        if name in known:
            continue
        try:
            resolve_recipe_path(name)
            continue
        except PatchbenchError:
            pass
        close = difflib.get_close_matches(name, sorted(known | set(list_recipe_names())), n=1)
        return name, (f"did you mean `{close[0]}`?" if close else None)
    return None


def same_twice(refs) -> None:
    """BadInput when one recipe is named twice (by name or by path): its runs against themselves
    would read "no difference" by construction."""
    from toolkit.errors import BadInput, PatchbenchError
    from toolkit.recipe.load import load_recipe

    seen: dict[str, str] = {}
    for ref in refs:
        try:
            name = load_recipe(ref).name
        except PatchbenchError:
            name = ref  # not a file: a recipe known by its stored runs (checked later)
        if name in seen:
            given = f"`{seen[name]}` and `{ref}`" if seen[name] != ref else f"`{ref}` twice"
            raise BadInput(f"got {given}: both are recipe {name}, and a recipe compared with itself is the "
                           "same runs on both sides", hint=f"compare it with another recipe; its run-to-run spread is in "
                           f"`patchbench report {name}`")
        seen[name] = ref


def require_measured_point(spec, recipe, option: str = "--metric") -> None:
    """BadInput, before anything is built or launched, when `recipe`'s benchmark does not measure the
    metric `spec` (NAME[@POINT]) at all, or not at its point: a comparison of variants at it would
    launch servers for nothing."""
    from toolkit.errors import BadInput

    b = recipe.benchmark
    serving = b.driver == "serving"
    kind, want = spec.info.point_kind, ("concurrency" if serving else "batch")
    if kind is not None and kind != want:
        where = "by the serving benchmark, at a concurrency" if kind == "concurrency" else \
            "at static batches (driver one-batch)"
        raise BadInput(f"{option} {spec}: `{spec.metric}` is measured {where}, and {recipe.name} uses driver {b.driver!r}")
    points = list(b.concurrency if serving else b.batch_sizes)
    if kind is not None and spec.point is not None and spec.point not in points:
        word = "concurrency" if serving else "batch size"
        raise BadInput(f"{option} {spec}: {recipe.name} does not measure {word} {spec.point}",
                       hint=f"it measures {word} {', '.join(map(str, points))} (e.g. {spec.metric}@{points[0]})")
