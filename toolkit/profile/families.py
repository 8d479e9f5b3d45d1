"""The kernel-family rules: data (toolkit/data/kernel_families.toml), compiled once, matched first-wins."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import BadInput
from toolkit.resources import DATA_DIR

RULES_FILE = DATA_DIR / "kernel_families.toml"
OTHER = "other"
IDLE = "idle"


@dataclass(frozen=True)
class Family:
    name: str
    label: str
    roofline: tuple[str, ...]
    patterns: tuple[re.Pattern, ...]

    def matches(self, text: str) -> bool:
        return any(p.search(text) for p in self.patterns)


def _parse(path: Path) -> list[Family]:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BadInput(f"cannot read kernel-family rules {path}: {exc}") from None
    out = []
    for i, row in enumerate(data.get("family", [])):
        name = row.get("name")
        pats = row.get("patterns")
        if not isinstance(name, str) or not isinstance(pats, list) or not pats:
            raise BadInput(f"{path}: family #{i + 1} needs a name and a non-empty patterns list")
        try:
            compiled = tuple(re.compile(p, re.IGNORECASE) for p in pats)
        except re.error as exc:
            raise BadInput(f"{path}: family {name}: bad regex: {exc}") from None
        out.append(Family(name, str(row.get("label", name)), tuple(row.get("roofline", [])), compiled))
    return out


def load_families(extra: str | Path | None = None) -> tuple[Family, ...]:
    """The shipped rules, after a user's file (`extra`) whose families come first."""
    fams = _parse(Path(extra)) if extra else []
    fams += _parse(RULES_FILE)
    return tuple(fams)


def classify(families: tuple[Family, ...], name: str, scope: str | None = None) -> str:
    """The family of a kernel called `name` inside profiler scope `scope` (scope tried first)."""
    for text in (scope, name):
        if not text:
            continue
        for fam in families:
            if fam.matches(text):
                return fam.name
    return OTHER


def labels(families: tuple[Family, ...]) -> dict[str, str]:
    out = {f.name: f.label for f in families}
    out.setdefault(OTHER, "other (unclassified)")
    out.setdefault(IDLE, "idle gaps")
    return out
