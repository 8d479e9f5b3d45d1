"""Does the SLA point verdict keep its promise? False "passes" near the bound, and power inside it.

The verdict (toolkit/analysis/sla.py `judge`) says "passes" only when every one of a point's n runs
meets the bound, and states: a point whose median run sits on the bound or beyond reads "passes"
with probability at most 0.5^n. Simulated (pure, seeded): `--cases` points per row, each n runs
drawn around a true median with relative noise `cv` from three shapes (gaussian, lognormal: skewed,
uniform), for a ceiling (itl_ms_p99<=50) and a floor (output_tok_s>=500):

- on the bound (true median = bound): the false "passes" rate, stated at most 0.5^n;
- beyond the bound by one cv: stated at most 0.5^n as well (far below it in practice);
- inside the bound by two cv: the power (how often a point that meets the bound reads "passes").

Each row: measured rate with its 95% Clopper-Pearson interval (scipy) and whether it keeps the
stated rate (the interval's low end at or below it). Exit 0 when every row keeps it.

    python benchmarks/sla_calibration.py [--cases 4000] [--seed 29] [--cv 0.03] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from toolkit.analysis.sla import PASSES, false_pass_rate, judge, parse_bound  # noqa: E402

BOUNDS = ("itl_ms_p99<=50", "output_tok_s>=500")
NOISES = ("gaussian", "lognormal", "uniform")


def _draw(rng: random.Random, shape: str, median: float, cv: float) -> float:
    """One run's value: median times a noise factor whose median is 1."""
    if shape == "gaussian":
        return median * (1 + rng.gauss(0, cv))
    if shape == "lognormal":
        return median * rng.lognormvariate(0, cv)  # right-skewed, median 1
    return median * (1 + rng.uniform(-cv * 1.7, cv * 1.7))  # uniform with sd ~ cv


def _ci(k: int, n: int) -> tuple[float, float]:
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(0.95, method="exact")
    return float(ci.low), float(ci.high)


def calibrate(cases: int = 4000, seed: int = 29, cv: float = 0.03, runs: tuple[int, ...] = (1, 2, 3, 4)) -> list[dict]:
    """Every row of the table (see the module docstring); deterministic for a seed."""
    rng = random.Random(seed)
    rows = []
    for text in BOUNDS:
        bound = parse_bound(text)
        # distance from the bound towards failing: a ceiling fails above it, a floor below it
        out = 1 if bound.op in ("<=", "<") else -1
        for where, shift, stated in (("on the bound", 0.0, None), ("beyond by 1 cv", out * cv, None),
                                     ("inside by 2 cv", -out * 2 * cv, "power")):
            for shape in NOISES:
                for n in runs:
                    median = bound.value * (1 + shift)
                    k = sum(judge(bound, [_draw(rng, shape, median, cv) for _ in range(n)]).state == PASSES
                            for _ in range(cases))
                    lo, hi = _ci(k, cases)
                    promise = None if stated == "power" else false_pass_rate(n)
                    rows.append({"bound": text, "true": where, "noise": shape, "runs": n, "cases": cases,
                                 "measured": k / cases, "ci": [lo, hi],
                                 "stated_max": promise, "kind": "power" if stated == "power" else "false passes",
                                 "keeps": None if promise is None else lo <= promise})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=29)
    ap.add_argument("--cv", type=float, default=0.03, help="relative noise of one run (default 0.03)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = calibrate(args.cases, args.seed, args.cv)
    if args.json:
        print(json.dumps({"verdict": "sla point (sla.judge)", "cv": args.cv, "seed": args.seed, "rows": rows}, indent=2))
    else:
        print(f"SLA point verdict 'passes' (every run meets the bound), relative noise {args.cv:g}, "
              f"{args.cases} cases per row, seed {args.seed}")
        print(f"{'bound':<19} {'true median':<15} {'noise':<9} {'runs':>4} {'stated':>8} {'measured [95% CI]':>24}")
        for r in rows:
            stated = "power" if r["stated_max"] is None else f"<={r['stated_max']:.3f}"
            flag = "" if r["keeps"] in (True, None) else "  <- above the stated rate"
            print(f"{r['bound']:<19} {r['true']:<15} {r['noise']:<9} {r['runs']:>4} {stated:>8} "
                  f"{r['measured']:>8.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]{flag}")
    return 0 if all(r["keeps"] in (True, None) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
