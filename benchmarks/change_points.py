"""Change points in tracked history: how fast is detection, and are planted changes found and their
commits named within the build bound?

1. Speed: Apache Otava's E-Divisive (in its own env, `toolkit.history.otava`) over a 200-point series
   with two steps. Goal: the analysis < 1 s (the env's interpreter start-up is shown apart).
2. Accuracy: 20 random synthetic histories, each 200..400 first-parent commits tracked every 12th
   commit (as `patchbench track --branch main --every 12`), with 1..3 planted changes at random commits
   (regressions of 8..20%, gains of 30..100%); every measurement carries 1% gaussian noise. With
   `--down-up`, each holds a regression of 15..50% fixed 2..5 tracked points later (a stretch,
   toolkit/history/stretch.py) and 0..1 other change: both its commits must be named, each end
   bisected on its own. Each history goes through the same code as `patchbench history --bisect --direction both`: Otava's
   change points, then `bisect_items` over the 12 commits between each change point's neighbouring
   tracked points (threshold: half the change). Goal: every planted change found, its commit named,
   in <= ceil(log2 n) + 1 builds per change point (n = 12 commits: 5).

    python benchmarks/change_points.py [--histories 20] [--seed 2026] [--down-up] [-v]

Needs PyPI (or a cached env) for apache-otava the first time: $PATCHBENCH_OTAVA_ENV, else
$PATCHBENCH_HOME/tools/otava-0.8.0. Exit status 0 when both goals hold.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from toolkit.analysis.bisect import bisect_items  # noqa: E402
from toolkit.history import otava  # noqa: E402
from toolkit.workspace import default_home  # noqa: E402

EVERY = 12
NOISE = 0.01
BASE = 100.0


def speed(home: Path) -> tuple[float, float]:
    rng = random.Random(1)
    values = [lvl * (1 + rng.gauss(0, NOISE)) for n, lvl in ((80, 100.0), (70, 91.0), (50, 150.0)) for _ in range(n)]
    t0 = time.perf_counter()
    det = otava.detect(values, home)
    wall = time.perf_counter() - t0
    print(f"detection over 200 points: Otava's analysis {det.analysis_s:.3f} s (goal < 1 s); "
          f"with its interpreter's start-up {wall:.2f} s; change points at {[c.index for c in det.change_points]}")
    return det.analysis_s, wall


def history(rng: random.Random, down_up: bool = False) -> tuple[list[float], dict[int, float]]:
    """True value after each commit, and the planted commits -> factor. `down_up`: one more plant, a
    regression of 15..50% fixed 2..5 tracked points later (a stretch: Otava proposes neither end)."""
    n = rng.randint(200, 400)
    plants: dict[int, float] = {}
    if down_up:
        c = rng.randint(2 * EVERY, n - 8 * EVERY)
        f = 1 - rng.uniform(0.15, 0.50)
        plants[c] = f
        plants[c + rng.randint(2, 5) * EVERY + rng.randint(-EVERY // 2, EVERY // 2)] = 1 / f
    for _ in range(rng.randint(0, 1) if down_up else rng.randint(1, 3)):
        for _try in range(1000):
            c = rng.randint(2 * EVERY, n - 2 * EVERY)
            if all(abs(c - o) > 3 * EVERY for o in plants):
                plants[c] = 1 - rng.uniform(0.08, 0.20) if rng.random() < 0.5 else 1 + rng.uniform(0.30, 1.00)
                break
    level, truth = BASE, []
    for i in range(n):
        level *= plants.get(i, 1.0)
        truth.append(level)
    return truth, plants


def tracked(rng: random.Random, down_up: bool = False) -> tuple[list[float], dict[int, float], list[int], list[float]]:
    """A history and its tracked series: (truth, plants, tracked commits, measured values)."""
    truth, plants = history(rng, down_up)
    points = list(range(0, len(truth), EVERY))
    return truth, plants, points, [truth[i] * (1 + rng.gauss(0, NOISE)) for i in points]


def one(rng: random.Random, truth, plants, points, found, verbose: bool) -> list[tuple[bool, int, int]]:
    """Bisect each change point found; (named right, builds, bound) per planted change."""

    def noisy(i: int) -> float:
        return truth[i] * (1 + rng.gauss(0, NOISE))

    named: dict[int, int] = {}
    for cp in found:
        lo, hi = points[cp.index - 1], points[cp.index]
        commits = list(range(lo, hi + 1))
        direction = "worse" if cp.forward_change_percent < 0 else "better"

        def measure(k: int, r: int, commits=commits) -> list[float]:
            return [noisy(commits[k]) for _ in range(r)]

        res = bisect_items([str(c) for c in commits], measure, higher_is_better=True, direction=direction,
                           threshold_pct=max(1.0, abs(cp.forward_change_percent) / 2), initial_repeats=3,
                           max_repeats=8)
        if res.culprit is not None:
            named[commits[res.culprit]] = res.builds
        if verbose:
            print(f"   change {lo}..{hi} {cp.forward_change_percent:+.1f}% p={cp.pvalue:.1g}: {res.message}")
    bound = math.ceil(math.log2(EVERY)) + 1
    out = [(c in named, named.get(c, 0), bound) for c in sorted(plants)]
    extra = set(named) - set(plants)
    if verbose or extra:
        print(f"  {len(truth)} commits, planted {sorted(plants)}, named {sorted(named)}"
              + (f" (false: {sorted(extra)})" if extra else ""))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--histories", type=int, default=20)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--down-up", action="store_true",
                    help="each history also holds a regression fixed 2-5 tracked points later (a stretch)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    home = default_home()
    home.mkdir(parents=True, exist_ok=True)
    analysis_s, _ = speed(home)
    rng = random.Random(args.seed)
    histories = [tracked(rng, args.down_up) for _ in range(args.histories)]
    detections = otava.detect_many([h[3] for h in histories], home)  # one start of Otava's interpreter
    results = []
    for n, ((truth, plants, points, _), det) in enumerate(zip(histories, detections), 1):
        if args.verbose:
            print(f"history {n}:")
        results += one(rng, truth, plants, points, det.change_points, args.verbose)
    right = sum(ok for ok, _, _ in results)
    builds = [b for ok, b, _ in results if ok]
    bound = results[0][2]
    within = sum(1 for ok, b, bd in results if ok and b <= bd)
    print(f"planted changes: {len(results)} in {args.histories} histories; commit named: {right}/{len(results)}")
    print(f"builds per named change point: mean {sum(builds) / max(1, len(builds)):.2f}, max {max(builds, default=0)} "
          f"(bound ceil(log2 {EVERY}) + 1 = {bound}); within the bound: {within}/{len(results)}")
    ok = analysis_s < 1.0 and right == len(results) and within == len(results)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
