"""Pocock's nominal level of the repeated intervals (toolkit.analysis.sequential), calibrated by
simulation (pure; seeded, cached).

The pooled-t statistics of the looks' prefixes are pivotal under normal log-values (their joint
law does not depend on the mean or the spread), so the one nominal level a' at which all the looks
n = min_repeats .. max_repeats together keep 1 - alpha coverage is a constant of (alpha,
min_repeats, max_repeats, and the stored spread a look may pool): the alpha quantile of the
smallest per-look p-value over CALIBRATION_PATHS seeded null paths (`null_looks`), about +-0.0004
on alpha.

A level that pools stored launches is calibrated for a box up to noise_prior.DRIFT times noisier
(launch-to-launch standard deviation) now than when they were stored: the stored values of the null
paths are drawn with 1/DRIFT of the current spread. Pooling a calmer spread than the current one is
what makes a pooled verdict too bold, and more so the calmer it is (from 1x to beyond 2x), so the
level that keeps alpha at DRIFT keeps it for every drift up to DRIFT.
"""

from __future__ import annotations

import functools

import numpy as np

from toolkit.analysis import noise_prior

CALIBRATION_PATHS = 400_000
CALIBRATION_SEED = 20261202


@functools.lru_cache(maxsize=64)
def nominal_level(alpha: float, min_repeats: int, max_repeats: int, prior_dof: int = 0, stored_a: int = 0,
                  stored_b: int = 0, sides: int = 2) -> float:
    """simulated_level's value for these settings, without simulating again what was simulated before
    (3-11 s of CPU a level): the table shipped in the package for the common designs, else a level this
    machine simulated before, else simulated now and kept (toolkit.analysis.sequential_level_cache; every
    entry keyed by the settings and a hash of the code that simulates it, so it is the same number)."""
    from toolkit.analysis import sequential_level_cache as cache

    args = (float(alpha), int(min_repeats), int(max_repeats), int(prior_dof), int(stored_a), int(stored_b), int(sides))
    found = cache.lookup(args)
    if found is None:
        found = simulated_level(*args)
        cache.keep(args, found)
    return found


def simulated_level(alpha: float, min_repeats: int, max_repeats: int, prior_dof: int = 0, stored_a: int = 0,
                    stored_b: int = 0, sides: int = 2) -> float:
    """a': the two-sided level of each look's t interval at which the looks n = min_repeats ..
    max_repeats (equal sides) together keep 1 - alpha coverage under normal log-values (Pocock's
    boundary: the same level at every look). The alpha quantile of the smallest per-look p-value
    over a seeded simulation of CALIBRATION_PATHS paths (the t statistics are pivotal).

    With stored spread (toolkit.analysis.noise_prior) each look n pools a prior: a fixed one of
    `prior_dof` df (stored launches not in the sequences) plus the stored launches the look does not
    use (the sequences' first `stored_a` / `stored_b` values were stored before launching began;
    look n does not use a[n:stored_a], b[n:stored_b]), df 2n - 2 + the prior's, unless its
    borrowing test refuses (then 2n - 2). The whole procedure, test included, is calibrated; with
    no stored spread (0, 0, 0) it is the current-launches-only rule.

    `sides=1`: the one-sided level instead, at which the looks together cross one given side (the
    lower: by symmetry either) with probability alpha: the level of each of the two one-sided tests
    of the equivalence verdict (TOST), whose bounds are each crossed with probability <= alpha."""
    from scipy import special

    rng = np.random.default_rng(CALIBRATION_SEED)
    big = max_repeats
    width = max(big, stored_a, stored_b)
    k = np.arange(1, big + 1, dtype=float)
    looks = slice(min_repeats - 1, big)
    nu = 2.0 * k[looks] - 2.0
    calm = 1.0 / noise_prior.DRIFT  # the stored launches' spread, relative to the current one
    smallest = []
    for start in range(0, CALIBRATION_PATHS, 50_000):
        rows = min(50_000, CALIBRATION_PATHS - start)
        a, b, est, ss, p = null_looks(rng, rows, min_repeats, big)
        if prior_dof or stored_a > min_repeats + 1 or stored_b > min_repeats + 1:
            s0 = calm * calm * rng.chisquare(prior_dof, rows) if prior_dof else np.zeros(rows)
            more = [rng.standard_normal((rows, width - big)) for _ in (a, b)]
            a, b = (np.concatenate([x[:, :stored] * calm, x[:, stored:]], 1) for x, stored in
                    ((a, min(stored_a, big)), (b, min(stored_b, big))))
            more = [np.concatenate([x[:, :max(0, stored - big)] * calm, x[:, max(0, stored - big):]], 1)
                    for x, stored in ((more[0], stored_a), (more[1], stored_b))]
            est, ss, p = _looks(a, b, min_repeats, big)
            pss, pdof = np.repeat(s0[:, None], nu.size, 1), np.full(nu.size, float(prior_dof))
            for x, extra, stored in ((a, more[0], stored_a), (b, more[1], stored_b)):
                full = np.concatenate([x, extra], 1)
                c1, c2 = np.cumsum(full, 1), np.cumsum(full * full, 1)
                for j, n in enumerate(range(min_repeats, big + 1)):
                    m = stored - n  # values full[:, n:stored]
                    if m >= 2:
                        sm, sq = c1[:, stored - 1] - c1[:, n - 1], c2[:, stored - 1] - c2[:, n - 1]
                        pss[:, j] += sq - sm * sm / m
                        pdof[j] += m - 1
            ok = pdof > 0
            safe = np.where(ok, pdof, 1.0)
            tp = np.abs(est[:, looks]) / np.sqrt((ss[:, looks] + pss) / (nu + pdof) * (2.0 / k[looks]))
            refused = ~ok | noise_prior.flagged_against((ss[:, looks] / nu) / np.maximum(pss / safe, 1e-300), nu, safe)
            p = np.where(refused, p, 2.0 * special.stdtr(nu + pdof, -tp))
        if sides == 1:  # the lower one-sided p-value of each look, from the two-sided one and the sign
            p = np.where(est[:, looks] < 0, p / 2.0, 1.0 - p / 2.0)
        smallest.append(p.min(axis=1))
    return float(np.quantile(np.concatenate(smallest), alpha))


def null_looks(rng: np.random.Generator, rows: int, min_repeats: int, max_repeats: int):
    """`rows` paths of max_repeats standard normal values a side under the null: (a, b, the
    prefix estimates (mean b - mean a, every prefix), the pooled sums of squares (every prefix),
    the two-sided pooled-t p-value of each look n = min_repeats .. max_repeats)."""
    a = rng.standard_normal((rows, max_repeats))
    b = rng.standard_normal(a.shape)
    return (a, b, *_looks(a, b, min_repeats, max_repeats))


def _looks(a: np.ndarray, b: np.ndarray, min_repeats: int, max_repeats: int):
    """(prefix estimates, pooled sums of squares, each look's two-sided pooled-t p-value) of paths."""
    from scipy import special

    k = np.arange(1, max_repeats + 1, dtype=float)
    looks = slice(min_repeats - 1, max_repeats)
    nu = 2.0 * k[looks] - 2.0
    ca, cb = np.cumsum(a, 1), np.cumsum(b, 1)
    ss = np.cumsum(a * a, 1) - ca * ca / k + np.cumsum(b * b, 1) - cb * cb / k
    est = (cb - ca) / k
    t = np.abs(est[:, looks]) / np.sqrt(ss[:, looks] / nu * (2.0 / k[looks]))
    return est, ss, 2.0 * special.stdtr(nu, -t)


def write_shipped_levels() -> dict:
    """Simulate the shipped designs' levels (sequential_level_cache.shipped_args) and write the table the
    package ships (`python -m toolkit.analysis.sequential_level`; about a minute of CPU)."""
    import json
    import sys

    from toolkit.analysis import sequential_level_cache as cache

    levels = {}
    for args in cache.shipped_args():
        levels[cache.key(args)] = simulated_level(*args)
        print(f"{cache.key(args)}: {levels[cache.key(args)]!r}", file=sys.stderr)
    table = {"code": cache.code_hash(), "note": "written by python -m toolkit.analysis.sequential_level",
             "levels": levels}
    cache.SHIPPED.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    return table


if __name__ == "__main__":
    write_shipped_levels()
