"""The output check's share of a demo run: the main demo's recipes (`nox -s demo`: demo/baseline,
demo/fast, demo/slow, 4 launches each) as shipped, with their `[quality]` check, against the same
recipes with the check off (`[quality] launches = 0`, the named baseline "no quality check"), all
interleaved in one sweep so both arms see the same machine.

Wall time of an arm: the sum over its launches of the launch's steps (launch, verify, benchmark,
quality, evidence, store: the stored `timings`). The env steps are shared by both arms and left out,
so the ratio is an upper bound of what the check adds to the whole `nox -s demo`. Goal: <= 1.10.
Also printed: the check's own seconds in a launch that asks, and how many launches asked (answers
belong to a configuration: 2 launches of a reference, 1 of a candidate; toolkit/run/quality.py).
Exit 1 when the goal is missed.

    python benchmarks/quality_overhead.py [--repeats 4] [--json out.json]
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
DEMO = ("demo/baseline", "demo/fast", "demo/slow")
LAUNCH_STEPS = ("launch", "verify", "benchmark", "quality", "evidence", "store")


def _no_check(proj: Path, name: str) -> str:
    """A recipe `nocheck/X` extending `demo/X` with the check off (its compare_to the no-check baseline)."""
    short = name.split("/", 1)[1]
    path = proj / "recipes" / "nocheck" / f"{short}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'extends = "{name}"\ncompare_to = "nocheck/baseline"\n\n[quality]\nlaunches = 0\n')
    return f"nocheck/{short}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=4, help="launches per recipe (the demo's: 4)")
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pb-quality-overhead-") as tmp:
        proj = Path(tmp) / "proj"
        for part in ("recipes/demo", "patches/demo", "upstream/minisglang"):
            shutil.copytree(REPO / part, proj / part, ignore=shutil.ignore_patterns("*.lock.json", "__pycache__"))
        arms = {"with the check": list(DEMO), "no quality check": [_no_check(proj, n) for n in DEMO]}
        os.environ["PATCHBENCH_HOME"] = str(Path(tmp) / "home")
        os.chdir(proj)
        from toolkit.recipe.load import load_recipe
        from toolkit.results.store import Store
        from toolkit.run.pipeline import run_sweep

        home = Path(os.environ["PATCHBENCH_HOME"])
        store = Store(home / "results.sqlite")
        names = [n for pair in zip(arms["no quality check"], arms["with the check"]) for n in pair]
        run_sweep([load_recipe(n) for n in names], home=home, store=store, repeats=args.repeats,
                  console=Console(file=io.StringIO()))
        wall: dict[str, float] = {}
        asked: list[float] = []
        statuses: dict[str, list[str]] = {}
        for arm, recipes in arms.items():
            for name in recipes:
                runs = store.runs(recipe=name)
                bad = [r for r in runs if r.status != "ok"]
                if bad:
                    print(f"{name}: run {bad[0].run_id[:8]} {bad[0].status}: {bad[0].error}", file=sys.stderr)
                    return 1
                wall[arm] = wall.get(arm, 0.0) + sum(r.timings.get(s, 0.0) for r in runs for s in LAUNCH_STEPS)
                statuses[name] = [((r.extra or {}).get("quality") or {}).get("status") for r in runs]
                asked += [r.timings.get("quality", 0.0) for r in runs
                          if ((r.extra or {}).get("quality") or {}).get("status") == "ok"]
    ratio = wall["with the check"] / wall["no quality check"]
    out = {"no_quality_check_s": wall["no quality check"], "with_quality_check_s": wall["with the check"],
           "ratio": ratio, "goal": GOAL, "ok": ratio <= GOAL, "repeats": args.repeats,
           "check_s_when_asked": statistics.mean(asked) if asked else 0.0, "launches_asked": len(asked),
           "launches": sum(len(v) for k, v in statuses.items() if k.startswith("demo/")), "statuses": statuses}
    for name in DEMO:
        print(f"{name}: output check per launch: {', '.join(map(str, statuses[name]))}")
    print(f"the demo's {out['launches']} launches: no quality check {out['no_quality_check_s']:.1f} s, "
          f"with it {out['with_quality_check_s']:.1f} s ({out['launches_asked']} launches asked, "
          f"{out['check_s_when_asked']:.2f} s each): ratio {ratio:.3f} (goal <= {GOAL}) "
          f"{'ok' if out['ok'] else 'MISSED'}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
