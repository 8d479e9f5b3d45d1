"""Release variants of a recipe: the same recipe on another release of one of its PyPI sources.

A release bisect (`patchbench bisect RECIPE --source sglang --good 0.5.10.post1 --bad 0.5.23`)
measures the recipe with its source replaced by each probed release. Each probe is its own env, built
with that release's own dependency pins: companion sources that carry no patches (a FlashInfer the
recipe installs only because the baseline pins it) are dropped from the variant, so the installer
takes the release's own requirement (flashinfer-python, sglang-kernel, torch); companion sources
with patches stay, since the experiment is about them. The recipe's patch stack for the bisected
source is applied to every release; a release where it no longer applies is skipped with the reason.

Then commits: with a git location of the same project (`--git URL|PATH`), `git_variant` gives the
recipe on the tag of a release, and the ordinary upstream-commit bisect continues between the two
neighbouring releases' tags.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from toolkit.errors import BadInput
from toolkit.recipe.load import Recipe
from toolkit.recipe.spec import SourceSpec


def source_spec(recipe: Recipe, source: str) -> SourceSpec:
    spec = recipe.sources.get(source)
    if spec is None:
        raise BadInput(f"recipe {recipe.name} has no source `{source}`", hint=f"sources: {', '.join(recipe.sources)}")
    return spec


def project_name(spec: SourceSpec) -> str:
    return re.split(r"[=<>!~ ]", spec.location, maxsplit=1)[0]


def _variant(recipe: Recipe, source: str, new: SourceSpec, label: str, home: Path) -> Recipe:
    keep = [s for s in recipe.sources if s == source or recipe.patches.get(s)]
    build = recipe.build
    build = dataclasses.replace(
        build,
        install=None if build.install is None else tuple(s for s in build.install if s in keep),
        cuda=tuple((s, g) for s, g in build.cuda if s in keep),
    )
    where = home / "variants" / recipe.name / f"{label}.toml"  # its lock file lands beside, never the recipe's
    where.parent.mkdir(parents=True, exist_ok=True)
    raw = dict(recipe.raw)
    raw["sources"] = {s: (new.to_dict() if s == source else raw.get("sources", {}).get(s)) for s in keep}
    return dataclasses.replace(
        recipe, name=f"{recipe.name}@{label}", path=where,
        sources={s: (new if s == source else recipe.sources[s]) for s in keep},
        patches={s: p for s, p in recipe.patches.items() if s in keep}, build=build, raw=raw)


def release_variant(recipe: Recipe, source: str, version: str, home: Path) -> Recipe:
    """The recipe with `source` at release `version` (own dependency pins; see the module doc)."""
    spec = source_spec(recipe, source)
    new = dataclasses.replace(spec, kind="pypi", location=f"{project_name(spec)}=={version}", rev=None, sha256=None)
    return _variant(recipe, source, new, version, home)


def git_variant(recipe: Recipe, source: str, location: str, rev: str, home: Path) -> Recipe:
    """The recipe with `source` from a git repository at `rev` (the commit phase of a release bisect)."""
    spec = source_spec(recipe, source)
    if "://" not in location and not location.startswith("git@"):
        location = str(Path(location).expanduser().resolve())
    new = SourceSpec(name=source, kind="git", location=location, rev=rev, package_dir=spec.package_dir)
    return _variant(recipe, source, new, f"git-{rev}", home)


def tag_for(version: str, tag_format: str) -> str:
    return tag_format.format(version=version)
