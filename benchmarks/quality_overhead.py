"""The output check's share of a demo run: `demo/baseline` as shipped (the named baseline "no quality
check") against the same recipe with the shipped `[quality]` defaults (mixed-64 prompts, 16 tokens,
at the lowest and highest benchmark point: c=1 and c=16), interleaved A B A B in one sweep.

Per launch, the wall time of the measuring steps (launch, verify, benchmark, quality, evidence,
store: the stored `timings`); the ratio is mean(with check) / mean(without). Goal: <= 1.10. Also
prints the check's own seconds per launch and how they split between its points. Exit 1 when the goal
is missed.

    python benchmarks/quality_overhead.py [--repeats 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rich.console import Console  # noqa: E402

GOAL = 1.10
MEASURE_STEPS = ("launch", "verify", "benchmark", "quality", "evidence", "store")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pb-quality-overhead-") as tmp:
        proj = Path(tmp) / "proj"
        for part in ("recipes/demo", "patches/demo", "upstream/minisglang"):
            shutil.copytree(REPO / part, proj / part, ignore=shutil.ignore_patterns("*.lock.json", "__pycache__"))
        (proj / "recipes" / "demo" / "baseline-checked.toml").write_text(
            'description = "demo/baseline with the output check"\nextends = "demo/baseline"\n'
            'compare_to = "demo/baseline-checked"\n\n[quality]\n')
        os.environ["PATCHBENCH_HOME"] = str(Path(tmp) / "home")
        os.chdir(proj)
        from toolkit.recipe.load import load_recipe
        from toolkit.results.store import Store
        from toolkit.run.pipeline import run_sweep

        home = Path(os.environ["PATCHBENCH_HOME"])
        store = Store(home / "results.sqlite")
        recipes = [load_recipe("demo/baseline"), load_recipe("demo/baseline-checked")]
        run_sweep(recipes, home=home, store=store, repeats=args.repeats, console=Console(file=io.StringIO()))
        walls: dict[str, list[float]] = {}
        steps: dict[str, dict[str, list[float]]] = {}
        check_s: list[float] = []
        for r in recipes:
            for run in store.runs(recipe=r.name, status="ok"):
                walls.setdefault(r.name, []).append(sum(run.timings.get(s, 0.0) for s in MEASURE_STEPS))
                for s in MEASURE_STEPS:
                    steps.setdefault(r.name, {}).setdefault(s, []).append(run.timings.get(s, 0.0))
                if r.quality is not None:
                    check_s.append(run.timings.get("quality", 0.0))
        for name, per in steps.items():
            print(f"{name}: " + ", ".join(f"{s} {statistics.mean(v):.2f} s" for s, v in per.items()))
    base, checked = (statistics.mean(walls.get(r.name, [float("nan")])) for r in recipes)
    ratio = checked / base
    out = {"no_quality_check_s": base, "with_quality_check_s": checked, "check_s": statistics.mean(check_s),
           "ratio": ratio, "goal": GOAL, "ok": ratio <= GOAL, "repeats": args.repeats}
    print(f"demo/baseline, measured steps per launch: no quality check {base:.2f} s, with it {checked:.2f} s "
          f"(the check {out['check_s']:.2f} s): ratio {ratio:.3f} (goal <= {GOAL}) "
          f"{'ok' if out['ok'] else 'MISSED'}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
