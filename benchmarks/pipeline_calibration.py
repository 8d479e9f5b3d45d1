"""The speed verdict through the whole pipeline on the miniature: how often `compare` says faster or
slower when nothing changed (A/A), and how often it sees the demo patches (A/B).

Each pair is measured afresh (`patchbench run A B --repeats R`, interleaved, one group) and judged
by `patchbench compare A B --group G --metric output_tok_s@16 --json`, as a user would:
- A/A: `demo/cal-a` and `demo/cal-b`, the same recipe under two names (cal-b only `extends` cal-a,
  a light copy of demo/baseline: concurrency 16, 32 prompts of 16 tokens, no output check);
- A/B: cal-a against demo/fast's patch (decode step 12 ms -> 8 ms) and demo/slow's (per-sequence
  cost x10), each with cal-a's benchmark.
The rates come with exact 95% intervals; the A/A rate holds when its interval reaches the speed
verdict's alpha (0.05) or below. Server time: 2 x R launches per pair; on a shared 2-core CPU a
pair of 4 launches each takes about 30 s.

    python benchmarks/pipeline_calibration.py [--pairs 10] [--ab-pairs N] [--repeats 4] [--json out.json] [-v]

Runs in a scratch project and PATCHBENCH_HOME (a temporary directory, removed after); exit 1 when
the A/A rate does not hold.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from verdict_calibration import clopper_pearson  # noqa: E402

METRIC = "output_tok_s@16"
LIGHT = """\
[benchmark]
input_len = 16
output_len = 16
concurrency = [16]
num_prompts = 32
warmup = 1
[quality]
launches = 0
"""
RECIPES = {
    "cal-a": 'description = "calibration: demo/baseline, lighter"\nextends = "demo/baseline"\n' + LIGHT,
    "cal-b": 'description = "calibration: cal-a under another name"\nextends = "demo/cal-a"\n',
    "cal-fast": 'description = "calibration: demo/fast, lighter"\nextends = "demo/fast"\n' + LIGHT,
    "cal-slow": 'description = "calibration: demo/slow, lighter"\nextends = "demo/slow"\n' + LIGHT,
}
KINDS = (("A/A", "demo/cal-b", None), ("A/B faster", "demo/cal-fast", "faster"), ("A/B slower", "demo/cal-slow", "slower"))


def project(root: Path) -> Path:
    proj = root / "proj"
    for part in ("recipes/demo", "patches/demo", "upstream/minisglang"):
        shutil.copytree(REPO / part, proj / part, ignore=shutil.ignore_patterns("*.lock.json", "__pycache__"))
    for name, text in RECIPES.items():
        (proj / "recipes" / "demo" / f"{name}.toml").write_text(text)
    return proj


def cli(proj: Path, env: dict, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolkit", *argv], cwd=proj, env=env, capture_output=True, text=True)


def one_pair(proj: Path, env: dict, home: Path, cand: str, repeats: int) -> str:
    """Measure demo/cal-a and `cand` afresh (one group) and return compare's verdict at METRIC."""
    from toolkit.results.store import Store

    run = cli(proj, env, "run", "demo/cal-a", cand, "--repeats", str(repeats), "--json")
    if run.returncode != 0:
        raise SystemExit(f"run failed ({run.returncode}): {run.stderr.strip()[-400:]}")
    store = Store(home / "results.sqlite")
    group = store.runs(recipe=cand)[-1].group_id
    out = cli(proj, env, "compare", "demo/cal-a", cand, "--group", group, "--metric", METRIC, "--json")
    if out.returncode != 0:
        raise SystemExit(f"compare failed ({out.returncode}): {out.stderr.strip()[-400:]}")
    (row,) = [r for r in json.loads(out.stdout)["rows"] if r["recipe"] == cand]
    return row["verdict"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=10, help="measured A/A pairs (default 10)")
    ap.add_argument("--ab-pairs", type=int, default=None, help="measured pairs of each A/B kind (default: --pairs)")
    ap.add_argument("--repeats", type=int, default=4, help="launches per recipe and pair (default 4)")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    ab_pairs = args.pairs if args.ab_pairs is None else args.ab_pairs
    if args.pairs < 1 or ab_pairs < 1 or args.repeats < 2:
        print("error: --pairs and --ab-pairs must be at least 1 and --repeats at least 2", file=sys.stderr)
        return 2
    from toolkit.analysis.stats import DEFAULT_ALPHA

    root = Path(tempfile.mkdtemp(prefix="patchbench-pipeline-cal-"))
    try:
        proj = project(root)
        home = root / "home"
        env = {**os.environ, "PATCHBENCH_HOME": str(home), "PYTHONPATH": str(REPO)}
        env.pop("PATCHBENCH_RECIPES", None)
        results = []
        t0 = time.monotonic()
        for kind, cand, expect in KINDS:
            verdicts = []
            pairs = args.pairs if expect is None else ab_pairs
            for i in range(pairs):
                verdicts.append(one_pair(proj, env, home, cand, args.repeats))
                if args.verbose:
                    print(f"{kind} pair {i + 1}: {verdicts[-1]} ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
            hits = sum(v in ("faster", "slower") for v in verdicts) if expect is None \
                else sum(v == expect for v in verdicts)
            results.append({"kind": kind, "candidate": cand, "pairs": pairs, "called": hits,
                            "rate": hits / pairs, "ci": clopper_pearson(hits, pairs),
                            "verdicts": verdicts})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{'pipeline (miniature, ' + METRIC + ')':<40} {'pairs':>5}  {'rate [95% CI]':<24} what counts")
    for r in results:
        what = "faster or slower (a false alarm)" if r["kind"] == "A/A" else f"{r['kind'].split()[1]} (power)"
        rate = f"{100 * r['rate']:.0f}% [{100 * r['ci'][0]:.0f}%, {100 * r['ci'][1]:.0f}%]"
        print(f"{r['kind'] + ': demo/cal-a vs ' + r['candidate']:<40} {r['pairs']:>5}  {rate:<24} {what}")
    print(f"{args.repeats} launches per recipe and pair, interleaved; {time.monotonic() - t0:.0f} s; "
          f"the speed verdict's alpha {DEFAULT_ALPHA:g}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0 if results[0]["ci"][0] <= DEFAULT_ALPHA else 1


if __name__ == "__main__":
    sys.exit(main())
