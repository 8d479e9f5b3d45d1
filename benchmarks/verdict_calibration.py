"""Each verdict's promise, measured: its false-alarm rate under no change and its power at a stated
effect, from seeded simulations run through the public verdict functions (the answers verdict
`toolkit.analysis.answers_verdict.judge`, the gate `toolkit.analysis.gate_verdict.judge`, the speed
verdict `toolkit.analysis.stats.verdict`, the change point `toolkit.history.otava.detect_many`
(Apache Otava in its own env, then `toolkit.history.change_verdict.judge`), the bisect step
`toolkit.analysis.bisect.bisect_stack`, the kernel shape `toolkit.kernels.table.compare`, the box's
clock flag `toolkit.results.box_flags.clock_flags`, a sweep's "dominated" `toolkit.analysis.pareto.dominated_variants`, the profile's kernel-family verdict
`toolkit.profile.diff.kernel_diff`).

A row of the table is a `Row` in `ROWS`: a name, the stated alpha, `false_alarm(seed, n)` and
`power(seed, n)` (each returns how many of n simulated cases raised the verdict's alarm), the effect
the power is measured at, and the power the verdict promises there (None: reported, not promised).
To add a verdict, append rows built the same way; `measure` and the table need nothing else. A
rate "holds" when its exact 95% Clopper-Pearson interval reaches down to the stated alpha or below
(false alarms) and the power is at least its target.

Noise models (the ones each verdict assumes):
- answers: 64 prompts; an unstable prompt gives each launch one of two answers at random (1/2 each:
  the most discordant two-answer prompt), a stable one always the same; a change makes the
  candidate's launches give a new answer on 12 stable prompts. The reference has 2 launches. The
  sequential rows (toolkit.analysis.answers_sequential) draw up to 1-4 candidate launches and count
  those its verdict looked at before it settled, against the 1 launch a candidate is asked by default.
- gate: 200 questions at accuracy 0.80-0.95; a share of them unstable (right with probability 1/2
  in each run), the rest always right or always wrong; a 5-point drop makes 10 stably right
  questions wrong in the candidate.
- speed: one value per launch (the run-to-run spread the verdict tests against), normal with a
  coefficient of variation of 3%; the effect multiplies the candidate's mean.
- change point: a tracked series of 20 points, each with gaussian relative noise (1%, 3%); the
  effect a -10% step at the middle. And series of 4-30 points (uniform) with 1-5% noise (uniform);
  the effect a stretch of 2-5 points (a regression fixed later) at a random place, -10%, -20%, -50%,
  found when both its ends are reported where they are. Every case of a rate goes to Otava in one
  start of its interpreter (`detect_many`), so each rate costs a few seconds.
- bisect step: a one-patch stack (its one step decides), each run's value gaussian with CV 3%, the
  default threshold (5%), repeats (3, up to 10) and alpha; the alarm is the step calling the patch
  bad. At half the threshold, only a *decided* bad step counts (an undecided one says "uncertain").
- pareto dominated: 3 variants on 1 GPU at 1 or 3 concurrencies (throughput 100 * c^0.7), 3 launches a
  point, CV 3%; the alarm: the first variant called dominated (`toolkit.analysis.pareto`); the effect:
  that variant 10% slower at every point.
- kernel shape: 10 trials per record, each the median of 5 timed iterations with 2% noise.
- box flag: 8 runs of one GPU kind, each run's median SM clock with 0.5% relative noise (a quarter
  of the 2% tolerance, `box_flags.STEADY_CLOCK_NOISE`); the alarm: the first run flagged.
- profile family: per profile, 20 decode steps of one family, each the profile's level (run-to-run
  CV 3%, or 10% for a busy CPU) times 1 + an exponential extra (mean 5%): time the machine takes
  from the work; the effect multiplies B's level.

    python benchmarks/verdict_calibration.py [--cases 2000] [--seed 1] [--json out.json] [--only TEXT]

The change-point rows need Apache Otava's env ($PATCHBENCH_OTAVA_ENV, else
$PATCHBENCH_HOME/tools/otava-0.8.0, made on first use). `--only TEXT`: the rows whose name contains it.

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

from toolkit.analysis import answers_sequential, answers_verdict, gate_verdict, stats  # noqa: E402

Simulate = Callable[[int, int], int]  # (seed, cases) -> cases that raised the alarm


@dataclass(frozen=True)
class Row:
    name: str
    stated_alpha: float
    false_alarm: Simulate
    power: Simulate | None = None
    effect: str = ""
    power_target: float | None = None
    launches: Callable[[int, int], float] | None = None  # (seed, cases) -> mean launches a case used
    fixed_launches: int | None = None  # what the fixed design it replaces uses


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
    launches: tuple[float, float] | None = None  # mean launches used (under no change, at the effect)
    fixed_launches: int | None = None

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
    used = (row.launches(seed, cases), row.launches(-(seed + 1), cases)) if row.launches else None
    return Result(row.name, row.stated_alpha, cases, fa, clopper_pearson(fa, cases),
                  None if hits is None else hits / cases, None if hits is None else clopper_pearson(hits, cases),
                  row.effect, row.power_target, used, row.fixed_launches)


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


def answers_sequential_case(looks: int, unstable: int, changed: int) -> tuple[Simulate, Callable[[int, int], float]]:
    """The sequential verdict (toolkit.analysis.answers_sequential.judge) with up to `looks` candidate
    launches: each case draws them all and the verdict stops at its first settled look (what the
    launch-by-launch rule reaches: it asks another launch only while unsettled). Returns the alarm
    count and the mean launches that asked (a negative seed: the same cases with `changed` prompts)."""
    design = answers_sequential.Design(max_looks=looks)
    seen: dict = {}  # (seed, cases, change) -> verdicts: the rate and the launches come from the same cases

    def cases_of(seed: int, cases: int, change: int):
        if (seed, cases, change) not in seen:
            rng = np.random.default_rng(seed)
            out = []
            for _ in range(cases):
                ref = _answers_launches(rng, 2, unstable, 0, "r")
                cand = _answers_launches(rng, looks, unstable, change, "c")
                out.append(answers_sequential.judge(1, ref, cand, design))
            seen[(seed, cases, change)] = out
        return seen[(seed, cases, change)]

    def simulate(seed: int, cases: int) -> int:
        return sum(v.verdict == answers_verdict.CHANGED for v in cases_of(seed, cases, changed))

    def launches(seed: int, cases: int) -> float:  # seed >= 0: no change; < 0: the power's cases
        change = changed if seed < 0 else 0
        return sum(v.looks for v in cases_of(-seed - 1 if seed < 0 else seed, cases, change)) / cases

    return simulate, launches


def answers_sequential_rows() -> list[Row]:
    rows = []
    for looks in (1, 2, 3, 4):
        for u in (10, 30):
            fa, _ = answers_sequential_case(looks, u, 0)
            power, used = answers_sequential_case(looks, u, 12)
            rows.append(Row(f"answers, sequential: up to {looks} look{'s' if looks > 1 else ''}, {u}/{PROMPTS} unstable",
                            answers_verdict.DEFAULT_ALPHA, fa, power, f"12/{PROMPTS} stable prompts changed",
                            0.8 if u == 30 else None, used, 1))
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


def equal_case(effect: float, cv: float) -> Simulate:
    """The sequential verdict (the default design: 2..16 launches each, interleaved looks) called "equal within 2%" for a
    true ratio of 1 + effect at a launch spread of cv (log-normal)."""
    from toolkit.analysis import sequential as seq

    def simulate(seed: int, cases: int) -> int:
        rng = np.random.default_rng(seed)
        design, said = seq.Design(), 0
        for _ in range(cases):
            a = 100.0 * np.exp(cv * rng.standard_normal(design.max_repeats))
            b = 100.0 * (1 + effect) * np.exp(cv * rng.standard_normal(design.max_repeats))
            said += seq.verdict(list(a), list(b), higher_is_better=True, design=design).verdict == seq.EQUAL
        return said
    return simulate


def equal_rows() -> list[Row]:
    """The equivalence verdict (two one-sided tests over the looks): false when the true ratio is at
    the edge of the 2% zone (where "equal" is likeliest to be false), power on an A/A pair."""
    from toolkit.analysis import sequential as seq

    return [Row(f"speed equal within 2% (sequential, TOST): ratio 1.02, launch spread {100 * cv:g}%", seq.DEFAULT_ALPHA,
                equal_case(seq.DEFAULT_MIN_EFFECT, cv), equal_case(0.0, cv), "A/A pair", target)
            for cv, target in ((0.005, 0.9), (0.01, 0.5))]


# --- change point (history) ------------------------------------------------------------------------

SERIES = 20  # tracked points per series


def _otava_home() -> Path:
    from toolkit.workspace import default_home

    return default_home()


def change_case(noise: float, step: float) -> Simulate:
    """Series of SERIES points with `noise` relative gaussian noise; `step`: the relative change of
    the second half (0: a flat series). One start of Otava's interpreter for all the cases."""
    from toolkit.history import otava

    def simulate(seed: int, cases: int) -> int:
        rng = np.random.default_rng(seed)
        level = np.where(np.arange(SERIES) < SERIES // 2, 1.0, 1.0 - step)
        many = [list(100.0 * level * (1 + noise * rng.standard_normal(SERIES))) for _ in range(cases)]
        return sum(bool(d.change_points) for d in otava.detect_many(many, _otava_home()))
    return simulate


LENGTHS = (4, 30)  # tracked points per series, both included
NOISES = (0.01, 0.05)  # relative gaussian noise per point, uniform between
STRETCH = (2, 5)  # a stretch's points, both included


def _stretch_series(rng: np.random.Generator, effect: float) -> tuple[list[float], tuple[int, int] | None]:
    """A series of LENGTHS points with NOISES noise; `effect` > 0: a stretch of STRETCH points, at a
    random place with at least one point on each side, lower by `effect` (a regression fixed later)."""
    points = int(rng.integers(STRETCH[0], STRETCH[1] + 1)) if effect else 0
    n = int(rng.integers(max(LENGTHS[0], points + 2), LENGTHS[1] + 1))
    noise = rng.uniform(*NOISES)
    level = np.ones(n)
    span = None
    if effect:
        start = int(rng.integers(1, n - points))
        span = (start, start + points)
        level[start:start + points] = 1.0 - effect
    return list(100.0 * level * (1 + noise * rng.standard_normal(n))), span


def stretch_case(effect: float) -> Simulate:
    """Series of `_stretch_series`, all to Otava in one start of its interpreter, then the verdict.
    Flat (effect 0): the alarm is any change point. A stretch: both its ends reported where they are
    (what a bisect of each end needs), as a stretch or as Otava's change points."""
    from toolkit.history import otava

    def simulate(seed: int, cases: int) -> int:
        rng = np.random.default_rng(seed)
        made = [_stretch_series(rng, effect) for _ in range(cases)]
        found = otava.detect_many([v for v, _ in made], _otava_home())
        if not effect:
            return sum(bool(d.change_points) for d in found)
        return sum({span[0], span[1]} <= {c.index for c in d.change_points} for (_, span), d in zip(made, found))
    return simulate


def change_rows() -> list[Row]:
    from toolkit.history.otava import DEFAULTS

    alpha = DEFAULTS["alpha"]
    shape = f"flat {LENGTHS[0]}-{LENGTHS[1]} pts, {NOISES[0]:.0%}-{NOISES[1]:.0%} noise"
    return [*(Row(f"change point: flat {SERIES}-point series, {n:.0%} noise", alpha, change_case(n, 0.0),
                  change_case(n, 0.10), f"-10% step at point {SERIES // 2}", 0.8) for n in (0.01, 0.03)),
            *(Row(f"change point: {shape}; stretch -{effect:.0%}", alpha, stretch_case(0.0), stretch_case(effect),
                  f"-{effect:.0%} over {STRETCH[0]}-{STRETCH[1]} points, both ends found", target)
              for effect, target in STRETCH_POWER)]


STRETCH_POWER = ((0.10, None), (0.20, 0.8), (0.50, 0.95))  # effect, promised power


# --- bisect step -----------------------------------------------------------------------------------

BISECT_THRESHOLD = 5.0  # %, bisect's default


def bisect_case(loss: float, *, certain_only: bool = False, sequential: bool = False) -> Simulate:
    """One bisect step (a one-patch stack: the step decides the culprit) with CV values per run;
    `loss`: the patch's true relative loss. Alarm: the step calls the patch bad (`certain_only`: a
    decided step, not one that sided with its point estimate at max_repeats). `sequential`: the rule
    `patchbench bisect` and `history --bisect` use (the confidence sequence, one value a side a look)."""
    from toolkit.analysis.bisect import BAD, bisect_stack

    def simulate(seed: int, cases: int) -> int:
        rng = np.random.default_rng(seed)
        alarms = 0
        for _ in range(cases):
            def measure(k: int, r: int) -> list[float]:
                return list(100.0 * (1 - loss * k) * (1 + CV * rng.standard_normal(r)))
            kw = {"sequential": True, "repeat_step": 1} if sequential else {}
            step = bisect_stack(1, measure, threshold_pct=BISECT_THRESHOLD, **kw).steps[0]
            alarms += step.outcome == BAD and (step.certain or not certain_only)
        return alarms
    return simulate


def bisect_rows() -> list[Row]:
    half = BISECT_THRESHOLD / 200
    return [Row(f"bisect step: no change, CV {CV:.0%}, threshold {BISECT_THRESHOLD:g}%", stats.DEFAULT_ALPHA / 2,
                bisect_case(0.0), bisect_case(0.10), "-10% (twice the threshold)", 0.8),
            Row(f"bisect step: decided bad at a {half:.1%} loss (half threshold)", stats.DEFAULT_ALPHA / 2,
                bisect_case(half, certain_only=True)),
            # the CLI's default and history --bisect: the confidence sequence
            Row(f"bisect step, sequential: no change, CV {CV:.0%}", stats.DEFAULT_ALPHA / 2,
                bisect_case(0.0, sequential=True), bisect_case(0.10, sequential=True), "-10% (twice the threshold)", 0.8),
            Row(f"bisect step, sequential: decided bad at a {BISECT_THRESHOLD / 100:.0%} loss (the threshold)",
                stats.DEFAULT_ALPHA / 2, bisect_case(BISECT_THRESHOLD / 100, certain_only=True, sequential=True))]


# --- Pareto "dominated" ----------------------------------------------------------------------------

PARETO_VARIANTS = 3
PARETO_LAUNCHES = 3


def pareto_case(points: int, slower: float) -> Simulate:
    """A sweep of PARETO_VARIANTS variants on 1 GPU at `points` concurrencies (1, 4, 16: throughput
    100 * c^0.7, sublinear as serving is), PARETO_LAUNCHES launches a point with CV 3%; the first variant
    `slower` below the others at every point. Alarm: the first variant called dominated."""
    from toolkit.analysis import pareto

    conc = (1, 4, 16)[:points]

    def simulate(seed: int, cases: int) -> int:
        rng = np.random.default_rng(seed)
        alarms = 0
        for _ in range(cases):
            pts = [pareto.point(f"v{i}", c, list(100.0 * c ** 0.7 * (1 - (slower if i == 0 else 0.0))
                                                 * (1 + CV * rng.standard_normal(PARETO_LAUNCHES))), 1)
                   for i in range(PARETO_VARIANTS) for c in conc]
            alarms += "v0" in pareto.dominated_variants(pts)
        return alarms
    return simulate


def pareto_rows() -> list[Row]:
    from toolkit.analysis import pareto

    return [Row(f"pareto dominated: {PARETO_VARIANTS} equal variants, {n} concurrenc{'y' if n == 1 else 'ies'}, "
                f"{PARETO_LAUNCHES} launches, CV {CV:.0%}", pareto.ALPHA / 2, pareto_case(n, 0.0),
                pareto_case(n, 0.10), "one variant -10% at every point") for n in (1, 3)]


# --- kernel shape compare --------------------------------------------------------------------------

TRIALS = 10
TRIAL_CV = 0.02


def _kernel_record(rng: np.random.Generator, ms: float) -> dict:
    times = [list(ms * (1 + TRIAL_CV * rng.standard_normal(5))) for _ in range(TRIALS)]
    return {"op": "calibration", "results": [{"shape": {"m": 1}, "status": "ok", "times_ms": times,
                                              "correctness": {"verdict": "ok"}}]}


def kernel_case(speedup: float) -> Simulate:
    from toolkit.kernels.table import compare

    def simulate(seed: int, cases: int) -> int:
        rng = np.random.default_rng(seed)
        return sum(compare(_kernel_record(rng, 1.0), _kernel_record(rng, 1.0 / (1 + speedup)))[0].verdict
                   in (stats.FASTER, stats.SLOWER) for _ in range(cases))
    return simulate


def kernel_rows() -> list[Row]:
    return [Row(f"kernel shape: {TRIALS} vs {TRIALS} trials, CV {TRIAL_CV:.0%}", stats.DEFAULT_ALPHA,
                kernel_case(0.0), kernel_case(0.05), "+5% speed", 0.8)]


# --- box flags (SM clock outlier) ------------------------------------------------------------------

RUNS_COMPARED = 8
CLOCK_MHZ = 1965.0


@dataclass(frozen=True)
class _Run:
    run_id: str
    extra: dict
    gpu_key: str = "gpu"


def box_case(sigma: float, slow: float) -> Simulate:
    """RUNS_COMPARED runs of one GPU kind, median SM clocks with relative noise `sigma`; the first is
    `slow` lower (0: a steady box). Alarm: the first run flagged (toolkit.results.box_flags)."""
    from toolkit.results.box_flags import CLOCK, clock_flags

    def simulate(seed: int, cases: int) -> int:
        rng = np.random.default_rng(seed)
        alarms = 0
        for _ in range(cases):
            clocks = CLOCK_MHZ * (1 + sigma * rng.standard_normal(RUNS_COMPARED))
            clocks[0] *= 1 - slow
            runs = [_Run(str(i), {"gpu_state": {"available": True, "metrics": {CLOCK: float(c)}}})
                    for i, c in enumerate(clocks)]
            alarms += "0" in clock_flags(runs)
        return alarms
    return simulate


def box_rows() -> list[Row]:
    from toolkit.results.box_flags import CLOCK_TOLERANCE, STEADY_CLOCK_NOISE, STEADY_FALSE_FLAGS

    return [Row(f"box flag: clock noise {STEADY_CLOCK_NOISE:.1%}, tolerance {CLOCK_TOLERANCE:.0%}, "
                f"{RUNS_COMPARED} runs", STEADY_FALSE_FLAGS, box_case(STEADY_CLOCK_NOISE, 0.0),
                box_case(STEADY_CLOCK_NOISE, 0.05), "one run's clock 5% low", 0.99)]


# --- profile kernel-family diff --------------------------------------------------------------------

STEPS = 20
PROFILE_CV = 0.03  # run-to-run, of a family's per-profile minimum
STEP_JITTER = 0.05  # within a profile, mean of the exponential extra time per step


def _profile(rng: np.random.Generator, ms: float, cv: float) -> dict:
    run = ms * (1 + cv * rng.standard_normal())
    steps = list(run * (1 + rng.exponential(STEP_JITTER, STEPS)))
    return {"ranks": [{"rank": 0, "step_ms": 10 * ms, "family_ms": {"attention": sum(steps) / STEPS},
                       "per_step_ms": {"attention": steps}}]}


def profile_case(profiles: int, change: float, cv: float = PROFILE_CV) -> Simulate:
    from toolkit.profile.diff import kernel_diff

    def simulate(seed: int, cases: int) -> int:
        rng = np.random.default_rng(seed)
        return sum(kernel_diff([_profile(rng, 1.0, cv) for _ in range(profiles)],
                               [_profile(rng, 1.0 - change, cv) for _ in range(profiles)])[0].verdict
                   in ("faster", "slower") for _ in range(cases))
    return simulate


def profile_rows() -> list[Row]:
    from toolkit.profile.diff import ALPHA

    return [Row("profile family: one profile each (no verdict)", 0.0, profile_case(1, 0.0)),
            *(Row(f"profile family: {n} vs {n} profiles, CV {PROFILE_CV:.0%}", ALPHA, profile_case(n, 0.0),
                  profile_case(n, 0.30), "-30% family time", 0.8) for n in (2, 3)),
            Row("profile family: 2 vs 2 profiles, CV 10% (a busy CPU)", ALPHA, profile_case(2, 0.0, 0.10),
                profile_case(2, 0.30, 0.10), "-30% family time")]


ROWS: list[Row] = [*answers_rows(), *answers_sequential_rows(), *gate_rows(), *speed_rows(), *equal_rows(), *change_rows(), *bisect_rows(), *pareto_rows(), *kernel_rows(),
                   *box_rows(), *profile_rows()]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def table(results: list[Result]) -> str:
    head = f"{'verdict':<62} {'alpha':>5}  {'false alarms [95% CI]':<24} {'power [95% CI]':<24} at effect"
    lines = [head, "-" * len(head)]
    for r in results:
        fa = f"{_pct(r.false_alarm_rate)} [{_pct(r.false_alarm_ci[0])}, {_pct(r.false_alarm_ci[1])}]"
        pw = (f"{_pct(r.power)} [{_pct(r.power_ci[0])}, {_pct(r.power_ci[1])}]" if r.power is not None else "-")
        target = f" (target {r.power_target:.0%})" if r.power_target else ""
        mark = "" if r.holds else "  <- does not hold"
        used = (f"; launches {r.launches[0]:.2f} (no change), {r.launches[1]:.2f} (changed) vs {r.fixed_launches} "
                "fixed" if r.launches else "")
        lines.append(f"{r.name:<62} {r.stated_alpha:>5g}  {fa:<24} {pw:<24} {r.effect}{target}{used}{mark}")
    lines.append(f"{results[0].cases if results else 0} simulated cases per rate, seeded; exact Clopper-Pearson "
                 "intervals; a false-alarm rate holds when its interval reaches the stated alpha or below")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=2000, help="simulated cases per rate (default 2000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    ap.add_argument("--only", metavar="TEXT", help="only the rows whose name contains TEXT")
    args = ap.parse_args(argv)
    if args.cases < 1:
        print(f"error: --cases must be at least 1, not {args.cases}", file=sys.stderr)
        return 2
    results = [measure(row, args.seed + 10 * i, args.cases) for i, row in enumerate(ROWS)
               if not args.only or args.only in row.name]
    if not results:
        print(f"error: no row's name contains {args.only!r}", file=sys.stderr)
        return 2
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps([r.to_dict() for r in results], indent=2) + "\n")
    return 0 if all(r.holds for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
