"""Which patch yields which speedup: per-patch effects from per-prefix measurements. Pure.

Input: per-repeat values of the base and of every prefix of the stack (`prefix_values[0]` = base,
`prefix_values[i]` = base + patches 1..i), and optionally leave-one-out values (`leave_one_out[i]` =
the whole stack without patch i). Output, per patch i:

- `incremental`: prefix i-1 (A) vs prefix i (B): what patch i adds on top of the ones before it;
- `cumulative`: base vs prefix i;
- `leave_one_out`: stack without i (A) vs whole stack (B): what patch i is worth in the presence of
  all the others (interactions show up as a difference between the two);
- `share`: log(incremental speedup) / log(total speedup), the patch's part of the total on a log
  scale (shares of a stack add up to 1; meaningless when the total is ~1, so shown as a percentage
  only when the total is significant, and only when every step pushes the same way: a +10.9% and a
  -12.1% patch are not -400% and +500% of a -2.6% total; then each step's own ratio is shown).

Every comparison is `toolkit.analysis.stats.compare_values`: ratio, confidence interval, Mann-Whitney p and
verdict (faster / slower / not significant / too few repeats).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from rich.table import Table
from rich.text import Text

from toolkit.analysis import sequential as seq, stats


@dataclass(frozen=True)
class PatchEffect:
    """The effect of patch `index` (1-based) named `name`."""

    index: int
    name: str
    incremental: stats.Comparison | None  # None when a prefix has no values
    cumulative: stats.Comparison | None
    leave_one_out: stats.Comparison | None
    share: float | None
    loo_skipped: str | None = None  # why the stack without this patch has no values


@dataclass(frozen=True)
class Attribution:
    total: stats.Comparison | None  # base vs the whole stack
    patches: tuple[PatchEffect, ...]
    higher_is_better: bool | None
    unit: str = ""

    @property
    def one_way(self) -> bool:
        """Every step that significantly moves the metric moves it the same way (noise pushes no
        way): only then is a step's part of the total a share."""
        sides = {p.incremental.speedup > 1 for p in self.patches if p.incremental and p.incremental.significant}
        return len(sides) <= 1

    @property
    def share_header(self) -> str:
        return "share" if self.one_way else "own ratio (steps push both ways)"

    def share_text(self, p: PatchEffect) -> str:
        """The patch's share of the total as a percentage, only when the total is significant
        (a share of noise is not a share: "n.s. total") and every step pushes the same way (else
        the step's own ratio, e.g. "+10.9%")."""
        if not self.one_way:
            return f"{p.incremental.speedup - 1:+.1%}" if p.incremental else "-"
        if p.share is None:
            return "-"
        if self.total is None or not self.total.significant:
            return "n.s. total"
        return f"{p.share:+.0%}"

    def lines(self) -> list[str]:
        """One line per patch plus the total, pyperf-like."""
        out = []
        for p in self.patches:
            inc = stats.format_comparison(p.incremental) if p.incremental else "no values"
            loo = (f"; without it: {stats.format_comparison(p.leave_one_out)}" if p.leave_one_out
                   else (f"; without it: skipped ({p.loo_skipped})" if p.loo_skipped else ""))
            share = f" ({self.share_text(p)} of total)" if self.one_way and self.share_text(p).endswith("%") else ""
            out.append(f"{p.index:>3} {p.name}: {inc}{share}{loo}")
        if self.total is not None:
            out.append(f"total: {stats.format_comparison(self.total)}")
        return out


def attribute(prefix_values: Sequence[Sequence[float] | None], *, higher_is_better: bool | None,
              names: Sequence[str] | None = None,
              leave_one_out: Mapping[int, Sequence[float]] | None = None, unit: str = "",
              skipped: Mapping[int, str] | None = None,
              stat: str = "mean", min_repeats: int = stats.DEFAULT_MIN_REPEATS,
              alpha: float = stats.DEFAULT_ALPHA,
              min_effect: float = stats.DEFAULT_MIN_EFFECT, sequential=None,
              stored: Mapping[str, int] | None = None, together=None) -> Attribution:
    """Per-patch effects (see the module docstring). `prefix_values` has n+1 entries for n patches
    (an entry may be None or empty: that prefix was not measured); `names[i-1]` names patch i;
    `leave_one_out` maps a 1-based patch index to the values of the stack without it, `skipped`
    a 1-based index to why the stack without it could not be measured. `sequential` (a
    `toolkit.analysis.sequential.Design`): the values were launched until settled under it, so every
    comparison takes the sequential verdict (`sequential.settle(launched=True)`); `stored` ("prefix{k}" / "without{i}" ->
    how many of its first values were stored before launching: their spread is pooled as in
    `sequential.verdict`). `together` ((A label, B label) -> keep-masks over their values, the sequential
    steps' `together`): a sequential comparison reads only the values launched in a campaign of both."""
    n = len(prefix_values) - 1
    if n < 1:
        raise ValueError("attribute needs the base and at least one prefix")
    if names is not None and len(names) != n:
        raise ValueError(f"names has {len(names)} entries for {n} patches")
    loo = dict(leave_one_out or {})
    bad = [i for i in loo if not 1 <= i <= n]
    if bad:
        raise ValueError(f"leave_one_out index {bad[0]} is not a patch number 1..{n}")

    counts = dict(stored or {})

    def cmp(a: Sequence[float] | None, b: Sequence[float] | None, labels=("", ""),
            pair: tuple[str, str] | None = None) -> stats.Comparison | None:
        if not a or not b:
            return None
        if sequential is not None and together is not None:  # the values launched together only
            from toolkit.analysis.sequential_steps import sides

            pair = pair or labels
            (a, left_a), (b, left_b) = sides({pair[0]: a, pair[1]: b}, pair[0], pair[1], together)
            if left_a or left_b:
                labels = ("", "")  # no stored leading values in the looks: nothing to pool by position
            if not a or not b:
                return None
        c = stats.compare_values(list(a), list(b), higher_is_better=higher_is_better, unit=unit,
                                 stat=stat, min_repeats=min_repeats, alpha=alpha,
                                 min_effect=min_effect)
        if sequential is None:
            return c
        return seq.settle(c, list(a), list(b), sequential, (counts.get(labels[0], 0), counts.get(labels[1], 0)),
                          launched=True)

    base, full = prefix_values[0], prefix_values[n]
    total = cmp(base, full, pair=("prefix0", f"prefix{n}"))
    log_total = math.log(total.speedup) if total and total.speedup > 0 else 0.0
    effects = []
    for i in range(1, n + 1):
        inc = cmp(prefix_values[i - 1], prefix_values[i], (f"prefix{i - 1}", f"prefix{i}"))
        share = None
        if inc is not None and inc.speedup > 0 and abs(log_total) > 1e-12:
            share = math.log(inc.speedup) / log_total
        effects.append(PatchEffect(
            index=i, name=names[i - 1] if names is not None else f"patch {i}", incremental=inc,
            cumulative=cmp(base, prefix_values[i], pair=("prefix0", f"prefix{i}")),
            leave_one_out=cmp(loo.get(i), full, (f"without{i}", f"prefix{n}")) if i in loo else None, share=share,
            loo_skipped=(skipped or {}).get(i)))
    return Attribution(total, tuple(effects), higher_is_better, unit)


_STYLE = {stats.FASTER: "green", stats.SLOWER: "red", stats.NOT_SIGNIFICANT: "dim",
          stats.TOO_FEW: "yellow", stats.NOT_JUDGED: "dim", seq.NOISY: "yellow", seq.UNSETTLED: "yellow"}


def _verdict(c: stats.Comparison | None, answer: str | None) -> Text:
    if c is None:
        return Text("-")
    if answer is None:
        return Text(c.verdict, style=_STYLE.get(c.verdict, ""))
    bad = answer != "same answers"
    style = ("bold red" if answer == "broken output" else "bold yellow") if bad and c.verdict == stats.FASTER \
        else _STYLE.get(c.verdict, "")
    return Text(f"{c.verdict}, {answer}", style=style)


def _p(c: stats.Comparison | None) -> str:
    """The Mann-Whitney p of a step, "seq." where the sequential verdict decided it, "-" without one."""
    if c is None:
        return "-"
    return f"{c.p_value:.3f}" if math.isfinite(c.p_value) else "seq."


def render_attribution(attr: Attribution, *, title: str = "per-patch effect", answers: dict | None = None) -> Table:
    """A rich Table: per patch, incremental and leave-one-out speedups with CIs and verdicts;
    `answers` (patch index -> the answers' verdict of its prefix against the base) beside them."""
    t = Table(title=title)
    for col, just in (("#", "right"), ("patch", "left"), ("speedup [95% CI]", "right"),
                      ("p", "right"), ("verdict", "left"), (attr.share_header, "right"),
                      ("without it", "right"), ("cumulative", "right")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]

    def sp(c: stats.Comparison | None) -> str:
        if c is None:
            return "-"
        return stats.format_speedup(c.speedup, *c.speedup_ci)

    for p in attr.patches:
        c = p.incremental
        t.add_row(str(p.index), p.name, sp(c), _p(c),
                  _verdict(c, (answers or {}).get(p.index)),
                  attr.share_text(p), sp(p.leave_one_out) if p.leave_one_out or not p.loo_skipped
                  else f"skipped: {p.loo_skipped}",
                  sp(p.cumulative))
    if attr.total is not None:
        c = attr.total
        t.add_row("", "total", sp(c), _p(c),
                  Text(c.verdict, style=_STYLE.get(c.verdict, "")), "", "", "")
    return t
