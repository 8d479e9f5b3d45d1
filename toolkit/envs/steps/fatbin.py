"""What a CUDA binary holds, read from cuobjdump's text: SASS (cubins) and PTX, per arch. Pure.

`cuobjdump --list-elf --list-ptx FILE` names each embedded file ("ELF file 1: x.1.sm_120a.cubin",
"PTX file 1: x.1.sm_120f.ptx"), but names a family cubin like a plain one (code=sm_120f lists as
"sm_120"; cuobjdump 13.x). `cuobjdump -res-usage FILE` prints one header per embedded file, under
"Fatbin elf code:" or "Fatbin ptx code:", with the full arch ("arch = sm_120f"); it is needed only when
a plain name shows up, and only the headers of the same kind (ELF for cubins) may stand in for it: a
PTX header for compute_120a next to an sm_120f cubin is not SASS for sm_120a.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = re.compile(r"^(ELF|PTX) file\s+\d+:\s*\S*?\.(sm_\d+[af]?)\.(?:cubin|ptx)\s*$")
_PLAIN = re.compile(r"^sm_\d+$")
_SECTION = re.compile(r"^Fatbin (elf|ptx) code:")
_ARCH = re.compile(r"^arch = (sm_\d+[af]?)\s*$")


@dataclass(frozen=True)
class Holds:
    """The arches a binary carries code for: `sass` (cubins) and `ptx`, as sm_ names."""

    sass: frozenset[str]
    ptx: frozenset[str]

    @property
    def any(self) -> frozenset[str]:
        return self.sass | self.ptx


def listing_names(listing: str) -> tuple[set[str], set[str]]:
    """(cubin arches, PTX arches) as `--list-elf --list-ptx` names them (family cubins plain)."""
    sass, ptx = set(), set()
    for line in listing.splitlines():
        m = _NAME.match(line.strip())
        if m:
            (sass if m.group(1) == "ELF" else ptx).add(m.group(2))
    return sass, ptx


def needs_headers(listing: str) -> bool:
    """Whether a plain name (sm_120) is listed: only -res-usage's headers tell sm_120 from sm_120f."""
    return any(_PLAIN.fullmatch(a) for names in listing_names(listing) for a in names)


def header_arches(res_usage: str) -> tuple[set[str], set[str]]:
    """(ELF header arches, PTX header arches) from `cuobjdump -res-usage`."""
    out: dict[str, set[str]] = {"elf": set(), "ptx": set()}
    kind = None
    for line in res_usage.splitlines():
        line = line.strip()
        sec = _SECTION.match(line)
        if sec:
            kind = sec.group(1)
            continue
        m = _ARCH.match(line)
        if m and kind:
            out[kind].add(m.group(1))
    return out["elf"], out["ptx"]


def _resolve(names: set[str], headers: set[str]) -> set[str]:
    """A plain listed name stands for the headers of the same number (sm_120 -> sm_120f and/or sm_120)."""
    out = {a for a in names if not _PLAIN.fullmatch(a)}
    for plain in (a for a in names if _PLAIN.fullmatch(a)):
        same = {h for h in headers if re.fullmatch(rf"{plain}[af]?", h) and (h == plain or h not in out)}
        out |= same or {plain}
    return out


def holds(listing: str, res_usage: str | None = None) -> Holds:
    """What `--list-elf --list-ptx` (and, when it lists a plain name, `-res-usage`) say a binary holds."""
    sass, ptx = listing_names(listing)
    if res_usage is not None:
        elf_h, ptx_h = header_arches(res_usage)
        sass, ptx = _resolve(sass, elf_h), _resolve(ptx, ptx_h)
    return Holds(frozenset(sass), frozenset(ptx))
