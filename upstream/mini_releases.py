"""Release history for the miniature upstream: tagged git commits, wheels, and a local package index.

`python upstream/mini_releases.py DEST [--plant gain|regression] [--at 0.1.5] [--releases 9]
[--also slowdown8@0.1.8]` builds, under DEST:

    repo/               a git repository of the miniature: tags v0.1.0 ... v0.1.8, each release a
                        version bump after a few ordinary commits; the commits before the planted
                        release's bump include ONE that changes decode speed (gain: the decode step's
                        fixed cost 12 ms -> 6 ms, ~2x at low concurrency; regression: 12 ms -> 24 ms);
                        `--also KIND@VERSION` plants one more (slowdown8: the fixed cost x1.087, an 8%
                        drop in output tok/s at concurrency 1, the shape of sglang #24563)
    dist/               one wheel per release (`sglang-0.1.N-py3-none-any.whl`, built from the tag)
    index/sglang/       a PEP 503 page listing the wheels with their sha256 (a local package index)
    releases.json       versions, tags, the planted release and the planted commit

The release-bisect test and `nox -s demo-update` bisect these releases, then the commits between the
two neighbouring tags; `nox -s demo-track` tracks them (`--also slowdown8@0.1.5`) and bisects what
`patchbench history` finds. Commits are one hour apart from 2026-01-01, so builds are reproducible. A fixture tool, not part of patchbench: plain git and pip, argv lists.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MINI = Path(__file__).resolve().parent / "minisglang"
COST = "python/sglang/srt/model_executor/cost.py"
# factor on the decode step's current fixed cost (12 ms in the miniature)
PLANTS = {"gain": 0.5, "regression": 2.0}
ALSO = {"slowdown8": 1.087, **PLANTS}  # extra plants (`also`)
GIT_ENV = {"GIT_AUTHOR_NAME": "mini", "GIT_AUTHOR_EMAIL": "mini@example.invalid",
           "GIT_COMMITTER_NAME": "mini", "GIT_COMMITTER_EMAIL": "mini@example.invalid",
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


_CLOCK = [0]  # commits one hour apart from 2026-01-01, so a history has dates to select by


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    if args[:1] == ("commit",):
        stamp = f"{1767225600 + _CLOCK[0] * 3600} +0000"
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = stamp
        _CLOCK[0] += 1
    return subprocess.run(["git", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", *args],
                          cwd=repo, env=env, check=True, capture_output=True, text=True).stdout.strip()


def _set_version(repo: Path, version: str) -> None:
    (repo / "python/sglang/version.py").write_text(f'__version__ = "{version}"\n')
    pyproject = repo / "python/pyproject.toml"
    lines = [f'version = "{version}"' if ln.startswith("version = ") else ln
             for ln in pyproject.read_text().splitlines()]
    pyproject.write_text("\n".join(lines) + "\n")


def _commit(repo: Path, message: str) -> str:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


def _note(repo: Path, text: str) -> None:
    """An ordinary commit that changes no behaviour (a changelog line)."""
    log = repo / "CHANGES.md"
    log.write_text((log.read_text() if log.exists() else "# changes\n") + f"- {text}\n")


def _uv() -> str:
    try:
        from uv import find_uv_bin  # the `uv` package patchbench depends on

        return find_uv_bin()
    except ImportError:
        found = shutil.which("uv")
        if not found:
            raise SystemExit("uv is needed to build the wheels: pip install uv") from None
        return found


def _wheel(repo: Path, tag: str, dist: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="mini-release-") as tmp:
        _git(repo, "worktree", "add", "-q", "--detach", tmp, tag)
        try:
            before = set(dist.glob("*.whl"))
            subprocess.run([_uv(), "build", "-q", "--wheel", "--no-config", "--out-dir", str(dist),
                            str(Path(tmp) / "python")], check=True, capture_output=True)
        finally:
            _git(repo, "worktree", "remove", "--force", tmp)
    (new,) = set(dist.glob("*.whl")) - before
    return new


def _index_page(index: Path, wheels: list[Path]) -> None:
    page = index / "sglang"
    page.mkdir(parents=True, exist_ok=True)
    links = []
    for w in wheels:
        sha = hashlib.sha256(w.read_bytes()).hexdigest()
        links.append(f'<a href="{os.path.relpath(w, page)}#sha256={sha}">{w.name}</a><br/>')
    (page / "index.html").write_text("<!DOCTYPE html>\n<html><body>\n" + "\n".join(links) + "\n</body></html>\n")


def _scale_step_base(repo: Path, factor: float) -> None:
    cost = repo / COST
    text = cost.read_text()
    now = float(re.search(r"^STEP_BASE_S = ([0-9.]+)$", text, re.M).group(1))
    cost.write_text(re.sub(r"^STEP_BASE_S = [0-9.]+$", f"STEP_BASE_S = {now * factor:.6g}", text, flags=re.M))


def _matches(meta_path: Path, plant: str, at: str, n_releases: int, also: tuple[str, ...]) -> bool:
    """A complete build (its releases.json is written last) of these settings."""
    if not meta_path.is_file():
        return False
    meta = json.loads(meta_path.read_text())
    return (meta.get("plant") == plant and meta.get("at") == at and len(meta["versions"]) == n_releases
            and meta.get("also", []) == list(also))


def build(dest: Path, *, plant: str = "gain", at: str = "0.1.5", n_releases: int = 9,
          also: tuple[str, ...] = ()) -> dict:
    """Build the repo, wheels and index under `dest` (idempotent: reuses a complete earlier build).
    `also`: more plants, each "KIND@VERSION" (KIND in ALSO), in the second commit of that release.
    Safe for concurrent callers (processes): one builds into a temporary directory, published by
    rename under a per-destination lock; the others wait and reuse it (toolkit.build_once)."""
    try:
        from toolkit.build_once import build_once
    except ImportError:  # run from a checkout that has not installed patchbench
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from toolkit.build_once import build_once

    dest = Path(dest).resolve()
    versions = [f"0.1.{i}" for i in range(n_releases)]
    extra = dict(reversed(a.split("@", 1)) for a in also)  # version -> kind
    for v, kind in extra.items():
        if kind not in ALSO or v not in versions[1:] or v == at:
            raise SystemExit(f"--also {kind}@{v}: KIND one of {', '.join(ALSO)}, VERSION another release")
    if at not in versions[1:]:
        raise SystemExit(f"--at must be one of {', '.join(versions[1:])}")
    build_once(dest, lambda tmp: _build_into(tmp, dest, plant, at, versions, extra, also),
               complete=lambda d: _matches(d / "releases.json", plant, at, n_releases, also))
    return json.loads((dest / "releases.json").read_text())


def _build_into(tmp: Path, dest: Path, plant: str, at: str, versions: list[str], extra: dict,
                also: tuple[str, ...]) -> None:
    """The whole build in `tmp` (published later as `dest`: releases.json names `dest`'s paths)."""
    repo, dist = tmp / "repo", tmp / "dist"
    _CLOCK[0] = 0
    shutil.copytree(MINI, repo, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    dist.mkdir(parents=True)
    _git(repo, "init", "-q")
    _set_version(repo, versions[0])
    _commit(repo, f"release {versions[0]}")
    _git(repo, "tag", f"v{versions[0]}")
    planted_commit = None
    planted = {}  # version -> commit, every plant
    for v in versions[1:]:
        for i in range(3):
            if v == at and i == 1:
                _scale_step_base(repo, PLANTS[plant])
                planted_commit = planted[v] = _commit(repo, f"decode: step base cost ({plant})")
            elif v in extra and i == 1:
                _scale_step_base(repo, ALSO[extra[v]])
                planted[v] = _commit(repo, f"decode: step base cost ({extra[v]})")
            else:
                _note(repo, f"{v}: housekeeping {i}")
                _commit(repo, f"housekeeping {v}.{i}")
        _set_version(repo, v)
        _commit(repo, f"release {v}")
        _git(repo, "tag", f"v{v}")
    wheels = [_wheel(repo, f"v{v}", dist) for v in versions]
    _index_page(tmp / "index", wheels)  # relative links: they hold after the rename
    meta = {"versions": versions, "tags": [f"v{v}" for v in versions], "plant": plant, "at": at,
            "planted_commit": planted_commit, "also": list(also), "planted": planted,
            "repo": str(dest / "repo"), "index": str(dest / "index")}
    (tmp / "releases.json").write_text(json.dumps(meta, indent=2) + "\n")  # last: marks it complete


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dest", type=Path)
    ap.add_argument("--plant", choices=sorted(PLANTS), default="gain")
    ap.add_argument("--at", default="0.1.5", help="the release that carries the planted change")
    ap.add_argument("--releases", type=int, default=9)
    ap.add_argument("--also", action="append", default=[], metavar="KIND@VERSION",
                    help=f"one more planted change (KIND: {', '.join(ALSO)})")
    args = ap.parse_args()
    print(json.dumps(build(args.dest.resolve(), plant=args.plant, at=args.at, n_releases=args.releases,
                           also=tuple(args.also)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
