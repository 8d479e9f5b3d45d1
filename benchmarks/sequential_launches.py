"""How many launches does a sequential verdict take, against a fixed design of the same power?

Simulated comparisons (seeded): B/A effects drawn uniformly from 0 to 30% (either sign), per-launch
noise uniformly 1-5% (log-normal), and in half of them a heavy-tailed launch outlier model (each
launch has a 5% chance to run 10-20% slow). Each comparison is launched A B B A ... and judged by
`toolkit.analysis.sequential` after every pair (min 2, max 16 launches each: the default design).
Plus A/A comparisons
(zero effect, the same noise models) for the false "faster"/"slower" rate with its 95% CI.

The fixed design is the same three-way rule with a fixed-sample pooled Student t interval at n
launches each, looked at once. It is compared at two error levels: the stated alpha (0.05), and
the smallest alpha on a grid of 269 (0.10 .. 0.0005, 2% apart) whose A/A false faster/slower rate is
no lower than the sequential one's, so that the sequential design is at an equal or better error
rate (matched error; until 2026-12-06 the largest alpha up to 0.05 whose rate was no higher, which
could not match a sequential design whose rate lies above the fixed one's at 0.05; the old grid of
5 alphas jumped from 0.05 to
0.02 and so compared with a fixed design far stricter than the sequential one). At each level, "of
the same power" is the smallest n whose rate of correct settled verdicts reaches the sequential
one's: over all comparisons, and in every |effect| range from min_effect (2-5, 5-10, 10-20, 20-30%:
a fixed n that is as strong as the sequential design at every effect size, the comparison of Wald's
average sample number; the 0-2% range, where few verdicts settle either way, is printed, not
matched). A verdict is *correct* when its claim holds for the true ratio (faster: B better;
slower: B worse; equal: within min_effect), *false* when it does not; not settled is neither.

    python benchmarks/sequential_launches.py [--comparisons 2000] [--seed 20261201] [--method repeated|mixture]
        [--max-repeats 16] [--json]
    python benchmarks/sequential_launches.py --pipeline N     # through `run` on the miniature
    python benchmarks/sequential_launches.py --history 10 [--drift 1.5]   # with a stored-spread prior
    python benchmarks/sequential_launches.py --stored 8       # a second campaign against a stored reference

`--history H`: each side also has H stored launches from before (the same noise model; `--drift D`:
the box is D times noisier now than then), whose spread is the verdict's prior
(toolkit.analysis.noise_prior.from_history, 2H - 2 df); the fixed designs are today's (current
launches only), and one more line gives the fixed design pooling the same prior. `--stored H`: the
reference's first H launches are stored (reused, no launch) and the variant is new, judged with the
current launches only and with the stored launches a look does not use pooled (`seq.verdict(stored=
(H, 0))`); launches counted are the new ones. That is what `run`, `sweep` and `attribute` did until
2026-12-06. They now leave a side's runs from another campaign out of the looks and launch that side
again, interleaved (a box that drifted between campaigns made a stored reference read as an effect:
benchmarks/campaign_drift.py), so this mode measures a reuse the tool no longer makes, on an
unchanged box only.

Goal: the sequential mean launches <= 0.5x the fixed design's at equal or better error rates, and
the false faster/slower rate at zero effect within alpha. Exit status 0 when both hold.

Measured 2026-12-06 (2000 + 2000 comparisons, seed 20261201), the default design (cap 16, futility
with a one-standard-error allowance, toolkit.analysis.sequential.FUTILITY_SE):
  8.78 launches a comparison, 10.15 per settled verdict, 86.5% correct, 0.05% false; A/A false
  faster/slower 4.05% [3.23-5.01%] (gaussian 4.33%, outliers 3.77%), A/A "equal" 308 of 2000, 14.47
  launches an A/A pair. Fixed t of the same power: at alpha 0.05, 11 each (A/A 3.50%): **0.40x**
  (continuous 10.82 each, 0.41x; as strong in every range 13 each, 0.34x); at the matched error
  (alpha 0.0598, A/A 4.10%), 10 each: **0.44x** (continuous 9.59 each, 0.46x; every range 0.34x).
  The goal holds (exit 0). Seeds 1 and 7: 0.43x and 0.42x at the matched error.
  Per range at the matched error: 2-5% 0.58x, 5-10% 0.55x, 10-20% 0.44x, 20-30% 0.40x (0-2%:
  power 15%, 15.4 launches, fixed 8 each).
  --max-repeats 8 (the old cap, new futility): 7.01 launches, 81.8% correct, A/A 4.30%: 0.58x
    (0.61x continuous) at the matched error. --max-repeats 32: 11.84 launches, 90.5%, A/A 3.00%:
    0.33x at alpha 0.05, 0.28x at the matched error (alpha 0.0427).
  --history 10: 7.86 launches, 83.2%, A/A 1.35% [0.89-1.96%]; 0.39x at the matched error (alpha
    0.0186), 0.56x at alpha 0.05 (the prior buys error rate). --history 20: 8.00 launches, A/A 0.70%,
    0.36x matched. A box 1.5x noisier than its history (--history 10 --drift 1.5): A/A 4.65%
    [3.77-5.67%]; 2x (--history 20 --drift 2): 7.20%, beyond the promise.
Until 2026-12-06 (cap 8, the futility rule taking the estimate of 3 launches as the truth):
Measured (2000 + 2000 comparisons, seed 20261201, 2026-12-02; equal by TOST since 2026-12-05):
  repeated intervals (the default, 2..8 each): 6.12 launches a comparison, 8.01 per settled verdict,
    76.3% correct, 0.10% false (2 "equal" verdicts at effects just past the 2% zone: the equivalence
    tests spend their alpha at that edge, 3.6-3.8% there in benchmarks/verdict_calibration.py; the
    two-sided sequence gave 0 and 1.8%); A/A false faster/slower 3.60% [2.83-4.51%] (gaussian 4.13%,
    outliers 3.08%), A/A "equal" 81 of 2000 (43 with the two-sided sequence). Fixed t of the same power (overall, and in every range): 5 each, at alpha 0.05 (A/A
    3.65%, false 0.05%) and at the matched alpha 0.0481 (A/A 3.60%): 0.61x (0.63x per settled
    verdict). Per range: 2-5% 0.71x, 5-10% 0.71x, 10-20% 0.61x, 20-30% 0.65x.
    On a continuous n (2026-12-05; the fixed design's power interpolated between n - 1 and n each):
    the integer comparison sits on a step, fixed 4 each reaching 76.0% against the sequential's
    76.3%, so 5 each (79.3%) is its comparator; continuous, the same power is 4.10 each at alpha 0.05
    (0.75x) and 4.17 at the matched alpha (0.73x); as strong in every range, 4.39 / 4.42 each (0.70x /
    0.69x). These are the fair figures: about 0.7x, not 0.61x.
  the mixture sequence (the previous default): 6.42 launches, 9.30 per settled, 69.0% correct; A/A
    1.35% [0.89-1.96%]; fixed of the same power at alpha 0.05: 3 each, 1.07x (in every range: 4
    each, 0.80x); matched alpha 0.0151: 5 each, 0.64x. Its saving came from comparing with a fixed
    design at a quarter of its error rate; at the stated alpha it saved nothing.
  repeated, --max-repeats 16: 7.06 launches, 80.9% correct, A/A 3.10% [2.38-3.96%]; fixed at 0.05:
    6 each, 0.59x; matched alpha 0.0379: 7 each (A/A 2.25%), 0.50x (0.52x per settled verdict).
    Rerun 2026-12-05 (equal by TOST): 7.08 launches, 81.0%; at 0.05 6 each, 0.59x (continuous 5.61
    each, 0.63x); matched alpha 0.0402, 6 each, 0.59x (continuous 0.59x; every range 7 each, 0.51x,
    continuous 0.55x).
  With a stored-spread prior (2000 + 2000, seed 20261201, 2026-12-04; the level calibrated for a
    box up to 1.5x noisier than its stored launches, noise_prior.DRIFT): --history 10 (18 df): 5.42
    launches a comparison, 73.0% correct, 0 false; A/A 0.85% [0.50-1.36%]. Fixed t at the matched
    alpha 0.0117 (A/A 0.80%): 6 each for the same overall power, 0.45x; 8 each in every range (A/A
    0.90%), 0.34x. At the stated alpha (A/A 4.35%, worse than the sequential's): 4 each, 0.68x.
    --history 20 (36 df): 5.46 launches, A/A 0.35% [0.14-0.72%]; matched fixed (alpha 0.0037, A/A
    0.35%) 7 each: 0.39x (the goal, exit 0). The fixed design pooling the same prior needs 2 each
    for that power: 1.36x, but its A/A is 7.75% (one look at a pooled t is not robust to the outlier
    launches). A box noisier now than its history: A/A 3.95% [3.14-4.90%] at 1.5x (5.28 launches,
    0.53x at the matched alpha 0.049), 6.90% [5.83-8.10%] at 2x, beyond what is promised (the
    borrowing test cannot tell 2x at 2 launches each). The level calibrated for an unchanged box
    (until 2026-12-04) gave 5.09 launches and A/A 4.15% at 1x but 11.6% at 1.5x and 15.9% at 2x.
    No history: exactly the numbers above (0.61x, 3.60%).
  Second campaign (--stored 8; --stored 4; 2026-12-04, the level with the 1.5x margin): 3.06 -> 2.73
    new launches a comparison (3.17 -> 3.07), 76.3% -> 74.8% correct (false 0 -> 0.05%), A/A 3.60%
    -> 1.50% [1.01-2.13%] (2.55%); the fixed design of that (lower) power that also reuses the stored
    reference: 4 each, 4 new launches: 0.68x (0.77x); the current-launches-only rule 0.61x (0.53x).
  On a continuous n (2026-12-05): --history 10 0.53x at the matched alpha (0.80x at 0.05, where the
    sequential's A/A 0.85% is far below the fixed design's 4.35%), --history 20 0.42x (0.90x at 0.05):
    the stored spread buys mostly error rate (the level is calibrated for a box 1.5x noisier), and
    launches only against a fixed design held to the same low error rate.
  The 0.5x goal is met with 20 stored launches a side (0.39x; 0.42x on a continuous n), only against
  the fixed design of the same (low) error rate, and not at the default design without history
  (0.61x, about 0.7x on a continuous n). Why: a verdict needs 2 launches each,
  and at 2 each the spread has 2 degrees of freedom (the interval's c is 8.9 against 4.3 fixed at
  one look), so even 20-30% effects at 3-5% noise take 2.6 launches each on average while the fixed
  design needs 4-5 each for the same power there: the best range is 0.56-0.65x, and the ratio
  cannot fall below the best range's.
  A cap of 32 (2026-12-05, `--max-repeats 32`: 8.05 launches, 83.0% correct, A/A 2.00% [1.43-2.71%],
  341 of 2000 stopped unsettled, most by futility): against the fixed design of the same (2.00%) error
  rate (alpha 0.0287) 9 each, **0.45x** (0.47x on a continuous n; as strong in every range, 0.40x /
  0.41x); against the fixed design at the stated alpha (A/A 3.55%, worse) 0.57x (0.59x continuous).
  The saving grows with the power asked of it; the then default cap of 8 kept the worst case at 16
  launches of a ~400 GB model.
  Other boundary shapes (spending alpha earlier or later) and caps of 12-24: benchmarks/
  sequential_boundaries.py; none reaches 0.5x at the cap of 8, caps of 16-24 touch it (0.49-0.50x)
  against the matched-error fixed design only.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from toolkit.analysis import sequential as seq  # noqa: E402
from toolkit.analysis import noise_prior  # noqa: E402

MAX_FIXED = 24
STATED_ALPHA = seq.DEFAULT_ALPHA
# the matched-error grid, largest first, 2% apart: it reaches above the stated alpha, for a sequential design
# whose measured A/A rate lies above the fixed design's at the stated alpha (a fixed design at that
# higher error rate needs fewer launches, and is the fair comparator)
FIXED_ALPHAS = tuple(float(x) for x in np.geomspace(0.10, 0.0005, 269))
RANGES = (0.0, 0.02, 0.05, 0.10, 0.20, 0.31)  # |effect| ranges the power is matched in


def draw(rng: np.random.Generator, n: int, *, zero: bool, max_n: int, history: int = 0, drift: float = 1.0) -> dict:
    """n comparisons: true log-ratios, and max_n per-launch values per side (throughputs); with
    `history`, that many stored launches per side from before (same noise model, its spread divided
    by `drift`: a box that has become `drift` times noisier), drawn after the current ones."""
    effect = np.zeros(n) if zero else rng.uniform(0.0, 0.30, n) * rng.choice([-1.0, 1.0], n)
    theta = np.log1p(np.abs(effect)) * np.sign(effect)
    sigma = rng.uniform(0.01, 0.05, n)
    heavy = rng.random(n) < 0.5

    def side(mu):
        x = mu[:, None] + sigma[:, None] * rng.standard_normal((n, max_n))
        slow = heavy[:, None] & (rng.random((n, max_n)) < 0.05)
        return np.exp(x - slow * np.log1p(rng.uniform(0.10, 0.20, (n, max_n)))) * 100.0

    out = {"theta": theta, "sigma": sigma, "heavy": heavy, "a": side(np.zeros(n)), "b": side(theta)}
    if history:
        sigma_now = sigma.copy()
        sigma[:] = sigma_now / drift
        max_n = history
        out["history_a"], out["history_b"] = side(np.zeros(n)), side(theta)
        sigma[:] = sigma_now
    return out


def priors(d: dict) -> list:
    """The stored-spread prior of each comparison (toolkit.analysis.noise_prior), None without history."""
    from toolkit.analysis import noise_prior

    if "history_a" not in d:
        return [None] * d["theta"].size
    return [noise_prior.from_history({"A": list(ha), "B": list(hb)}) for ha, hb in zip(d["history_a"], d["history_b"])]


def truth(verdict: str, theta: float, m: float) -> bool | None:
    """Whether a verdict's claim holds for the true log-ratio (None: not settled)."""
    b = math.log1p(m)
    theta = float(theta)
    return {seq.FASTER: theta > 0, seq.SLOWER: theta < 0, seq.EQUAL: abs(theta) < b}.get(verdict)


def fixed_verdicts(a: np.ndarray, b: np.ndarray, n: int, m: float, alpha: float, prior=None) -> np.ndarray:
    """The same three-way rule with a fixed-sample pooled t interval at n launches each, looked at
    once (equal by two one-sided tests at alpha, as the sequential rule), for every comparison
    (rows): +1 faster, -1 slower, 2 equal, 0 not settled. `prior`:
    (sum of squares, dof) arrays of each comparison's stored spread, pooled (df add up)."""
    from scipy import stats

    la, lb = np.log(a[:, :n]), np.log(b[:, :n])
    est = lb.mean(1) - la.mean(1)
    ss = (la.var(axis=1, ddof=1) + lb.var(axis=1, ddof=1)) * (n - 1)
    dof = np.full(est.size, 2.0 * n - 2)
    if prior is not None:
        ss, dof = ss + prior[0], dof + prior[1]
    sp = np.sqrt(ss / dof)
    half = stats.t.isf(alpha / 2, dof) * sp * math.sqrt(2.0 / n)
    half_equal = stats.t.isf(alpha, dof) * sp * math.sqrt(2.0 / n)  # TOST: two one-sided tests at alpha
    lo, hi, bound = est - half, est + half, math.log1p(m)
    out = np.zeros(est.size, dtype=int)
    out[(lo > 0) & (est >= bound)] = 1
    out[(hi < 0) & (est <= -bound)] = -1
    out[(-bound < est - half_equal) & (est + half_equal < bound)] = 2
    return out


def fixed_scores(v: np.ndarray, theta: np.ndarray, m: float) -> tuple[np.ndarray, np.ndarray]:
    """(correct, false) per comparison of fixed_verdicts' codes."""
    b = math.log1p(m)
    holds = np.where(v == 1, theta > 0, np.where(v == -1, theta < 0, np.abs(theta) < b))
    return (v != 0) & holds, (v != 0) & ~holds


def score(verdicts: list[str], launches: list[int], theta: np.ndarray, m: float) -> dict:
    correct = [truth(v, t, m) for v, t in zip(verdicts, theta)]
    settled = sum(c is not None for c in correct)
    n = len(verdicts)
    return {"comparisons": n, "settled": settled, "correct_rate": sum(c is True for c in correct) / n,
            "false_rate": sum(c is False for c in correct) / n,
            "mean_launches": float(np.mean(launches)),
            "launches_per_settled": float(np.sum(launches) / settled) if settled else math.inf}


def binomial_ci(k: int, n: int) -> list[float]:
    from scipy import stats

    ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return [float(ci.low), float(ci.high)]


def simulate(design: seq.Design, data: dict) -> dict:
    """Every comparison judged by the sequential verdict: verdict names and launches (both sides)."""
    out = {}
    for name, d in data.items():
        vs, ls = [], []
        for i, prior in enumerate(priors(d)):
            v = seq.verdict(list(d["a"][i, :design.max_repeats]), list(d["b"][i, :design.max_repeats]),
                            higher_is_better=True, design=design, prior=prior)
            vs.append(v.verdict)
            ls.append(2 * v.n)
        out[name] = (vs, np.asarray(ls))
    return out


def second_campaign(design: seq.Design, data: dict, stored: int, m: float) -> dict:
    """A second campaign against a stored reference: A's first `stored` values were launched before
    (reused, free), B is new. Each comparison judged without and with the stored spread pooled
    (`seq.verdict(stored=(stored, 0))`); launches are the new ones (B's, and A's beyond `stored`)."""
    out = {}
    for label, counts in (("current_only", (0, 0)), ("stored_spread", (stored, 0))):
        row = {}
        for name, d in data.items():
            vs, new = [], []
            for i in range(d["theta"].size):
                v = seq.verdict(list(d["a"][i, :design.max_repeats]), list(d["b"][i, :design.max_repeats]),
                                higher_is_better=True, design=design, stored=counts)
                vs.append(v.verdict)
                new.append(v.n + max(0, v.n - stored))
            res = score(vs, new, d["theta"], m)
            if name == "null":
                k = sum(v in (seq.FASTER, seq.SLOWER) for v in vs)
                res["false_faster_slower"] = {"count": k, "of": len(vs), "rate": k / len(vs), "ci95": binomial_ci(k, len(vs))}
            else:
                correct = np.array([truth(v, t, m) is True for v, t in zip(vs, d["theta"])])
                n = fixed_design(data, m, STATED_ALPHA, lambda c: c.mean() >= correct.mean())
                res["fixed_same_power"] = None if n is None else {"n": n, "new_launches": n + max(0, n - stored),
                                                                  "ratio": res["mean_launches"] / (n + max(0, n - stored))}
            row[name] = res
        out[label] = row
    return out


def fixed_design(data: dict, m: float, alpha: float, power_of, cap: int = MAX_FIXED) -> int | None:
    """The smallest n each whose fixed design reaches `power_of(correct)` (True when it does)."""
    eff = data["effects"]
    for n in range(2, cap + 1):
        correct, _ = fixed_scores(fixed_verdicts(eff["a"], eff["b"], n, m, alpha), eff["theta"], m)
        if power_of(correct):
            return n
    return None


def fixed_power(data: dict, m: float, alpha: float, n: int, mask=None) -> float:
    eff = data["effects"]
    correct = fixed_scores(fixed_verdicts(eff["a"], eff["b"], n, m, alpha), eff["theta"], m)[0]
    return float(correct[mask].mean() if mask is not None else correct.mean())


def interpolated_n(data: dict, m: float, alpha: float, n: int, target: float, mask=None) -> float:
    """The fixed design's launches each at `target` power on a continuous scale: linear in power between
    n - 1 and n each (the integer n is the smallest that reaches it). A fixed design's power steps with n,
    so the integer comparison flatters whichever side lands just above a step: the sequential design
    at 76.3% against fixed 4 each at 76.0% is compared with 5 each (79.3%)."""
    if n <= 2:
        return float(n)
    lo, hi = fixed_power(data, m, alpha, n - 1, mask), fixed_power(data, m, alpha, n, mask)
    if hi <= lo:
        return float(n)
    return (n - 1) + min(1.0, max(0.0, (target - lo) / (hi - lo)))


def compare_fixed(data: dict, vs: list[str], ls: np.ndarray, m: float, aa_rate: float) -> dict:
    """The fixed designs the sequential one is compared with: at the stated alpha and at the smallest
    alpha whose A/A false faster/slower rate is no lower than the sequential one's (matched error);
    each of the same overall power, and of the same power in every |effect| range from min_effect."""
    eff, null = data["effects"], data["null"]
    theta = eff["theta"]
    correct = np.array([truth(v, t, m) is True for v, t in zip(vs, theta)])
    seq_settled = sum(v in (seq.FASTER, seq.SLOWER, seq.EQUAL) for v in vs)
    mag = np.expm1(np.abs(theta))
    ranges = [(lo, hi, (mag >= lo) & (mag < hi)) for lo, hi in zip(RANGES[:-1], RANGES[1:])]
    def aa_of(fa: float) -> float:
        n = fixed_design(data, m, fa, lambda c: c.mean() >= correct.mean()) or MAX_FIXED
        return float(np.isin(fixed_verdicts(null["a"], null["b"], n, m, fa), [1, -1]).mean())

    # the smallest alpha whose A/A false rate is no lower than the sequential one's: the sequential design is
    # then at an equal or better error rate (the goal's terms), and no fixed design at a lower rate is credited
    matched = next((fa for fa in reversed(FIXED_ALPHAS) if aa_of(fa) >= aa_rate), FIXED_ALPHAS[0])
    out = {}
    for label, fa in (("stated_alpha", STATED_ALPHA), ("matched_error", matched)):
        row = {"alpha": fa}
        n_all = fixed_design(data, m, fa, lambda c: c.mean() >= correct.mean())
        per = []
        for lo, hi, mask in ranges:
            n_r = fixed_design(data, m, fa, lambda c, mask=mask: c[mask].mean() >= correct[mask].mean())
            n_r_star = interpolated_n(data, m, fa, n_r, float(correct[mask].mean()), mask) if n_r else None
            per.append({"range": [lo, hi], "comparisons": int(mask.sum()), "power": float(correct[mask].mean()),
                        "launches": float(ls[mask].mean()), "fixed_n": n_r, "fixed_n_interpolated": n_r_star,
                        "ratio": float(ls[mask].mean() / (2 * n_r)) if n_r else None})
        reach = [p["fixed_n"] for p in per if p["range"][0] >= m]
        n_every = None if None in reach else max(reach)
        for key, n in (("same_power", n_all), ("same_power_every_range", n_every)):
            if n is None:
                row[key] = None
                continue
            fv = fixed_verdicts(eff["a"], eff["b"], n, m, fa)
            c, f = fixed_scores(fv, theta, m)
            settled = int((fv != 0).sum())
            n_star = (interpolated_n(data, m, fa, n, float(correct.mean())) if key == "same_power" else
                      max(p["fixed_n_interpolated"] for p in per if p["range"][0] >= m))
            row[key] = {"n": n, "correct_rate": float(c.mean()), "false_rate": float(f.mean()),
                        "n_interpolated": n_star, "launch_ratio_interpolated": float(ls.mean() / (2 * n_star)),
                        "null_false_faster_slower": float(np.isin(fixed_verdicts(null["a"], null["b"], n, m, fa),
                                                                  [1, -1]).mean()),
                        "launches_per_settled": 2 * n * theta.size / settled if settled else math.inf,
                        "launch_ratio": float(ls.mean() / (2 * n)),
                        "launch_ratio_per_settled": (float(ls.sum()) / max(1, seq_settled))
                        / (2 * n * theta.size / settled) if settled else None}
        row["ranges"] = per
        out[label] = row
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--comparisons", type=int, default=2000, help="simulated comparisons with an effect")
    ap.add_argument("--null", type=int, default=2000, help="simulated A/A comparisons")
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--min-effect", type=float, default=seq.DEFAULT_MIN_EFFECT)
    ap.add_argument("--max-repeats", type=int, default=seq.DEFAULT_MAX_REPEATS)
    ap.add_argument("--method", choices=(seq.REPEATED, seq.MIXTURE), default=seq.DEFAULT_METHOD)
    ap.add_argument("--prior-scale", type=float, default=seq.DEFAULT_PRIOR_SCALE, help="the mixture's")
    ap.add_argument("--no-futility", action="store_true", help="launch unsettled pairs up to --max-repeats")
    ap.add_argument("--pipeline", type=int, default=0, metavar="N",
                    help="instead: N A/A and N A/B comparisons through `run` on the miniature")
    ap.add_argument("--history", type=int, default=0, metavar="H",
                    help="stored launches per side from before: their spread is the verdict's prior (noise_prior)")
    ap.add_argument("--drift", type=float, default=1.0,
                    help="with --history: the box is this many times noisier now than in its history")
    ap.add_argument("--stored", type=int, default=0, metavar="H",
                    help="instead: a second campaign, the reference's first H launches stored (free), the variant new; "
                         "without and with their spread pooled")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.pipeline:
        from benchmarks.sequential_pipeline import main as pipeline

        return pipeline(args.pipeline, json_out=args.json, seed=args.seed)
    t0 = time.monotonic()
    design = seq.Design(min_effect=args.min_effect, max_repeats=args.max_repeats, prior_scale=args.prior_scale,
                        futility=not args.no_futility, method=args.method,
                        pool_stored=bool(args.history or args.stored))  # the recipe's opt-in, as asked
    rng = np.random.default_rng(args.seed)
    m, alpha = design.min_effect, design.alpha
    width = max(MAX_FIXED, design.max_repeats)
    hist = {"history": args.history, "drift": args.drift}
    data = {"effects": draw(rng, args.comparisons, zero=False, max_n=width, **hist),
            "null": draw(rng, args.null, zero=True, max_n=width, **hist)}
    out: dict = {"design": design.__dict__, "legend": seq.legend(design), "seed": args.seed, **hist}
    if args.stored:
        out["second_campaign"] = sc = second_campaign(design, data, args.stored, m)
        out["seconds"] = round(time.monotonic() - t0, 1)
        if args.json:
            print(json.dumps(out, indent=1))
            return 0
        print(f"second campaign: the reference's first {args.stored} launches stored, the variant new "
              f"({args.comparisons} comparisons, effects 0-30%, noise 1-5%, half with outliers; {args.null} A/A)")
        for label, row in sc.items():
            e, z, f = row["effects"], row["null"]["false_faster_slower"], row["effects"]["fixed_same_power"]
            print(f"  {label}: {e['mean_launches']:.2f} new launches a comparison, {e['launches_per_settled']:.2f} per "
                  f"settled verdict, correct {100 * e['correct_rate']:.1f}%, false {100 * e['false_rate']:.2f}%; A/A false "
                  f"faster/slower {100 * z['rate']:.2f}% [{100 * z['ci95'][0]:.2f}-{100 * z['ci95'][1]:.2f}%]"
                  + (f"; fixed of the same power {f['n']} each = {f['new_launches']} new launches: {f['ratio']:.2f}x"
                     if f else ""))
        print(f"({out['seconds']} s)")
        return 0
    got = [p for p in priors(data["effects"]) if p is not None]
    if got:
        out["prior_dof_mean"] = float(np.mean([p.dof for p in got]))
        out["legend"] += (f"; with --history {args.history}: {noise_prior.prior_legend(got[0], seq.nominal_level(design.alpha, design.min_repeats, design.max_repeats, got[0].dof))} "
                          f"(first comparison's)")
    sims = simulate(design, data)
    for name, d in data.items():
        vs, ls = sims[name]
        res = {"sequential": score(vs, list(ls), d["theta"], m)}
        res["sequential"]["verdicts"] = {k: vs.count(k) for k in sorted(set(vs))}
        for label, mask in (("gaussian", ~d["heavy"]), ("outliers", d["heavy"])):
            idx = np.flatnonzero(mask)
            res[f"sequential_{label}"] = score([vs[i] for i in idx], list(ls[idx]), d["theta"][idx], m)
        out[name] = res
    null_vs = sims["null"][0]
    z = out["null"]
    for label, mask in (("", np.ones(args.null, bool)), ("_gaussian", ~data["null"]["heavy"]),
                        ("_outliers", data["null"]["heavy"])):
        k = sum(v in (seq.FASTER, seq.SLOWER) for v, keep in zip(null_vs, mask) if keep)
        z["false_faster_slower" + label] = {"count": k, "of": int(mask.sum()), "rate": k / int(mask.sum()),
                                            "ci95": binomial_ci(k, int(mask.sum())), "alpha": alpha}
    aa = z["false_faster_slower"]["rate"]
    eff = out["effects"]
    eff["fixed"] = compare_fixed(data, *sims["effects"], m, aa)
    if args.history:  # the fixed design given the same stored spread: is the saving the prior's or the looks'?
        ps = priors(data["effects"])
        arr = (np.array([p.var * p.dof if p else 0.0 for p in ps]), np.array([p.dof if p else 0 for p in ps]))
        vs, ls = sims["effects"]
        eff_theta = data["effects"]["theta"]
        correct = np.array([truth(v, t, m) is True for v, t in zip(vs, eff_theta)])
        for n in range(2, MAX_FIXED + 1):
            fv = fixed_verdicts(data["effects"]["a"], data["effects"]["b"], n, m, alpha, arr)
            c, f = fixed_scores(fv, eff_theta, m)
            if c.mean() >= correct.mean():
                pn = priors(data["null"])
                parr = (np.array([p.var * p.dof if p else 0.0 for p in pn]), np.array([p.dof if p else 0 for p in pn]))
                aa_f = float(np.isin(fixed_verdicts(data["null"]["a"], data["null"]["b"], n, m, alpha, parr), [1, -1]).mean())
                eff["fixed_with_prior"] = {"n": n, "correct_rate": float(c.mean()), "false_rate": float(f.mean()),
                                           "null_false_faster_slower": aa_f, "launch_ratio": float(ls.mean() / (2 * n))}
                break
    s = eff["sequential"]
    goal = {}
    for label, row in eff["fixed"].items():
        for key in ("same_power", "same_power_every_range"):
            f = row[key]
            goal[f"{label}.{key}"] = (f is not None and max(f["launch_ratio"], f["launch_ratio_interpolated"]) <= 0.5
                                      and s["false_rate"] <= f["false_rate"]
                                      and aa <= f["null_false_faster_slower"])
    ok_ratio = goal["matched_error.same_power"]
    ok_alpha = z["false_faster_slower"]["ci95"][0] <= alpha
    out["goal"] = {"launch_ratio_le_0.5_at_no_worse_error": goal, "false_rate_within_alpha": ok_alpha}
    out["seconds"] = round(time.monotonic() - t0, 1)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0 if ok_ratio and ok_alpha else 1
    print(out["legend"])
    print(f"{s['comparisons']} comparisons, effects 0-30%, noise 1-5% (half with 5% slow-launch outliers)"
          + (f"; {args.history} stored launches per side as the prior (mean {out.get('prior_dof_mean', 0):.1f} df), "
             f"box {args.drift:g}x noisier now" if args.history else ""))
    print(f"sequential: {s['mean_launches']:.2f} launches per comparison (both sides), "
          f"{s['launches_per_settled']:.2f} per settled verdict; correct {100 * s['correct_rate']:.1f}%, "
          f"false {100 * s['false_rate']:.2f}%; {s['verdicts']}")
    for label, row in eff["fixed"].items():
        for key, what in (("same_power", "same overall power"), ("same_power_every_range",
                                                                  "same power in every range >= min_effect")):
            f = row[key]
            if f is None:
                print(f"fixed t at alpha {row['alpha']:.4f} ({label}), {what}: none up to {MAX_FIXED} each")
                continue
            print(f"fixed t at alpha {row['alpha']:.4f} ({label}), {what}: {f['n']} each, correct "
                  f"{100 * f['correct_rate']:.1f}%, false {100 * f['false_rate']:.2f}%, A/A false faster/slower "
                  f"{100 * f['null_false_faster_slower']:.2f}%; sequential/fixed {f['launch_ratio']:.2f}x "
                  f"({f['launch_ratio_per_settled']:.2f}x per settled verdict)"
                  + (f"; on a continuous n ({f['n_interpolated']:.2f} each, the power interpolated between "
                     f"{f['n'] - 1} and {f['n']} each): {f['launch_ratio_interpolated']:.2f}x"
                     if key == "same_power" and f["n_interpolated"] != f["n"] else "")
                  + (f"; on a continuous n (the largest range's {f['n_interpolated']:.2f} each): "
                     f"{f['launch_ratio_interpolated']:.2f}x" if key != "same_power" else ""))
        print("   per |effect| range: " + "; ".join(
            f"{100 * r['range'][0]:g}-{100 * r['range'][1]:g}%: power {100 * r['power']:.0f}%, "
            f"{r['launches']:.1f} launches, fixed {r['fixed_n']} each"
            + (f" ({r['ratio']:.2f}x)" if r["ratio"] else "") for r in row["ranges"]))
    if "fixed_with_prior" in eff:
        f = eff["fixed_with_prior"]
        print(f"fixed t at alpha {alpha:g} pooling the same stored spread, same overall power: {f['n']} each, correct "
              f"{100 * f['correct_rate']:.1f}%, A/A false faster/slower {100 * f['null_false_faster_slower']:.2f}%; "
              f"sequential/fixed {f['launch_ratio']:.2f}x")
    for label in ("", "_gaussian", "_outliers"):
        q = z["false_faster_slower" + label]
        print(f"A/A{label.replace('_', ' ')} ({q['of']}): false faster/slower {q['count']} = {100 * q['rate']:.2f}% "
              f"[95% CI {100 * q['ci95'][0]:.2f}-{100 * q['ci95'][1]:.2f}%] (alpha {alpha:g})")
    print(f"A/A verdicts {z['sequential']['verdicts']}")
    print(f"goal: {out['goal']} ({out['seconds']} s)")
    return 0 if ok_ratio and ok_alpha else 1


if __name__ == "__main__":
    sys.exit(main())
