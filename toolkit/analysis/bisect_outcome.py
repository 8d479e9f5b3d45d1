"""What a bisection found: each step as it was decided and the result, with the progress picture and the
line printed for a step (`toolkit.analysis.bisect` makes them)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from toolkit.analysis import stats


@dataclass(frozen=True)
class BisectStep:
    """One step: `prefix` was tested while the culprit was known to be in (lo, hi]."""

    number: int
    prefix: int
    lo: int
    hi: int  # n + 1 while the whole stack has not been found bad
    outcome: str  # good | bad | skip
    n_values: int = 0
    n_base: int = 0
    mean: float = float("nan")
    base_mean: float = float("nan")
    loss_pct: float = float("nan")  # how much worse than the base, in % (negative: better)
    loss_ci_pct: tuple[float, float] = (float("nan"), float("nan"))
    certain: bool = True
    label: str = ""
    line: str = ""  # rendered progress line
    pass_no: int = 1  # 2 for the repair pass
    reference: str = ""  # the label of what the probe was compared with (the base, or the nearest good item)

    def to_dict(self) -> dict:
        """The step as JSON: what it compared (`reference`; `n` values of the probe against `n_reference` of the
        reference, launched together), how it was decided, and its line as printed."""
        return {"prefix": self.prefix, "label": self.label, "outcome": self.outcome, "certain": self.certain,
                "pass": self.pass_no, "reference": self.reference, "n": self.n_values, "n_reference": self.n_base,
                "line": self.line}


@dataclass(frozen=True)
class BisectResult:
    """Outcome of a bisection. `culprit` is the 1-based item number whose application made the
    metric worse than the base by more than the threshold (None: no such item, or ambiguous:
    see `candidates`)."""

    n: int
    culprit: int | None
    culprit_label: str | None
    candidates: tuple[int, int] | None  # inclusive range of possible culprits when skips hide it
    confirmed: bool  # culprit-1 -> culprit is itself a significant regression (conviction "slower")
    repaired: bool  # a weak first answer led to a second pass (see `repair`)
    good_values: tuple[float, ...]  # measurements at culprit - 1
    bad_values: tuple[float, ...]  # measurements at culprit
    base_values: tuple[float, ...]
    conviction: stats.Comparison | None  # culprit-1 (A) vs culprit (B)
    steps: tuple[BisectStep, ...]
    builds: int  # distinct prefixes measured (base included)
    measurements: int  # values obtained from `measure`
    calls: int  # calls to `measure` (skips included)
    skipped: tuple[int, ...]
    uncertain: tuple[int, ...]  # prefixes decided at max_repeats by the point estimate
    values: dict = field(default_factory=dict)  # prefix -> tuple of values (the cache)
    threshold_pct: float = 0.0
    higher_is_better: bool = True
    message: str = ""

    @property
    def found(self) -> bool:
        return self.culprit is not None

    def render_steps(self) -> list[str]:
        return [s.line for s in self.steps]


def progress_picture(n: int, lo: int, hi: int, p: int, width: int = 40) -> str:
    """asv-find-like picture of the search range [lo, hi] over prefixes 0..n, `O` at `p`."""
    cols = min(n + 1, width)

    def col(i: int) -> int:
        return min(cols - 1, i * cols // (n + 1))

    chars = ["."] * cols
    for c in range(col(lo), col(min(hi, n)) + 1):
        chars[c] = "-"
    chars[col(lo)] = "<"
    if hi <= n:
        chars[col(hi)] = ">"
    chars[col(p)] = "O"
    return "".join(chars)


def mean_of(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def format_pct(x: float) -> str:
    return f"{x:+.1f}%" if math.isfinite(x) else "?"
