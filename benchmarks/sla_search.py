"""How many points does the SLA search measure per variant, against its bound ceil(log2(range)) + 1?

20 random cost models ITL(c) = base + per_seq x c (base 2-20 ms, per_seq 0.05-4 ms per sequence),
a random concurrency range (lo 1-4, hi 8-512) and a random ITL bound (5-150 ms); the measurement is
synthetic (pure, no server): the model's ITL times a gaussian relative noise (default 0, so the
analytic limit floor((bound - base) / per_seq) is exact). For each model: the points measured, the
bound, and whether the concurrency found is the analytic limit (capped to the range; None when the
bound fails at the lowest concurrency), within one point when there is noise.

    python benchmarks/sla_search.py [--models 20] [--seed 2126] [--noise 0.0] [-v]

Exit status 0 when every search stayed within its bound and found the limit (within one point).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from toolkit.analysis.sla import max_points, search  # noqa: E402


def one(rng: random.Random, noise: float) -> dict:
    base, per_seq = rng.uniform(2, 20), rng.uniform(0.05, 4)
    lo, hi = rng.randint(1, 4), rng.randint(8, 512)
    bound = rng.uniform(5, 150)
    limit = math.floor((bound - base) / per_seq)
    expected = None if limit < lo else min(limit, hi)

    def passes(c: int) -> bool:
        return (base + per_seq * c) * (1 + rng.gauss(0, noise)) <= bound

    s = search(lo, hi, passes)
    found_ok = s.best == expected or (noise > 0 and None not in (s.best, expected) and abs(s.best - expected) <= 1)
    return {"base": base, "per_seq": per_seq, "range": (lo, hi), "bound_ms": bound, "expected": expected,
            "found": s.best, "points": len(s.measured), "max_points": max_points(lo, hi), "found_ok": found_ok}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=20)
    ap.add_argument("--seed", type=int, default=2126)
    ap.add_argument("--noise", type=float, default=0.0, help="gaussian relative noise of each measurement")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    rows = [one(rng, args.noise) for _ in range(args.models)]
    print(f"{'model':>5} {'range':>9} {'base ms':>8} {'ms/seq':>7} {'bound':>7} {'limit':>6} {'found':>6} "
          f"{'points':>6} {'bound':>6}")
    for i, r in enumerate(rows, 1):
        print(f"{i:>5} {r['range'][0]:>4}..{r['range'][1]:<4} {r['base']:>8.2f} {r['per_seq']:>7.3f} "
              f"{r['bound_ms']:>7.1f} {str(r['expected']):>6} {str(r['found']):>6} {r['points']:>6} "
              f"{r['max_points']:>6}" + ("" if r["found_ok"] else "  <- wrong limit"))
    within = sum(r["points"] <= r["max_points"] for r in rows)
    found = sum(r["found_ok"] for r in rows)
    mean_pts = sum(r["points"] for r in rows) / len(rows)
    mean_bound = sum(r["max_points"] for r in rows) / len(rows)
    print(f"points per variant: mean {mean_pts:.2f} (bound mean {mean_bound:.2f}); within the bound "
          f"{within}/{len(rows)}; limit found {found}/{len(rows)}")
    return 0 if within == len(rows) and found == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
