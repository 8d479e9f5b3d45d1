"""A box that changed between two campaigns: how often does a sequential verdict call it an effect?

Simulated A/A pairs (seeded; the true ratio is 1): the reference has `--stored` launches from an
earlier campaign; then the box's mean shifts by `--shift` (3-8%: a box loaded since, a clock or
thermal state changed) and a harmless variant is measured against it, per-launch noise uniformly
1-5% (log-normal), half the pairs with slow-launch outliers (5% of launches 10-20% slow), as in
benchmarks/sequential_launches.py. Two rules, both `toolkit.analysis.sequential_steps.settle_pairs`
(`run`'s and the steps' scheduling, the default design: 2..16 launches each since 2026-12-06, 2..8 before):

- before (until 2026-12-06): the reference's stored launches are its first values, the variant's
  launches made on the changed box are judged against them (the stored ones a look does not use pooled,
  `stored=(H, 0)`, where the design pools);
- after (toolkit.analysis.campaigns): stored launches of another campaign are not in the looks; both
  sides launch in this campaign, interleaved (their spread around their own mean may be the looks'
  prior where the design pools: a mean shift never enters it).

Printed per shift: the false faster/slower rate with its 95% CI (stated: <= alpha = 5%), and the mean
new launches a pair took. Exit status 0 when the after rule keeps alpha at every shift.

`--bisect N`: the same question for `bisect` (`toolkit.analysis.bisect.bisect_stack`, the CLI's rule:
sequential, 2..8 values a probe, one more a side a look, threshold 5%, reference the neighbour) over a
stack of N harmless patches whose base has `--stored` launches from before the shift (a `run` of the
base yesterday): before (until 2026-12-06) the meter handed the stored values out first; after
(toolkit.analysis.search_campaign) the base launches again in the bisect. Printed: how often a culprit
is named (every one false; stated: a decided step calls a harmless item bad <= 2.5%) and the launches a
bisect took. Exit status 0 when the after rule names a false culprit in <= 5% at every shift.
Since 2026-12-06 every step launches its reference around the probe (r p p r) and reads only those
launches, so "before" is guarded too: 2,000 bisects a shift of 7 patches, before / after, false culprits
(launches): 0% 2.45% (35.9) / 2.40% (40.1); 3% 4.20% (38.7) / 2.20% (40.0); 5% 6.70% (40.2) / 2.90% (40.2);
8% 15.40% (43.6) / 2.45% (40.1).

    python benchmarks/campaign_drift.py [--pairs 2000] [--stored 4] [--shift 0 0.03 0.05 0.08] [--pool] [--json]
    python benchmarks/campaign_drift.py --bisect 7 [--pairs 1000] [--json]

Measured at the default cap of 16 (2000 pairs a shift, seed 20261206, --stored 4, 2026-12-06, after the
futility change), false faster/slower [95% CI] and new launches a pair:
  shift   before                            after
  0%      4.15% [3.32-5.12] (10.7 launches)   4.45% [3.59-5.45] (14.6)
  3%     17.20% [15.57-18.93] (11.6)          3.80% [3.01-4.73] (14.6)
  5%     34.15% [32.07-36.28] (10.8)          4.05% [3.23-5.01] (14.8)
  8%     56.00% [53.79-58.19] (9.3)           4.15% [3.32-5.12] (14.8)
At the cap of 8 with the old futility rule (same seed and date):
  shift   before                    after
  0%      3.75% [2.96-4.68]         3.60% [2.83-4.51]
  3%     18.65% [16.96-20.43]       3.00% [2.30-3.84]
  5%     37.75% [35.62-39.92]       3.10% [2.38-3.96]
  8%     59.05% [56.86-61.22]       3.65% [2.87-4.57]
  new launches a pair: 3.3-4.0 before (the reference reused), 6.5 after (it launches again).
  --pool (pool_stored_spread), cap 8: before 3.35 / 16.60 / 37.30 / 60.40%, after 1.85 / 2.25 / 2.00 /
  1.50% (6.4 launches: the stored spread as a prior around its own mean).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from toolkit.analysis import noise_prior, sequential as seq  # noqa: E402
from toolkit.analysis.sequential_steps import settle_pairs  # noqa: E402


def launches(rng: np.random.Generator, n: int, noise: float, outliers: bool, level: float) -> list[float]:
    x = level * np.exp(noise * rng.standard_normal(n))
    if outliers:
        slow = rng.random(n) < 0.05
        x = np.where(slow, x / rng.uniform(1.10, 1.20, n), x)
    return [float(v) for v in x]


def one_pair(rng: np.random.Generator, design: seq.Design, stored: int, shift: float, after: bool) -> tuple[str, int]:
    """(verdict, new launches) of one A/A pair whose reference has `stored` launches from before the shift."""
    noise, outliers = rng.uniform(0.01, 0.05), bool(rng.random() < 0.5)
    old = launches(rng, stored, noise, outliers, 100.0)
    now = 100.0 / (1.0 + shift)  # the box is slower now, for both sides
    handed = {"A": 0, "B": 0}
    new = {"A": 0, "B": 0}
    source = {"A": [] if after else list(old), "B": []}

    def measure(label: str, k: int):
        while len(source[label]) < handed[label] + k:
            source[label] += launches(rng, 1, noise, outliers, now)
            new[label] += 1
        got = source[label][handed[label]:handed[label] + k]
        handed[label] += k
        return got

    if after:
        prior = noise_prior.from_history({"A": old}) if design.pool_stored else None
        values = {"A": measure("A", design.min_repeats), "B": measure("B", design.min_repeats)}
        while True:
            v = seq.verdict(values["A"], values["B"], higher_is_better=True, design=design, prior=prior)
            if not seq.more_needed(v):
                break
            for label in ("A", "B"):
                values[label] += measure(label, 1)
    else:
        _, verdicts = settle_pairs(measure, ["A", "B"], [("A", "B")], design, True, stored={"A": stored})
        v = verdicts[("A", "B")]
    return v.verdict, new["A"] + new["B"]


def one_bisect(rng: np.random.Generator, n: int, stored: int, shift: float, after: bool) -> tuple[bool, int]:
    """(a culprit was named, new launches) of one bisect of `n` harmless patches whose base has `stored`
    launches from before the shift."""
    from toolkit.analysis.bisect import bisect_stack

    noise, outliers = rng.uniform(0.01, 0.05), bool(rng.random() < 0.5)
    now = 100.0 / (1.0 + shift)
    source = {0: [] if after else launches(rng, stored, noise, outliers, 100.0)}
    handed: dict[int, int] = {}
    new = [0]

    def measure(p: int, k: int):
        have = source.setdefault(p, [])
        while len(have) < handed.get(p, 0) + k:
            have += launches(rng, 1, noise, outliers, now)
            new[0] += 1
        got = have[handed.get(p, 0):handed.get(p, 0) + k]
        handed[p] = handed.get(p, 0) + k
        return got

    result = bisect_stack(n, measure, threshold_pct=5.0, initial_repeats=2, max_repeats=8, repeat_step=1,
                          sequential=True)
    return result.culprit is not None, new[0]


def bisect_main(args) -> int:
    out = per_shift(args, "false_culprit_pct", [args.bisect],
                    lambda rng, shift, after: one_bisect(rng, args.bisect, args.stored, shift, after),
                    lambda named: bool(named))
    ok = all(r["after"]["false_culprit_pct"] <= 5.0 for r in out)
    say(args, out, "false_culprit_pct", {"bisects": args.pairs, "patches": args.bisect, "stored": args.stored, "ok": ok},
        f"bisects of {args.bisect} harmless patches, the base's {args.stored} launches from before the shift, "
        f"{args.pairs} a shift; a culprit named (every one false) and new launches a bisect:")
    return 0 if ok else 1


def per_shift(args, key: str, seed_extra: list[int], trial, false_of) -> list[dict]:
    """Each shift's row: `args.pairs` seeded trials (outcome, new launches) under the before and the after
    rule, the false rate under `key` with its CI, and the mean new launches."""
    out = []
    for shift in args.shift:
        row = {"shift": shift}
        for rule in ("before", "after"):
            rng = np.random.default_rng([args.seed, int(round(shift * 1e4)), *seed_extra])
            got = [trial(rng, shift, rule == "after") for _ in range(args.pairs)]
            false = sum(bool(false_of(outcome)) for outcome, _ in got)
            row[rule] = {key: round(100 * false / args.pairs, 2), "ci": ci(false, args.pairs),
                         "new_launches": round(float(np.mean([n for _, n in got])), 2)}
        out.append(row)
    return out


def say(args, out: list[dict], key: str, doc: dict, head: str) -> None:
    """The rows as JSON (`doc` with them) or as a line a shift under `head`."""
    if args.json:
        print(json.dumps({**doc, "rows": out}))
        return
    print(head)
    for r in out:
        b, a = r["before"], r["after"]
        print(f"  shift {100 * r['shift']:.0f}%: before {b[key]:.2f}% {b['ci']} ({b['new_launches']:.2f} launches), "
              f"after {a[key]:.2f}% {a['ci']} ({a['new_launches']:.2f} launches)")


def ci(k: int, n: int) -> list[float]:
    from scipy.stats import beta

    lo = beta.ppf(0.025, k, n - k + 1) if k else 0.0
    hi = beta.ppf(0.975, k + 1, n - k) if k < n else 1.0
    return [round(100 * float(lo), 2), round(100 * float(hi), 2)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=20261206)
    ap.add_argument("--stored", type=int, default=4, help="the reference's launches from the earlier campaign")
    ap.add_argument("--shift", type=float, nargs="+", default=[0.0, 0.03, 0.05, 0.08])
    ap.add_argument("--pool", action="store_true", help="the design pools stored spread (pool_stored_spread)")
    ap.add_argument("--bisect", type=int, default=0, metavar="N",
                    help="bisects of a stack of N harmless patches instead of pairs (--pairs of them a shift)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.pairs < 1 or args.stored < 0 or any(s < 0 for s in args.shift) or args.bisect < 0:
        ap.error("--pairs must be >= 1, --stored, --shift and --bisect >= 0")
    if args.bisect:
        return bisect_main(args)
    design = seq.Design(pool_stored=args.pool)
    out = per_shift(args, "false_pct", [], lambda rng, shift, after: one_pair(rng, design, args.stored, shift, after),
                    lambda v: v in (seq.FASTER, seq.SLOWER))
    ok = all(r["after"]["false_pct"] <= 100 * design.alpha for r in out)
    say(args, out, "false_pct", {"pairs": args.pairs, "stored": args.stored, "pool": args.pool, "ok": ok},
        f"A/A pairs, the reference's {args.stored} launches from before the shift, {args.pairs} a shift; "
        f"false faster/slower (stated <= {100 * design.alpha:g}%) and new launches a pair:")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
