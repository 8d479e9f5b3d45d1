"""Sources: git / path / pypi -> a base git repo that patches are applied on.

- git: a bare mirror per URL under `$PATCHBENCH_HOME/mirrors` (repeated use is offline and fast;
  local repositories are re-fetched every time since that costs nothing), `rev` resolved to a SHA.
- path: a local directory used as it is, uncommitted changes included, identified by a content hash.
- pypi: the sdist, or the wheel where no sdist exists, downloaded once into
  `$PATCHBENCH_HOME/artifacts/<sha256>/`, its sha256 checked, unpacked and committed.

`materialise_base(spec, dest, ...)` fills `dest` (an empty directory) with a git work tree whose
HEAD is the base commit, and returns a `Base` describing where it came from.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tarfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from filelock import FileLock
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

from toolkit.tree import gitrepo, package_index
from toolkit.errors import BadInput, PatchbenchError
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # recipe -> envs -> tree -> sources: keep the import for types only
    from toolkit.recipe.spec import SourceSpec

_console = Console(stderr=True, highlight=False)  # progress of the long steps: clones, downloads
_SKIP_NAMES = {".git", "__pycache__", ".mypy_cache", ".pytest_cache"}


@dataclass(frozen=True)
class Base:
    """Identity of a base tree before patches."""

    kind: str  # git | path | pypi
    location: str
    rev: str | None  # as requested
    resolved: str  # commit SHA (git), content hash (path), artifact sha256 (pypi)
    layout: str  # git | path | sdist | wheel
    package_dir: str  # where the Python project sits in *this* tree
    artifact: dict = field(default_factory=dict)  # pypi: filename, sha256, url

    def identity(self) -> dict:
        return {
            "kind": self.kind,
            "location": self.location,
            "resolved": self.resolved,
            "layout": self.layout,
            "package_dir": self.package_dir,
        }


# -------------------------------------------------------------------------------------------- git


def _mirror_path(home: Path, url: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", url.rstrip("/").split("/")[-1]).strip("-") or "repo"
    return home / "mirrors" / f"{slug}-{hashlib.sha256(url.encode()).hexdigest()[:12]}.git"


def _is_local(url: str) -> bool:
    return not re.match(r"^[a-z+]+://|^git@", url) or url.startswith("file://")


def resolve_git(spec: SourceSpec, home: Path, *, refresh: bool = False) -> tuple[Path, str]:
    """Ensure the mirror exists and knows `rev`; return (mirror, commit sha)."""
    mirror = _mirror_path(home, spec.location)
    mirror.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(mirror) + ".lock"):
        if not mirror.exists():
            if _is_local(spec.location) and not Path(spec.location.removeprefix("file://")).exists():
                raise BadInput(f"source {spec.name}: git repository {spec.location} does not exist")
            tmp = mirror.with_name(mirror.name + f".tmp-{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            with _console.status(f"source {spec.name}: cloning a mirror of {spec.location} "
                                 f"(first use; later runs reuse {mirror})"):
                gitrepo.clone(spec.location, tmp, mirror=True,
                              what=f"source {spec.name}: git clone --mirror {spec.location}")
            os.replace(tmp, mirror)
        elif refresh or _is_local(spec.location):
            gitrepo.fetch(mirror, what=f"source {spec.name}: git fetch {spec.location}")
        sha = gitrepo.rev_parse(mirror, spec.rev or "HEAD")
        if sha is None and not refresh and not _is_local(spec.location):
            gitrepo.fetch(mirror, what=f"source {spec.name}: git fetch {spec.location}")
            sha = gitrepo.rev_parse(mirror, spec.rev or "HEAD")
    if sha is None:
        raise BadInput(
            f"source {spec.name}: unknown revision `{spec.rev}` in {spec.location}",
            hint="a tag, branch or commit that exists upstream",
        )
    return mirror, sha


def _checkout_git(mirror: Path, sha: str, dest: Path) -> None:
    gitrepo.clone(mirror, dest, no_checkout=True)
    gitrepo.checkout(dest, sha)


# ------------------------------------------------------------------------------------------- path


def _list_path_files(root: Path) -> list[str]:
    """Files of a local checkout: git's view (tracked + untracked, not ignored) or a plain walk."""
    if (root / ".git").exists():
        listed = gitrepo.ls_files(root)
        if listed is not None:
            return sorted({f for f in listed if (root / f).is_file()})
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_NAMES and not d.endswith(".egg-info"))
        for name in filenames:
            if name.endswith(".pyc"):
                continue
            files.append(str(Path(dirpath, name).relative_to(root)))
    return sorted(files)


def content_hash(root: Path) -> str:
    """sha256 over (path, mode, bytes) of every file, as a local checkout is used."""
    h = hashlib.sha256()
    for rel in _list_path_files(root):
        p = root / rel
        h.update(rel.encode() + b"\0")
        h.update(b"x" if os.access(p, os.X_OK) else b"-")
        h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def _copy_path(root: Path, dest: Path) -> None:
    for rel in _list_path_files(root):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)


# ------------------------------------------------------------------------------------------- pypi


def _split_requirement(req: str) -> tuple[str, str]:
    name, _, version = req.partition("==")
    return name.strip(), version.strip()


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _index_file(home: Path) -> Path:
    return home / "artifacts" / "index.json"


def _read_index(home: Path) -> dict:
    try:
        return json.loads(_index_file(home).read_text())
    except (OSError, ValueError):
        return {}


def _choose_file(files: list[dict], name: str, version: str, want: str) -> dict | None:
    norm = _normalise(name).replace("-", "_")
    sdists, wheels = [], []
    for f in files:
        fn = f["filename"]
        low = fn.lower()
        if low.endswith(".tar.gz") or low.endswith(".zip"):
            stem = low.rsplit(".tar.gz", 1)[0].rsplit(".zip", 1)[0]
            if _normalise(stem) == _normalise(f"{name}-{version}"):
                sdists.append(f)
        elif low.endswith(".whl"):
            parts = fn[:-4].split("-")
            if len(parts) >= 5 and parts[0].lower() == norm and parts[1] == version:
                wheels.append(f)
    if want in ("auto", "sdist") and sdists:
        return sdists[0]
    if want == "sdist":
        return None

    def score(f: dict) -> tuple:
        tags = f["filename"][:-4].split("-")[-3:]
        py_tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
        return (tags[2] == "any", tags[0] == py_tag, "x86_64" in tags[2], f["filename"])

    return max(wheels, key=score) if wheels else None


def resolve_pypi(spec: SourceSpec, home: Path, *, pinned_sha256: str | None = None,
                 offline: bool = False) -> dict:
    """The artifact to use: {filename, sha256, url, kind}. Cached by requirement in an index."""
    name, version = _split_requirement(spec.location)
    key = f"{_normalise(name)}=={version}:{spec.artifact}" + (f"@{spec.index}" if spec.index else "")
    index = _read_index(home)
    entry = index.get(key)
    if entry and (home / "artifacts" / entry["sha256"] / entry["filename"]).is_file():
        return entry
    if offline:
        raise PatchbenchError(f"source {spec.name}: {spec.location} is not cached and --offline is set")
    index_url = spec.index or package_index.index_url()
    try:
        files = package_index.project_files(name, index_url)
    except PatchbenchError as exc:
        raise type(exc)(f"source {spec.name}: {exc.message}") from None
    chosen = _choose_file(files, name, version, spec.artifact)
    if chosen is None:
        kinds = "sdist" if spec.artifact == "sdist" else "sdist or wheel"
        raise BadInput(f"source {spec.name}: {spec.location} has no {kinds} on {index_url}")
    fn = chosen["filename"]
    entry = {
        "filename": fn,
        "sha256": chosen["hashes"]["sha256"],
        "url": chosen["url"],
        "kind": "wheel" if fn.endswith(".whl") else "sdist",
    }
    if pinned_sha256 and pinned_sha256 != entry["sha256"]:
        raise PatchbenchError(
            f"source {spec.name}: {fn} on the index has sha256 {entry['sha256'][:16]}..., "
            f"the recipe/lock pins {pinned_sha256[:16]}..."
        )
    _download(entry, home, spec.name)
    with FileLock(str(_index_file(home)) + ".lock"):
        index = _read_index(home)
        index[key] = entry
        _index_file(home).write_text(json.dumps(index, indent=1, sort_keys=True))
    return entry


def _download(entry: dict, home: Path, source: str) -> Path:
    dest_dir = home / "artifacts" / entry["sha256"]
    dest = dest_dir / entry["filename"]
    if dest.is_file():
        return dest
    dest_dir.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + f".part-{os.getpid()}")
    h = hashlib.sha256()
    columns = ("{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn())
    try:
        with urllib.request.urlopen(entry["url"], timeout=300) as resp, open(tmp, "wb") as fh, \
                Progress(*columns, console=_console, transient=True) as progress:
            total = int(resp.headers.get("Content-Length") or 0) or None
            _console.print(f"source {source}: downloading {entry['filename']}"
                           + (f" ({total / 2**20:.1f} MiB)" if total else "") + " once; sha256 checked")
            task = progress.add_task(entry["filename"], total=total)
            while chunk := resp.read(1 << 20):
                h.update(chunk)
                fh.write(chunk)
                progress.advance(task, len(chunk))
    except (urllib.error.URLError, OSError) as exc:
        tmp.unlink(missing_ok=True)
        raise PatchbenchError(f"source {source}: download of {entry['filename']} failed: {exc}") from None
    if h.hexdigest() != entry["sha256"]:
        tmp.unlink(missing_ok=True)
        raise PatchbenchError(
            f"source {source}: {entry['filename']} sha256 mismatch: got {h.hexdigest()}, "
            f"index says {entry['sha256']}"
        )
    os.replace(tmp, dest)
    return dest


def artifact_path(entry: dict, home: Path) -> Path:
    return home / "artifacts" / entry["sha256"] / entry["filename"]


def _safe_member(name: str) -> str | None:
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts:
        return None
    return str(p)


def _unpack(archive: Path, dest: Path) -> None:
    """Unpack an sdist (dropping its top directory) or a wheel into dest."""
    if archive.name.endswith(".whl") or archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            names = zf.namelist()
            strip = archive.name.endswith(".zip") and len({n.split("/")[0] for n in names}) == 1
            for info in zf.infolist():
                if info.is_dir():
                    continue
                rel = info.filename.split("/", 1)[1] if strip else info.filename
                rel = _safe_member(rel)
                if not rel:
                    continue
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as fh:
                    shutil.copyfileobj(src, fh)
                mode = (info.external_attr >> 16) & 0o777
                if mode & 0o111:
                    target.chmod(0o755)
        return
    with tarfile.open(archive) as tf:
        for member in tf.getmembers():
            if not member.isfile():
                continue
            parts = member.name.split("/", 1)
            if len(parts) != 2:
                continue
            rel = _safe_member(parts[1])
            if not rel:
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            src = tf.extractfile(member)
            assert src is not None
            with src, open(target, "wb") as fh:
                shutil.copyfileobj(src, fh)
            if member.mode & 0o111:
                target.chmod(0o755)


# ------------------------------------------------------------------------------------------ entry


def resolve_base(spec: SourceSpec, home: Path, *, refresh: bool = False, lock_entry: dict | None = None,
                 offline: bool = False) -> tuple[Base, object]:
    """Resolve a source's identity without materialising it. Returns (Base, handle)."""
    if spec.kind == "git":
        mirror, sha = resolve_git(spec, home, refresh=refresh)
        return Base("git", spec.location, spec.rev, sha, "git", spec.package_dir), mirror
    if spec.kind == "path":
        root = Path(spec.location)
        if not root.is_dir():
            raise BadInput(f"source {spec.name}: path {root} is not a directory")
        return Base("path", spec.location, spec.rev, content_hash(root), "path", spec.package_dir), root
    entry = resolve_pypi(
        spec, home,
        pinned_sha256=spec.sha256 or (lock_entry or {}).get("artifact", {}).get("sha256"),
        offline=offline,
    )
    layout = entry["kind"]
    return Base("pypi", spec.location, None, entry["sha256"], layout, "", artifact=entry), artifact_path(entry, home)


def materialise_base(spec: SourceSpec, base: Base, handle, dest: Path) -> str:
    """Fill the empty directory `dest` with the base as a git work tree; return the base commit."""
    dest.mkdir(parents=True, exist_ok=True)
    if base.kind == "git":
        _checkout_git(handle, base.resolved, dest)
        return gitrepo.head(dest)
    if base.kind == "path":
        _copy_path(handle, dest)
        subject = f"base: {spec.name} from path {base.location} (content {base.resolved[:12]})"
    else:
        _unpack(handle, dest)
        subject = f"base: {spec.name} {spec.location} ({base.artifact['filename']})"
    gitrepo.init(dest)
    return gitrepo.commit_all(dest, subject)
