"""Each verdict's promise, measured: its false-alarm rate under no change and its power at a stated
effect, from seeded simulations run through the public verdict functions (the answers verdict
`toolkit.analysis.answers_verdict.judge`, the gate `toolkit.analysis.gate_verdict.judge`, the speed
verdict `toolkit.analysis.stats.verdict`).

A row of the table is a `Row` in `ROWS`: a name, the stated alpha, `false_alarm(seed, n)` and
`power(seed, n)` (each returns how many of n simulated cases raised the verdict's alarm), the effect
the power is measured at, and the power the verdict promises there (None: reported, not promised).
To add a verdict (SLA limit, change point), append rows built the same way; `measure` and the table
need nothing else. A rate "holds" when its exact 95% Clopper-Pearson interval reaches down to the
stated alpha or below (false alarms) and the power is at least its target.

Noise models (the ones each verdict assumes):
- answers: 64 prompts; an unstable prompt gives each launch one of two answers at random (1/2 each:
  the most discordant two-answer prompt), a stable one always the same; a change makes the
  candidate's launches give a new answer on 12 stable prompts. The reference has 2 launches.
- gate: 200 questions at accuracy 0.80-0.95; a share of them unstable (right with probability 1/2
  in each run), the rest always right or always wrong; a 5-point drop makes 10 stably right
  questions wrong in the candidate.
- speed: one value per launch (the run-to-run spread the verdict tests against), normal with a
  coefficient of variation of 3%; the effect multiplies the candidate's mean.

    python benchmarks/verdict_calibration.py [--cases 2000] [--seed 1] [--json out.json]

Exit 1 when a row does not hold.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from toolkit.analysis import answers_verdict, gate_verdict, stats  # noqa: E402

Simulate = Callable[[int, int], int]  # (seed, cases) -> cases that raised the alarm


@dataclass(frozen=True)
class Row:
    name: str
    stated_alpha: float
    false_alarm: Simulate
    power: Simulate | None = None
    effect: str = ""
    power_target: float | None = None


@dataclass(frozen=True)
class Result:
    name: str
    stated_alpha: float
    cases: int
    false_alarms: int
    false_alarm_ci: tuple[float, float]
    power: float | None
    power_ci: tuple[float, float] | None
    effect: str
    power_target: float | None

    @property
    def false_alarm_rate(self) -> float:
        return self.false_alarms / self.cases

    @property
    def holds(self) -> bool:
        alpha_ok = self.false_alarm_ci[0] <= self.stated_alpha
        return alpha_ok and (self.power_target is None or (self.power or 0.0) >= self.power_target)

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d.update(false_alarm_rate=self.false_alarm_rate, holds=self.holds)
        return d


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def measure(row: Row, seed: int, cases: int) -> Result:
    fa = row.false_alarm(seed, cases)
    hits = row.power(seed + 1, cases) if row.power else None
    return Result(row.name, row.stated_alpha, cases, fa, clopper_pearson(fa, cases),
                  None if hits is None else hits / cases, None if hits is None else clopper_pearson(hits, cases),
                  row.effect, row.power_target)


# --- answers verdict -------------------------------------------------------------------------------

PROMPTS = 64


def _answers_launches(rng: np.random.Generator, launches: int, unstable: int, changed: int, tag: str):
    """`launches` Launches over PROMPTS prompts: the first `unstable` pick one of two answers each
    launch; the next `changed` give a new answer (the candidate's change); the rest are stable."""
    out = []
    for i in range(launches):
        flips = rng.random(unstable) < 0.5
        ids = [(p, 1 if flips[p] else 0) for p in range(unstable)]
        ids += [(p, 7) for p in range(unstable, unstable + changed)]
        ids += [(p, 0) for p in range(unstable + changed, PROMPTS)]
        out.append(answers_verdict.Launch(f"{tag}{i}", tuple(ids)))
    return out


def answers_case(candidates: int, unstable: int, changed: int) -> Simulate:
    def simulate(seed: int, cases: int) -> int:
        rng = np.random.default_rng(seed)
        alarms = 0
        for _ in range(cases):
            ref = _answers_launches(rng, 2, unstable, 0, "r")
            cand = _answers_launches(rng, candidates, unstable, changed, "c")
            alarms += answers_verdict.judge(1, ref, cand).verdict == answers_verdict.CHANGED
        return alarms
    return simulate


def answers_rows() -> list[Row]:
    rows = []
    for c in (1, 2, 4):
        for u in (10, 20, 30):
            rows.append(Row(f"answers: {c} candidate launch{'es' if c > 1 else ''}, {u}/{PROMPTS} unstable",
                            answers_verdict.DEFAULT_ALPHA, answers_case(c, u, 0), answers_case(c, u, 12),
                            f"12/{PROMPTS} stable prompts changed", 0.8 if u == 30 else None))
    return rows


# --- gate verdict ----------------------------------------------------------------------------------

QUESTIONS = 200
MAX_DROP = 0.03  # the shipped baseline's
ACCURACIES = (0.80, 0.85, 0.90, 0.94, 0.95)


def _gate_pair(rng: np.random.Generator, unstable_share: float, drop: int):
    """(candidate, reference) eval records: per-question correctness under the module's noise model."""
    acc = ACCURACIES[rng.integers(len(ACCURACIES))]
    unstable = round(unstable_share * QUESTIONS)
    right = round(acc * QUESTIONS - unstable / 2)  # stably right: the expected accuracy is acc

    def run(lost: int) -> list[int]:
        stable = [0] * lost + [1] * (right - lost) + [0] * (QUESTIONS - unstable - right)
        return stable + [int(x) for x in rng.random(unstable) < 0.5]

    def record(correct):
        return {"name": "gsm8k", "status": "ok", "accuracy": sum(correct) / len(correct), "correct": correct}

    return record(run(drop)), record(run(0))


def gate_case(unstable_share: float, drop: int) -> Simulate:
    def simulate(seed: int, cases: int) -> int:
        rng = np.random.default_rng(seed)
        fails = 0
        for _ in range(cases):
            cand, ref = _gate_pair(rng, unstable_share, drop)
            fails += gate_verdict.judge(cand, ref, max_drop=MAX_DROP).verdict == gate_verdict.FAILED
        return fails
    return simulate


def gate_identical(seed: int, cases: int) -> int:
    """Identical per-question results at each accuracy of ACCURACIES (questions in random order)."""
    rng = np.random.default_rng(seed)
    fails = 0
    for i in range(cases):
        k = round(ACCURACIES[i % len(ACCURACIES)] * QUESTIONS)
        correct = [int(x) for x in rng.permutation([1] * k + [0] * (QUESTIONS - k))]
        rec = {"name": "gsm8k", "status": "ok", "accuracy": k / QUESTIONS, "correct": correct}
        fails += gate_verdict.judge(dict(rec), rec, max_drop=MAX_DROP).verdict == gate_verdict.FAILED
    return fails


def gate_rows() -> list[Row]:
    effect = f"5-point drop ({QUESTIONS // 20} of {QUESTIONS} questions)"
    return [Row(f"gate: identical results, accuracy 0.80-0.95, max_drop {MAX_DROP:g}", 0.0, gate_identical),
            *(Row(f"gate: {round(s * 100)}% questions unstable, max_drop {MAX_DROP:g}", gate_verdict.DEFAULT_ALPHA,
                  gate_case(s, 0), gate_case(s, QUESTIONS // 20), effect, 0.8 if s <= 0.05 else None)
              for s in (0.05, 0.15))]


# --- speed verdict ---------------------------------------------------------------------------------

CV = 0.03


def speed_case(repeats: int, effect: float) -> Simulate:
    def simulate(seed: int, cases: int) -> int:
        rng = np.random.default_rng(seed)
        alarms = 0
        for _ in range(cases):
            a = 100.0 * (1 + CV * rng.standard_normal(repeats))
            b = 100.0 * (1 + effect) * (1 + CV * rng.standard_normal(repeats))
            alarms += stats.verdict(list(a), list(b), higher_is_better=True) in (stats.FASTER, stats.SLOWER)
        return alarms
    return simulate


def speed_rows() -> list[Row]:
    return [Row(f"speed: {n} vs {n} launches, CV {CV:.0%}", stats.DEFAULT_ALPHA, speed_case(n, 0.0),
                speed_case(n, effect), f"+{effect:.0%} throughput", 0.8) for n, effect in ((4, 0.10), (8, 0.06))]


ROWS: list[Row] = [*answers_rows(), *gate_rows(), *speed_rows()]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def table(results: list[Result]) -> str:
    head = f"{'verdict':<58} {'alpha':>5}  {'false alarms [95% CI]':<24} {'power [95% CI]':<24} at effect"
    lines = [head, "-" * len(head)]
    for r in results:
        fa = f"{_pct(r.false_alarm_rate)} [{_pct(r.false_alarm_ci[0])}, {_pct(r.false_alarm_ci[1])}]"
        pw = (f"{_pct(r.power)} [{_pct(r.power_ci[0])}, {_pct(r.power_ci[1])}]" if r.power is not None else "-")
        target = f" (target {r.power_target:.0%})" if r.power_target else ""
        mark = "" if r.holds else "  <- does not hold"
        lines.append(f"{r.name:<58} {r.stated_alpha:>5g}  {fa:<24} {pw:<24} {r.effect}{target}{mark}")
    lines.append(f"{results[0].cases if results else 0} simulated cases per rate, seeded; exact Clopper-Pearson "
                 "intervals; a false-alarm rate holds when its interval reaches the stated alpha or below")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=2000, help="simulated cases per rate (default 2000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = ap.parse_args(argv)
    if args.cases < 1:
        print(f"error: --cases must be at least 1, not {args.cases}", file=sys.stderr)
        return 2
    results = [measure(row, args.seed + 10 * i, args.cases) for i, row in enumerate(ROWS)]
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps([r.to_dict() for r in results], indent=2) + "\n")
    return 0 if all(r.holds for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
