"""Patch stacks: parse (unidiff), refuse hostile patches, check with zero fuzz, apply one commit each.

A patch is written against the upstream's git layout (`python/sglang/...` for sglang). When the
tree is a PyPI sdist/wheel, where the package sits at the root, the git-layout prefix
(`package_dir`) is stripped from every path before applying, so one patch serves both layouts.
"""

from __future__ import annotations

import codecs
import hashlib
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import unidiff

from toolkit.tree import gitrepo
from toolkit.errors import BadInput, PatchbenchError

KERNEL_SUFFIXES = {".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".c", ".jinja"}
BUILD_NAMES = {"pyproject.toml", "setup.py", "setup.cfg", "requirements.txt", "MANIFEST.in"}


@dataclass(frozen=True)
class Hunk:
    """Where one hunk of a parsed patch (unidiff) sits: its ranges in the old and the new file."""

    source_start: int
    source_length: int
    target_start: int
    target_length: int
    expected: tuple[str, ...] = ()  # the lines the hunk expects in the old file (context and removed)

    def __str__(self) -> str:
        return f"@@ -{self.source_start},{self.source_length} +{self.target_start},{self.target_length} @@"


@dataclass(frozen=True)
class FileChange:
    path: str  # target path (source path for deletions), git layout
    kind: str  # python | kernel | build | other
    added: int
    removed: int
    status: str  # modified | added | removed | renamed
    hunks: tuple["Hunk", ...]  # in the order of the patch; str() is the header "@@ -a,b +c,d @@"


@dataclass(frozen=True)
class PatchInfo:
    path: Path
    name: str  # relative to patches/
    sha256: str
    subject: str
    files: tuple[FileChange, ...]
    crlf: bool = False  # CRLF line endings (it applies only to files with CRLF endings)

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
    status: str  # applies | already-applied | conflict | file-missing | line-endings | skipped
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


def _unquote(patch: str, raw: str) -> str:
    """A path as git writes it: C-quoted (`"b/..\\057x"`, octal bytes of UTF-8) when it holds special
    characters, else as it is. A quoted name that does not decode is refused."""
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        try:
            return codecs.escape_decode(raw[1:-1].encode("utf-8"))[0].decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            raise BadInput(f"patch {patch}: quoted path {raw} does not decode, refused") from None
    return raw


def _check_path(patch: str, raw: str) -> str:
    """Return the path without its a/ b/ prefix; refuse escapes, absolute paths and .git/.

    C-quoted names are decoded first, so `"b/..\\057x"` is seen as `../x` and refused."""
    path = _unquote(patch, raw.strip())
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


# git extended header lines that name a path (besides `diff --git`, `---` and `+++`, which unidiff
# parses into source_file/target_file)
_NAMING_HEADERS = ("rename from ", "rename to ", "copy from ", "copy to ")


def _vet(name: str, pf: unidiff.PatchedFile, allow_binary: bool) -> str:
    """Refuse a hostile file change of a parsed patch; return its path (git layout)."""
    for raw in (pf.source_file, pf.target_file):
        _check_path(name, raw)
    for line in pf.patch_info or ():
        for header in _NAMING_HEADERS:
            if line.startswith(header):
                _check_path(name, line[len(header):].rstrip("\n"))
    for mode in (pf.source_mode, pf.target_mode):
        if mode and str(mode).startswith("120"):
            raise BadInput(f"patch {name}: creates a symbolic link (mode {mode}), refused")
    rel = _check_path(name, pf.source_file if pf.is_removed_file else pf.target_file)
    if pf.is_binary_file and not allow_binary:
        raise BadInput(
            f"patch {name}: carries a binary hunk ({rel})",
            hint="set allow_binary_patches = true in the recipe if this is intended",
        )
    return rel


def parse_patch(path: Path, *, name: str | None = None, allow_binary: bool = False) -> PatchInfo:
    """Parse and vet a patch file. Hostile or malformed patches raise BadInput (one line).

    A patch with CRLF line endings is parsed as if it had LF and applied as it is: it applies to
    files with CRLF endings (`disposition` names the mismatch when the file has LF)."""
    name = name or path.name
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"patch {name}: cannot read {path}: {exc.strerror}") from None
    if not data.strip():
        raise BadInput(f"patch {name}: the file is empty")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"patch {name}: not UTF-8 text (binary data?)") from None
    crlf = "\r\n" in text
    try:
        patchset = unidiff.PatchSet(text.replace("\r\n", "\n") if crlf else text)
    except unidiff.UnidiffParseError as exc:
        where = _short_hunk(text.replace("\r\n", "\n"))
        raise BadInput(f"patch {name}: not a valid unified diff: {exc}" + (f" ({where})" if where else "")) from None
    if len(patchset) == 0:
        raise BadInput(f"patch {name}: not a diff (no file changes found)")
    files = []
    for pf in patchset:
        rel = _vet(name, pf, allow_binary)
        status = (
            "added" if pf.is_added_file
            else "removed" if pf.is_removed_file
            else "renamed" if pf.is_rename
            else "modified"
        )
        files.append(
            FileChange(
                path=rel,
                kind=file_kind(rel),
                added=pf.added,
                removed=pf.removed,
                status=status,
                hunks=tuple(Hunk(h.source_start, h.source_length, h.target_start, h.target_length,
                                 tuple(ln.value.rstrip("\r\n") for ln in h.source_lines()))
                            for h in pf),
            )
        )
    return PatchInfo(
        path=path,
        name=name,
        sha256=hashlib.sha256(data).hexdigest(),
        subject=_subject(text, path.stem),
        files=tuple(files),
        crlf=crlf,
    )


# --------------------------------------------------------------------------------- layout mapping
# A patch is written in the git layout (`python/sglang/...`); a PyPI tree has the package at its
# root. git maps one onto the other itself: `-p` strips the `a/`/`b/` prefix plus the components
# of `strip_prefix` from every name (headers, renames included), so the patch file is applied as
# it is, byte for byte.


def strip_level(info: PatchInfo, strip_prefix: str) -> int:
    """git apply's -p for `info` on a tree without `strip_prefix/`; raise when a file lies outside."""
    prefix = PurePosixPath(strip_prefix.strip("/")) if strip_prefix.strip("/") else None
    if prefix is None:
        return 1
    outside = [f.path for f in info.files if prefix not in PurePosixPath(f.path).parents]
    if outside:
        raise PatchbenchError(
            f"patch {info.name}: touches {outside[0]}, outside `{prefix}/` of the git layout, "
            f"so absent from this PyPI tree"
        )
    return 1 + len(prefix.parts)


def tree_path(change: FileChange, strip_prefix: str) -> str:
    """Where a file of the patch (git layout) sits in a tree without `strip_prefix/`."""
    prefix = strip_prefix.strip("/")
    if prefix and change.path.startswith(prefix + "/"):
        return change.path[len(prefix) + 1:]
    return change.path


# ----------------------------------------------------------------------------- check and apply


def _hunk_for_line(info: PatchInfo, file: str, line: int, strip_prefix: str) -> str | None:
    for f in info.files:
        if file not in (tree_path(f, strip_prefix), f.path):
            continue
        before = [h for h in f.hunks if h.source_start <= line]
        best = before[-1] if before else (f.hunks[0] if f.hunks else None)
        return str(best) if best else None
    return None


def _line_endings(repo: Path, info: PatchInfo, strip_prefix: str) -> tuple[str, str] | None:
    """(file, detail) when the patch's line endings differ from those of a file it changes."""
    for f in info.files:
        rel = tree_path(f, strip_prefix)
        try:
            data = (repo / rel).read_bytes()
        except OSError:
            continue
        if info.crlf and b"\n" in data and b"\r\n" not in data:
            return rel, (f"the patch has CRLF line endings, {rel} has LF: convert the patch to LF "
                         f"(e.g. dos2unix {info.path})")
        if not info.crlf and b"\r\n" in data:
            return rel, (f"the patch has LF line endings, {rel} has CRLF: convert the patch to CRLF "
                         f"(e.g. unix2dos {info.path}) or write it with `git diff` on that file")
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


_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def _short_hunk(text: str) -> str:
    """Where a unified diff's first hunk whose body does not match its header's line counts starts
    ("line 12: @@ -18,7 +18,7 @@ has 5 old and 5 new lines for 7 and 7"), or ""."""
    lines = text.rstrip("\n").split("\n")
    for i, line in enumerate(lines):
        m = _HUNK.match(line)
        if not m:
            continue
        want_old, want_new = int(m.group(1) or 1), int(m.group(2) or 1)
        old = new = 0
        for body in lines[i + 1:]:
            if old >= want_old and new >= want_new or not body[:1] in (" ", "-", "+", "\\", ""):
                break
            old += body[:1] in (" ", "-", "")
            new += body[:1] in (" ", "+", "")
        if (old, new) != (want_old, want_new):
            return (f"line {i + 1}: {line.split(' @@')[0]} @@ has {old} old and {new} new lines for "
                    f"{want_old} and {want_new}")
    return ""


def disposition(repo: Path, info: PatchInfo, strip_prefix: str, scratch: Path | None = None) -> Disposition:
    """Would `info` apply to the current state of `repo` with zero fuzz? (`scratch`: unused.)"""
    try:
        level = strip_level(info, strip_prefix)
    except PatchbenchError as exc:
        return Disposition(info.name, "file-missing", exc.message)
    fwd = gitrepo.apply_check(repo, info.path.resolve(), strip=level)
    if fwd.ok:  # zero fuzz; a hunk whose context moved (an offset) is said, not hidden
        moved = re.findall(r"Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)", fwd.stderr + fwd.stdout)
        return Disposition(info.name, "applies", "; ".join(f"hunk {h} applies at line {at} (offset {off} lines)"
                                                          for h, at, off in moved))
    if gitrepo.apply_check(repo, info.path.resolve(), strip=level, reverse=True).ok:
        return Disposition(info.name, "already-applied", "the base already contains this change (reverse applies)")
    mismatch = _line_endings(repo, info, strip_prefix)
    if mismatch:
        return Disposition(info.name, "line-endings", mismatch[1], mismatch[0])
    status, detail, file, hunk = _diagnose(info, fwd.stderr, strip_prefix)
    if detail == "context mismatch" and file:
        detail = _mismatch(repo, info, file, strip_prefix) or detail
    elif status == "file-missing":
        detail += _prefix_hint(repo, info, strip_prefix)
    return Disposition(info.name, status, detail, file, hunk)


def _mismatch(repo: Path, info: PatchInfo, file: str, strip_prefix: str) -> str | None:
    """The first line a failing hunk expects that the tree does not have, and what to do."""
    try:
        tree_lines = (repo / file).read_text(errors="replace").splitlines()
    except OSError:
        return None
    for f in info.files:
        if file not in (tree_path(f, strip_prefix), f.path):
            continue
        for h in f.hunks:
            for i, want in enumerate(h.expected):
                n = h.source_start + i
                have = tree_lines[n - 1] if n - 1 < len(tree_lines) else "(end of file)"
                if have != want:
                    said = f"context mismatch at {h}: line {n} expected `{want.strip()}`, the tree has `{have.strip()}`"
                    earlier = _earlier_patch(repo, file, n) if n - 1 < len(tree_lines) else None
                    if earlier:
                        return (f"{said} (an earlier patch of this stack, {earlier}, changed that line: write this "
                                f"patch on top of it, by hand in the .patch file, or reorder or drop one of them)")
                    return (f"{said} (the base moved on: `patchbench patches rebase RECIPE --onto REV` ports the "
                            "stack with a 3-way merge; for a path source `--onto HEAD`)")
    return None


def _earlier_patch(repo: Path, file: str, line: int) -> str | None:
    """The patch of this applied stack whose commit last changed `line` of `file` (git blame; the
    stack's commits carry "patchbench: NAME sha256 ..."), None when the base's own line is there."""
    blamed = gitrepo.run(repo, "blame", "--porcelain", "-L", f"{line},{line}", "HEAD", "--", file, check=False)
    if not blamed.ok or not blamed.stdout:
        return None
    sha = blamed.stdout.split(maxsplit=1)[0]
    body = gitrepo.run(repo, "log", "-1", "--format=%B", sha, check=False)
    m = re.search(r"^patchbench: (\S+) sha256 ", body.stdout or "", re.M) if body.ok else None
    return m.group(1) if m else None


def _prefix_hint(repo: Path, info: PatchInfo, strip_prefix: str) -> str:
    """When a path is missing but the tree has the same file under another prefix, say which."""
    listed = gitrepo.ls_files(repo) or []
    for f in info.files:
        rel = tree_path(f, strip_prefix)
        if f.status == "added" or (repo / rel).exists():
            continue
        parts = PurePosixPath(rel).parts
        for k in range(1, len(parts)):
            tail = "/".join(parts[k:])
            if tail in listed:
                extra = "/".join(parts[:k])
                return (f" (the tree has {tail}: the patch's paths carry an extra `{extra}/`; write the diff "
                        f"from the source's root, e.g. `git diff` inside it, or strip `{extra}/` from its a/ b/ paths)")
        hits = [p for p in listed if p.endswith("/" + rel)]
        if hits:
            missing = hits[0][: -len(rel) - 1]
            return (f" (the tree has {hits[0]}: the patch lacks the `{missing}/` prefix; write paths in the "
                    f"git layout, e.g. {missing}/{rel}, and set the source's package_dir)")
    return ""


def apply_one(repo: Path, info: PatchInfo, strip_prefix: str, scratch: Path | None = None) -> str:
    """Apply one patch with zero fuzz and commit it; return the commit SHA. Raise on failure
    (BadInput when the patch's line endings do not match the tree's). `scratch`: unused."""
    d = disposition(repo, info, strip_prefix)
    if d.status == "line-endings":
        raise BadInput(describe_failure(d))
    if not d.ok:
        raise PatchbenchError(describe_failure(d))
    gitrepo.apply(repo, info.path.resolve(), strip=strip_level(info, strip_prefix), what=f"git apply {info.name}")
    body = f"{info.subject}\n\npatchbench: {info.name} sha256 {info.sha256}\n"
    return gitrepo.commit(repo, body, what=f"commit {info.name}")


def describe_failure(d: Disposition) -> str:
    where = ""
    if d.file:
        where = f" in {d.file}" + (f" at hunk {d.hunk}" if d.hunk else "")
    return f"patch {d.patch} does not apply{where}: {d.status}: {d.detail}"


def check_stack(repo: Path, infos: list[PatchInfo], strip_prefix: str) -> list[Disposition]:
    """Dispositions of a whole stack, in order, without touching `repo` (uses a scratch clone)."""
    with tempfile.TemporaryDirectory(prefix="patchbench-check-") as tmp:
        clone = Path(tmp) / "tree"
        gitrepo.clone(repo, clone, shared=True, what="git clone (check)")
        return check_in(clone, infos, strip_prefix)


def check_in(clone: Path, infos: list[PatchInfo], strip_prefix: str) -> list[Disposition]:
    """The stack's dispositions, in order, applying each patch that applies to `clone` (a scratch
    work tree the caller owns) so that the next one is checked against its real predecessor."""
    out: list[Disposition] = []
    for info in infos:
        d = disposition(clone, info, strip_prefix)
        out.append(d)
        if d.ok:
            apply_one(clone, info, strip_prefix)
    return out
