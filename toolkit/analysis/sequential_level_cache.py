"""Pocock levels simulated once, kept (toolkit.analysis.sequential_level.nominal_level).

A level is a seeded simulation of 400,000 null paths: 3-11 s of CPU, the same number every time for
the same settings and code. It is kept in two places, each entry keyed by the settings and `code_hash()`
(the source of the simulation and of the borrowing test it calibrates, toolkit.analysis.noise_prior),
so a change to either code never reads an old number:
- the table shipped in the package (`toolkit/data/sequential_levels.json`) for the designs `run`,
  `sweep`, `attribute` and `compare` use by default and with --max-repeats 3..32; written by
  `python -m toolkit.analysis.sequential_level`, checked by tests/test_sequential.py;
- a per-user cache ($XDG_CACHE_HOME/patchbench/sequential-levels/<code hash>/, one small file per
  level, written to a temporary name and renamed: concurrent processes never read half a file) for
  the others (a stored-spread prior's df, stored counts).
A damaged or unreadable entry is simulated again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

Args = tuple  # (alpha, min_repeats, max_repeats, prior_dof, stored_a, stored_b, sides)

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "sequential_levels.json"
SHIPPED_MAX_REPEATS = tuple(range(3, 17)) + (20, 24, 32)  # with min_repeats 2, alpha 0.05, both sides


@functools.lru_cache(maxsize=1)
def code_hash() -> str:
    """The hash of the code a level is a function of (its simulation and the borrowing test): their tokens,
    comments and blank lines left out, so an edited comment keeps the kept levels (and the shipped table)."""
    h = hashlib.sha256()
    for name in ("sequential_level.py", "noise_prior.py"):  # beside this module
        h.update(_code_tokens((Path(__file__).resolve().parent / name).read_bytes()))
    return h.hexdigest()[:16]


def _code_tokens(source: bytes) -> bytes:
    """The source's tokens without comments and non-logical line breaks (tokenize: the same on every Python)."""
    import io
    import tokenize

    skip = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING}
    toks = [f"{t.type}:{t.string}" for t in tokenize.tokenize(io.BytesIO(source).readline) if t.type not in skip]
    return "\n".join(toks).encode()


def key(args: Args) -> str:
    alpha, *rest = args
    return "_".join([repr(float(alpha)), *(str(int(x)) for x in rest)])


@functools.lru_cache(maxsize=1)
def _shipped() -> dict:
    try:
        table = json.loads(SHIPPED.read_text())
    except (OSError, ValueError):
        return {}
    return table.get("levels", {}) if table.get("code") == code_hash() else {}


def _user_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "patchbench" / "sequential-levels" / code_hash()


def lookup(args: Args) -> float | None:
    """The kept level for these settings, or None (not kept, or kept for other code)."""
    k = key(args)
    if k in _shipped():
        return float(_shipped()[k])
    try:
        value = float((_user_dir() / k).read_text())
    except (OSError, ValueError):
        return None
    return value if 0.0 < value < 1.0 else None


def keep(args: Args, value: float) -> None:
    """Keep a simulated level for the next process (best effort: a read-only cache only costs time)."""
    try:
        d = _user_dir()
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            f.write(repr(float(value)))
        os.replace(tmp, d / key(args))
    except OSError:
        pass


def shipped_args() -> list[Args]:
    return [(0.05, 2, m, 0, 0, 0, sides) for m in SHIPPED_MAX_REPEATS for sides in (2, 1)]
