"""An unpacked-wheel tree (package dirs + one *.dist-info/) zipped back into a .whl with a fresh
RECORD (sha256 of every file), so that patched files are installed with matching hashes: from a
directory (`repack_wheel`) or straight from a git tree's objects (`repack_tree`, no export).

Members are stored, not deflated: the wheel lives only in the env's build directory and is
unpacked by the installer right away, so compressing sglang's 130 MB would cost time for nothing.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import zipfile
from pathlib import Path
from typing import Iterable

from toolkit.tree import gitrepo
from toolkit.errors import BadInput

_EPOCH = (1980, 1, 1, 0, 0, 0)
_SKIP = ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")


def _dist_info(names: Iterable[str], where: object) -> str:
    infos = sorted({n.split("/", 1)[0] for n in names
                    if "/" in n and n.split("/", 1)[0].endswith(".dist-info")})
    if len(infos) != 1:
        raise BadInput(f"{where} is not an unpacked wheel: expected one *.dist-info directory, "
                       f"found {len(infos)}")
    return infos[0]


def _wheel_name(metadata: str, wheel_file: str, where: str) -> str:
    """`<name>-<version>-<tags>.whl` from METADATA's Name/Version and WHEEL's Tag lines."""
    meta = {}
    for line in metadata.splitlines():
        if ":" in line and not line.startswith(" "):
            k, v = line.split(":", 1)
            meta.setdefault(k.strip(), v.strip())
        if not line.strip():
            break
    name, version = meta.get("Name"), meta.get("Version")
    if not name or not version:
        raise BadInput(f"{where}/METADATA lacks Name or Version")
    tags = [ln.split(":", 1)[1].strip() for ln in wheel_file.splitlines() if ln.startswith("Tag:")]
    if not tags:
        raise BadInput(f"{where}/WHEEL has no Tag: line")
    parts = [t.split("-") for t in tags]
    tag = "-".join(".".join(dict.fromkeys(p[i] for p in parts)) for i in range(3))
    return f"{re.sub(r'[-_.]+', '_', name)}-{version}-{tag}.whl"


def _write(files: dict[str, tuple[bytes, int]], info: str, out_dir: Path) -> Path:
    """files: {relative path: (content, mode)}; dist-info last, as the wheel spec recommends."""
    name = _wheel_name(files[f"{info}/METADATA"][0].decode(errors="replace"),
                       files[f"{info}/WHEEL"][0].decode(errors="replace"), info) \
        if f"{info}/METADATA" in files and f"{info}/WHEEL" in files else None
    if name is None:
        raise BadInput(f"{info} lacks METADATA or WHEEL")
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / name
    skip = {f"{info}/{n}" for n in _SKIP}
    order = sorted((r for r in files if r not in skip), key=lambda r: (r.startswith(info + "/"), r))
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_STORED) as zf:
        for rel in order:
            data, mode = files[rel]
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            writer.writerow([rel, f"sha256={digest}", len(data)])
            zi = zipfile.ZipInfo(rel, date_time=_EPOCH)
            zi.external_attr = (0o100000 | (mode & 0o777)) << 16
            zf.writestr(zi, data)
        writer.writerow([f"{info}/RECORD", "", ""])
        zi = zipfile.ZipInfo(f"{info}/RECORD", date_time=_EPOCH)
        zi.external_attr = 0o100644 << 16
        zf.writestr(zi, record.getvalue())
    return wheel


def _kept(rel: str) -> bool:
    parts = rel.split("/")
    return not (".git" in parts or "__pycache__" in parts or rel.endswith(".pyc"))


def repack_wheel(tree_dir: Path, out_dir: Path) -> Path:
    """Zip the unpacked wheel in `tree_dir` into `out_dir`; return the wheel's path."""
    tree_dir = Path(tree_dir)
    infos = [p.name for p in tree_dir.iterdir() if p.is_dir() and p.name.endswith(".dist-info")]
    info = _dist_info([f"{n}/" for n in infos], tree_dir)
    files = {}
    for dirpath, dirnames, filenames in os.walk(tree_dir):
        dirnames[:] = [d for d in dirnames if d not in (".git", "__pycache__")]
        for n in filenames:
            path = Path(dirpath, n)
            rel = path.relative_to(tree_dir).as_posix()
            if _kept(rel):
                files[rel] = (path.read_bytes(), path.stat().st_mode)
    return _write(files, info, Path(out_dir))


def repack_tree(repo: Path, tree_hash: str, out_dir: Path) -> Path:
    """Zip the unpacked wheel committed as `tree_hash` in `repo`, read through `git archive`
    (the exact committed content; nothing is written but the wheel)."""
    files = gitrepo.tree_files(repo, tree_hash, _kept)
    return _write(files, _dist_info(files, f"tree {tree_hash}"), Path(out_dir))
