"""Patch stacks: parse (unidiff), refuse hostile patches, check with zero fuzz, apply one commit each.

A patch is written against the upstream's git layout (`python/sglang/...` for sglang). When the
tree is a PyPI sdist/wheel, where the package sits at the root, the git-layout prefix
(`package_dir`) is stripped from every path before applying, so one patch serves both layouts.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import unidiff

from toolkit import gitcmd
from toolkit.errors import BadInput, PatchbenchError

KERNEL_SUFFIXES = {".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".c", ".jinja"}
BUILD_NAMES = {"pyproject.toml", "setup.py", "setup.cfg", "requirements.txt", "MANIFEST.in"}


@dataclass(frozen=True)
class FileChange:
    path: str  # target path (source path for deletions), git layout
    kind: str  # python | kernel | build | other
    added: int
    removed: int
    status: str  # modified | added | removed | renamed
    hunks: tuple[str, ...]  # hunk headers "@@ -a,b +c,d @@"


@dataclass(frozen=True)
class PatchInfo:
    path: Path
    name: str  # relative to patches/
    sha256: str
    subject: str
    files: tuple[FileChange, ...]

    @property
    def added(self) -> int:
        return sum(f.added for f in self.files)

    @property
    def removed(self) -> int:
        return sum(f.removed for f in self.files)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(sorted({f.kind for f in self.files}))


@dataclass(frozen=True)
class Disposition:
    """What would happen to one patch of a stack (from `check_stack`)."""

    patch: str
    status: str  # applies | already-applied | conflict | file-missing | skipped
    detail: str = ""
    file: str | None = None
    hunk: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "applies"


def file_kind(path: str) -> str:
    p = PurePosixPath(path)
    if p.suffix == ".py":
        return "python"
    if p.suffix in KERNEL_SUFFIXES or p.name == "CMakeLists.txt" or p.suffix == ".cmake":
        return "kernel"
    if p.name in BUILD_NAMES:
        return "build"
    return "other"


def _subject(text: str, fallback: str) -> str:
    header = re.split(r"^diff --git |^--- ", text, maxsplit=1, flags=re.M)[0]
    m = re.search(r"^Subject:\s*(?:\[[^\]]*\]\s*)?(.+)$", header, flags=re.M)
    if m:
        return m.group(1).strip()
    for line in header.splitlines():
        line = line.strip()
        if line and not re.match(r"^(From|Date|From:|index|---)\b", line):
            return line[:120]
    return fallback


def _check_path(patch: str, raw: str) -> str:
    """Return the path without its a/ b/ prefix; refuse escapes, absolute paths and .git/."""
    path = raw.strip().strip('"')
    if path == "/dev/null":
        return path
    if path.startswith("/"):
        raise BadInput(f"patch {patch}: absolute path `{path}` refused")
    if path[:2] in ("a/", "b/"):
        path = path[2:]
    parts = PurePosixPath(path).parts
    if ".." in parts:
        raise BadInput(f"patch {patch}: path `{path}` escapes the tree (`..`) and is refused")
    if ".git" in parts:
        raise BadInput(f"patch {patch}: path `{path}` writes into .git/ and is refused")
    if not parts:
        raise BadInput(f"patch {patch}: empty path refused")
    return path


def parse_patch(path: Path, *, name: str | None = None, allow_binary: bool = False) -> PatchInfo:
    """Parse and vet a patch file. Hostile or malformed patches raise BadInput (one line)."""
    name = name or path.name
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"patch {name}: cannot read {path}: {exc.strerror}") from None
    if not data.strip():
        raise BadInput(f"patch {name}: the file is empty")
    if b"\r\n" in data:
        raise BadInput(f"patch {name}: has CRLF line endings; convert it to LF (e.g. dos2unix)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"patch {name}: not UTF-8 text (binary data?)") from None
    if re.search(r"^GIT binary patch$|^Binary files .* differ$", text, flags=re.M) and not allow_binary:
        raise BadInput(
            f"patch {name}: carries a binary hunk",
            hint="set allow_binary_patches = true in the recipe if this is intended",
        )
    for m in re.finditer(r"^(?:new file mode|new mode|old mode|deleted file mode) (\d+)$", text, flags=re.M):
        if m.group(1).startswith("120"):
            raise BadInput(f"patch {name}: creates a symbolic link (mode {m.group(1)}), refused")
    for m in re.finditer(r"^(?:diff --git (\S+) (\S+)|--- (\S+)|\+\+\+ (\S+)|rename (?:from|to) (.+)|copy (?:from|to) (.+))$",
                         text, flags=re.M):
        for raw in m.groups():
            if raw:
                _check_path(name, raw)
    try:
        patchset = unidiff.PatchSet(text)
    except unidiff.UnidiffParseError as exc:
        raise BadInput(f"patch {name}: not a valid unified diff: {exc}") from None
    if len(patchset) == 0:
        raise BadInput(f"patch {name}: not a diff (no file changes found)")
    files = []
    for pf in patchset:
        status = (
            "added" if pf.is_added_file
            else "removed" if pf.is_removed_file
            else "renamed" if getattr(pf, "is_rename", False)
            else "modified"
        )
        target = pf.source_file if pf.is_removed_file else pf.target_file
        rel = _check_path(name, target)
        if pf.is_binary_file and not allow_binary:
            raise BadInput(f"patch {name}: binary change to {rel} refused", hint="allow_binary_patches = true")
        files.append(
            FileChange(
                path=rel,
                kind=file_kind(rel),
                added=pf.added,
                removed=pf.removed,
                status=status,
                hunks=tuple(f"@@ -{h.source_start},{h.source_length} +{h.target_start},{h.target_length} @@"
                            for h in pf),
            )
        )
    return PatchInfo(
        path=path,
        name=name,
        sha256=hashlib.sha256(data).hexdigest(),
        subject=_subject(text, path.stem),
        files=tuple(files),
    )


# --------------------------------------------------------------------------------- layout mapping


def map_patch_text(info: PatchInfo, strip_prefix: str) -> str:
    """Rewrite the patch's paths from the git layout to a layout without `strip_prefix/`."""
    text = info.path.read_text(encoding="utf-8")
    if not strip_prefix:
        return text
    prefix = strip_prefix.strip("/") + "/"
    outside = [f.path for f in info.files if not f.path.startswith(prefix)]
    if outside:
        raise PatchbenchError(
            f"patch {info.name}: touches {outside[0]}, outside `{prefix}` of the git layout, "
            f"so absent from this PyPI tree"
        )

    def fix(path: str) -> str:
        for ab in ("a/", "b/"):
            if path.startswith(ab + prefix):
                return ab + path[len(ab) + len(prefix):]
        if path.startswith(prefix):
            return path[len(prefix):]
        return path

    out = []
    for line in text.splitlines(keepends=True):
        m = re.match(r"^diff --git (\S+) (\S+)(\n?)$", line)
        if m:
            line = f"diff --git {fix(m.group(1))} {fix(m.group(2))}{m.group(3)}"
        else:
            m = re.match(r"^(--- |\+\+\+ |rename from |rename to |copy from |copy to )(\S+)(.*)$", line, flags=re.S)
            if m and m.group(2) != "/dev/null":
                line = f"{m.group(1)}{fix(m.group(2))}{m.group(3)}"
        out.append(line)
    return "".join(out)


# ----------------------------------------------------------------------------- check and apply


def _hunk_for_line(info: PatchInfo, file: str, line: int, strip_prefix: str) -> str | None:
    for f in info.files:
        mapped = f.path[len(strip_prefix) + 1:] if strip_prefix and f.path.startswith(strip_prefix + "/") else f.path
        if mapped != file and f.path != file:
            continue
        best = None
        for h in f.hunks:
            start = int(re.match(r"@@ -(\d+)", h).group(1))
            if start <= line:
                best = h
        return best or (f.hunks[0] if f.hunks else None)
    return None


def _diagnose(info: PatchInfo, stderr: str, strip_prefix: str) -> tuple[str, str, str | None, str | None]:
    """(status, detail, file, hunk) from git apply's complaint."""
    m = re.search(r"error: patch failed: (.+?):(\d+)", stderr)
    if m:
        file, line = m.group(1), int(m.group(2))
        return "conflict", "context mismatch", file, _hunk_for_line(info, file, line, strip_prefix)
    m = re.search(r"error: (.+?): (?:No such file or directory|does not exist in index)", stderr)
    if m:
        return "file-missing", "file missing in the tree", m.group(1), None
    m = re.search(r"error: (.+?): already exists in working directory", stderr)
    if m:
        return "conflict", "file to create already exists", m.group(1), None
    last = [l for l in stderr.strip().splitlines() if l.strip()]
    return "conflict", (last[-1] if last else "does not apply"), None, None


def _apply_args(patch_file: Path, *, reverse: bool = False, check: bool = False) -> list[str]:
    args = ["apply", "--whitespace=nowarn", "-p1"]
    if reverse:
        args.append("--reverse")
    if check:
        args.append("--check")
    else:
        args.append("--index")
    return [*args, str(patch_file)]


def disposition(repo: Path, info: PatchInfo, strip_prefix: str, scratch: Path) -> Disposition:
    """Would `info` apply to the current state of `repo` with zero fuzz?"""
    mapped = scratch / f"{info.sha256[:16]}.patch"
    try:
        mapped.write_text(map_patch_text(info, strip_prefix))
    except PatchbenchError as exc:
        return Disposition(info.name, "file-missing", exc.message)
    fwd = gitcmd.git(repo, *_apply_args(mapped, check=True), check=False)
    if fwd.returncode == 0:
        return Disposition(info.name, "applies")
    rev = gitcmd.git(repo, *_apply_args(mapped, check=True, reverse=True), check=False)
    if rev.returncode == 0:
        return Disposition(info.name, "already-applied", "the base already contains this change (reverse applies)")
    status, detail, file, hunk = _diagnose(info, fwd.stderr, strip_prefix)
    return Disposition(info.name, status, detail, file, hunk)


def apply_one(repo: Path, info: PatchInfo, strip_prefix: str, scratch: Path) -> str:
    """Apply one patch with zero fuzz and commit it; return the commit SHA. Raise on failure."""
    d = disposition(repo, info, strip_prefix, scratch)
    if not d.ok:
        raise PatchbenchError(describe_failure(d))
    mapped = scratch / f"{info.sha256[:16]}.patch"
    gitcmd.git(repo, *_apply_args(mapped), what=f"git apply {info.name}")
    body = f"{info.subject}\n\npatchbench: {info.name} sha256 {info.sha256}\n"
    gitcmd.git(repo, "commit", "-q", "--no-verify", "--allow-empty", "-m", body, what=f"commit {info.name}")
    return gitcmd.head(repo)


def describe_failure(d: Disposition) -> str:
    where = ""
    if d.file:
        where = f" in {d.file}" + (f" at hunk {d.hunk}" if d.hunk else "")
    return f"patch {d.patch} does not apply{where}: {d.status}: {d.detail}"


def check_stack(repo: Path, infos: list[PatchInfo], strip_prefix: str) -> list[Disposition]:
    """Dispositions of a whole stack, in order, without touching `repo` (uses a scratch clone)."""
    out: list[Disposition] = []
    with tempfile.TemporaryDirectory(prefix="patchbench-check-") as tmp:
        scratch = Path(tmp) / "patches"
        scratch.mkdir()
        clone = Path(tmp) / "tree"
        gitcmd.git(None, "clone", "-q", "--shared", str(repo), str(clone), what="git clone (check)")
        for info in infos:
            d = disposition(clone, info, strip_prefix, scratch)
            out.append(d)
            if d.ok:
                apply_one(clone, info, strip_prefix, scratch)
    return out
