"""Envs that cost seconds, on the shipped recipes (real PyPI releases: the sglang 0.5.23 wheel and
the flashinfer-python 0.7.2 sdist).

Measures, in PATCHBENCH_HOME (use a home of its own: the first env costs ~2 min and ~10 GB):
  1. the first env (`baseline`): its build, as recorded in its manifest when it already exists;
  2. a second env differing only in an sglang patch (`oea`): goal <= 20 s, since FlashInfer's wheel
     comes from the wheel cache and the sglang wheel tree is only re-packed;
  3. `patchbench patches check oea` twice: the second on the cached base tree (goal <= 3 s);
  4. the static check of `baseline` twice (`run --until check`): the repeat (goal < 1 s).
Prints each time, its goal and its ratio to the first env; exit 1 when a goal is missed.

    PATCHBENCH_HOME=/work/homes/NAME python benchmarks/env_seconds.py
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rich.console import Console  # noqa: E402

from toolkit.run.pipeline import prepare  # noqa: E402
from toolkit.recipe.load import load_recipe  # noqa: E402


def quiet() -> Console:
    return Console(file=io.StringIO(), width=200)


def build(name: str, home: Path, until: str = "build"):
    t0 = time.monotonic()
    prepared = prepare(load_recipe(REPO / "recipes" / f"{name}.toml"), home, until=until,
                       console=Console(stderr=True))
    return prepared, time.monotonic() - t0


def cli(*args: str) -> tuple[float, int]:
    exe = Path(sys.executable).parent / "patchbench"
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "toolkit.cli"]
    t0 = time.monotonic()
    rc = subprocess.run([*argv, *args], cwd=REPO, stdout=subprocess.DEVNULL,
                        stdin=subprocess.DEVNULL).returncode
    return time.monotonic() - t0, rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args()
    home = Path(os.environ.get("PATCHBENCH_HOME") or "~/.patchbench").expanduser().resolve()
    os.environ["PATCHBENCH_HOME"] = str(home)
    print(f"PATCHBENCH_HOME={home}", file=sys.stderr)

    first, wall = build("baseline", home)
    first_s = first.env.manifest["timings"]["total"] if first.env.reused else wall
    second, second_s = build("oea", home)
    cached = {i["source"]: i.get("cached") for i in second.env.manifest["installed"]}

    check1_s, rc1 = cli("patches", "check", "oea")
    check2_s, rc2 = cli("patches", "check", "oea")

    s1, _ = build("baseline", home, until="check")
    s2, _ = build("baseline", home, until="check")
    static1, static2 = s1.timings["check"], s2.timings["check"]

    rows = [
        ("first env (baseline)", first_s, None,
         "from its manifest (already built)" if first.env.reused else "built now"),
        ("second env (oea: + sglang patch)", second_s, 20.0,
         "reused env" if second.env.reused else f"wheels from cache: {cached}"),
        ("patches check oea (first call)", check1_s, None, f"exit {rc1}"),
        ("patches check oea (cached base)", check2_s, 3.0, f"exit {rc2}"),
        ("static check baseline (first)", static1, None, f"sglang {s1.check.version}"),
        ("static check baseline (repeat)", static2, 1.0, ""),
    ]
    missed = False
    print(f"{'measure':36} {'seconds':>9} {'goal':>6} {'/ first env':>12}  note")
    for name, sec, goal, note in rows:
        ok = goal is None or sec <= goal
        missed |= not ok
        print(f"{name:36} {sec:9.2f} {('<= ' + format(goal, 'g')) if goal else '':>6} "
              f"{sec / first_s:12.4f}  {'' if ok else 'MISSED '}{note}")
    if args.json:
        args.json.write_text(json.dumps({"rows": [
            {"measure": r[0], "seconds": round(r[1], 3), "goal": r[2],
             "ratio_to_first_env": round(r[1] / first_s, 5), "note": r[3]} for r in rows]},
            indent=1) + "\n")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
