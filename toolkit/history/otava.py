"""Change points by Apache Otava (E-Divisive with a t-test, windows and a strict second pass), run in an
env of its own. Effects: creates that env once (uv, this machine's pip sources), runs a probe in it.

apache-otava 0.8.0 pins numpy==2.2.0.* and pulls BigQuery, Slack and Postgres clients, so it never
enters patchbench's process: `ensure_env` makes `$PATCHBENCH_OTAVA_ENV` (default
`PATCHBENCH_HOME/tools/otava-0.8.0`; `toolkit.envs.tool_env`), and `detect` feeds the series to
`toolkit/probes/otava_detect.py` there as JSON and parses the change points it prints.

Otava's own minimum: E-Divisive splits a series only where at least two points lie on each side of
the split, so a series of fewer than `MIN_POINTS` (4) values can show no change point at all; `detect`
says "not enough history" instead of "no change".

Which of Otava's change points count (Student's t across the split, Bonferroni over the places the
series could split, so a flat series shows one at most `alpha` of the time), and the stretches Otava
cannot see (a regression fixed a few points later: two change points): toolkit/history/change_verdict.py.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from toolkit.envs.tool_env import ToolEnv
from toolkit.history import change_verdict
from toolkit.history.change_verdict import ChangePoint  # noqa: F401 - the change point's type, here since Otava came first
from toolkit.errors import PatchbenchError
from toolkit.resources import PROBES_DIR

OTAVA = "apache-otava==0.8.0"
OTAVA_ENV = ToolEnv("Apache Otava", OTAVA, "otava-0.8.0", "PATCHBENCH_OTAVA_ENV")
MIN_POINTS = 4
# Otava's own defaults, but for the magnitude (Otava: 0): on a long flat series with a few % of noise
# its windowed splits find ~2% "changes" at p < 0.001; smaller than 3% is also below what a bisect
# between two points can pin down (its default threshold is 5%).
# `alpha`: patchbench's own, the change-point verdict's false-alarm rate per series
# (toolkit/history/change_verdict.py); Otava's max_pvalue only finds the candidates.
DEFAULTS = {"window": 50, "max_pvalue": 0.001, "min_magnitude": 0.03, "alpha": 0.01}


class NotEnoughHistory(PatchbenchError):
    """Fewer points than E-Divisive can split."""


@dataclass(frozen=True)
class Detection:
    change_points: list[ChangePoint]
    analysis_s: float  # Otava's analysis alone (its interpreter's start-up not counted)
    otava: str
    options: dict


def env_dir(home: Path) -> Path:
    return OTAVA_ENV.root(home)


def ensure_env(home: Path, console=None) -> Path:
    """The interpreter of Otava's env, created on first use (a log beside it on failure)."""
    return OTAVA_ENV.ensure(home, console)


def detect(values: list[float], home: Path, **options) -> Detection:
    """Otava's change points of `values` (in order); NotEnoughHistory below MIN_POINTS values.
    `options`: window, max_pvalue, min_magnitude, alpha (DEFAULTS), console."""
    return detect_many([values], home, **options)[0]


def detect_many(many: list[list[float]], home: Path, *, window: int = DEFAULTS["window"],
                max_pvalue: float = DEFAULTS["max_pvalue"], min_magnitude: float = DEFAULTS["min_magnitude"],
                alpha: float = DEFAULTS["alpha"], console=None) -> list[Detection]:
    """`detect` for several series in one start of Otava's interpreter."""
    for values in many:
        if len(values) < MIN_POINTS:
            raise NotEnoughHistory(f"not enough history: {len(values)} measured point(s); Otava's E-Divisive "
                                   f"needs at least {MIN_POINTS} (two on each side of a change)")
    py = ensure_env(home, console)
    req = {"series": [[float(v) for v in values] for values in many], "window": int(window),
           "max_pvalue": float(max_pvalue), "min_magnitude": float(min_magnitude)}
    res = subprocess.run([str(py), str(PROBES_DIR / "otava_detect.py")], input=json.dumps(req),
                         capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        tail = (res.stderr.strip().splitlines() or ["no output"])[-1]
        raise PatchbenchError(f"Apache Otava failed: {tail}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    return [Detection(change_verdict.judge(values, [ChangePoint(**c) for c in r["change_points"]],
                                           alpha=alpha, min_magnitude=min_magnitude),
                      r["analysis_s"], out["otava"], out["options"])
            for values, r in zip(many, out["results"])]
