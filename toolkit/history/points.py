"""Upstream points to track: the releases of a PyPI source (from its package index), or the commits of
a git source's branch (every N-th first-parent commit, or those since a date). Reads indexes and git
mirrors (a branch is fetched anew); builds and measures nothing.

Each point has its place in upstream history (`order`: release order by version, or first-parent
position counted from the root commit, stable while the branch grows) and, where known, its commit
date (a release's date is its tag's, with `--git`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from toolkit.analysis.releases import git_variant, project_name, release_variant, source_spec, tag_for
from toolkit.errors import BadInput
from toolkit.recipe.load import Recipe
from toolkit.tree import gitrepo


@dataclass(frozen=True)
class Point:
    """One upstream point: a release (`id` its version) or a commit (`id` its full sha)."""

    id: str
    order: int
    kind: str  # release | commit
    date: str | None = None  # commit date, ISO 8601
    tag: str | None = None  # a release's git tag, when a git repository was given

    @property
    def label(self) -> str:
        return self.id if self.kind == "release" else self.id[:12]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def release_points(recipe: Recipe, source: str, *, git: str | None = None, tag_format: str = "v{version}",
                   since: str | None = None) -> list[Point]:
    """Every release of `source` on its index (from `since`, a version, on), oldest first."""
    from packaging.version import InvalidVersion, Version

    from toolkit.tree.package_index import releases

    spec = source_spec(recipe, source)
    if spec.kind != "pypi":
        raise BadInput(f"source {source} is a {spec.kind} source; --releases needs a pypi source",
                       hint="a git source is tracked with --branch BRANCH --every N or --since DATE")
    versions = releases(project_name(spec), spec.index)
    if since:
        try:
            floor = Version(since)
        except InvalidVersion:
            raise BadInput(f"--since {since}: with --releases, give a version") from None
        versions = [v for v in versions if v >= floor]
    if not versions:
        raise BadInput(f"`{project_name(spec)}` has no releases on {spec.index or 'the index'}"
                       + (f" from {since} on" if since else ""))
    points = []
    for i, v in enumerate(versions):
        tag = date = None
        if git:
            tag = tag_for(str(v), tag_format)
            date = _tag_date(git, tag)
        points.append(Point(str(v), i, "release", date, tag))
    return points


def _tag_date(repo: str, tag: str) -> str | None:
    res = gitrepo.run(Path(repo).expanduser() if "://" not in repo else repo, "log", "-1", "--format=%cI",
                      f"{tag}^{{commit}}", check=False)
    return res.stdout.strip() or None if res.ok else None


def git_points(recipe: Recipe, source: str, home: Path, *, branch: str | None, every: int | None = None,
               since: str | None = None) -> list[Point]:
    """First-parent commits of `branch`: every `every`-th from the root, and/or those committed since
    `since` (a date git understands), oldest first."""
    from toolkit.tree.sources import resolve_git

    spec = source_spec(recipe, source)
    if spec.kind != "git":
        raise BadInput(f"source {source} is a {spec.kind} source; --branch needs a git source",
                       hint="a pypi source is tracked with --releases")
    if not branch:
        raise BadInput(f"source {source} is a git source: name the branch to track with --branch "
                       "(and --every N or --since DATE)")
    if every is not None and every < 1:
        raise BadInput("--every must be at least 1")
    mirror, tip = resolve_git(dataclasses.replace(spec, rev=branch), home, refresh=True)
    lines = gitrepo.out(mirror, "log", "--first-parent", "--reverse", "--format=%H %cI", tip).splitlines()
    chosen = []
    cutoff = _since_epoch(mirror, since) if since else None
    for i, line in enumerate(lines):
        sha, date = line.split(" ", 1)
        if every and i % every:
            continue
        if cutoff is not None and _epoch(date) < cutoff:
            continue
        chosen.append(Point(sha, i, "commit", date))
    if not chosen:
        raise BadInput(f"branch {branch} of {source} has no commits to track with these options")
    return chosen


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()


def _since_epoch(mirror: Path, since: str) -> float:
    """`since` as git reads a date (2026-01-02, "2 weeks ago")."""
    from datetime import datetime, timezone

    try:
        d = datetime.fromisoformat(since)
        return (d if d.tzinfo else d.replace(tzinfo=timezone.utc)).timestamp()
    except ValueError:
        pass
    res = gitrepo.run(mirror, "rev-parse", f"--since={since}", check=False)
    arg = res.stdout.strip() if res.ok else ""
    if not arg.startswith("--max-age="):
        raise BadInput(f"--since {since}: not a date")
    return float(arg.split("=", 1)[1])


def variant_for(recipe: Recipe, source: str, point: Point, home: Path) -> Recipe:
    """The recipe with `source` at `point`, its patch stack kept (re-applied on that point)."""
    if point.kind == "release":
        return release_variant(recipe, source, point.id, home)
    return git_variant(recipe, source, recipe.sources[source].location, point.id, home)
