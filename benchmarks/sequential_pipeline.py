"""`sequential_launches.py --pipeline N`: sequential against fixed launches through `run` on the miniature.

N A/A comparisons (two recipes that only extend demo/baseline; each sets its own environment
variable PB_BENCH_SIDE, which the miniature ignores, so that the two sides have different run
identities: recipes of one identity share their stored runs, and an A/A pair of one identity would
compare a run with itself; a different `random-seed` is no A/A: it changes the miniature's output
lengths, 135 against 330 tok/s) and N A/B comparisons (demo/fast,
decode step 12 ms -> 8 ms, against demo/baseline), each once sequentially (`run A B`, the default
2..16 launches each) and once with the fixed design (`run A B --fixed --repeats 4`, then `compare`), every
comparison on recipes of its own identities, in one scratch project and store. The miniature's
benchmark is shrunk as in tests/test_sequential.py (concurrency 1 and 4, 8 prompts of 16 tokens).
Per design: launches, settled verdicts (one per point), launches per settled verdict, and false
verdicts (A/A: faster or slower; A/B: slower or equal).

    python benchmarks/sequential_launches.py --pipeline N [--seed S] [--json]

Measured 2026-12-06 (the default cap of 16, futility with a one-standard-error allowance;
`--pipeline 3 --seed 1`, 349 s on the shared 2-core box):
  A/B (6 point verdicts): sequential 12 launches (4.0 a comparison), 6 "faster" at 2 each; fixed 4+4
    24 launches, 6 "faster".
  A/A (6): sequential 34 launches (11.3 a comparison), 6 "equal within 2%", 0 false; fixed 24, all
    "not significant".
  Both: sequential 46 launches for 12 settled verdicts (3.83 each) against fixed 48 for 6 (8.0):
    0.48x per settled verdict.
Measured 2026-12-02 (cap 8, the old futility rule) on the shared 2-core box (`--pipeline 6 --seed 1`,
785 s; with `--pipeline 2`):
  A/B (12 point verdicts): sequential 38 launches (6.3 a comparison), 10 settled "faster", 2 not
    settled, 3.80 launches per settled verdict; fixed 4+4: 48 launches, 8 "faster", 4 "not
    significant", 6.00 per settled verdict: 0.63x per settled verdict, 0.79x per comparison.
  A/A (12): sequential 36 launches (6.0: every pair stopped as futile at 3 each: the box's launch
    spread is too wide for "equal within 2%" by 8), none settled, 0 false; fixed 48, all "not
    significant", 0 false.
  `--pipeline 2` (seed 0): A/B 14 launches, 4/4 faster (3.50 per settled) against 16, 4/4 (4.00);
    A/A 12 against 16, none settled, 0 false either way.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SMALL = ('driver = "serving"\ninput_len = 16\noutput_len = 16\nconcurrency = [1, 4]\nnum_prompts = 8\nwarmup = 1\n'
         'repeats = 4\n')
FIXED_REPEATS = 4


def _project(tmp: Path) -> Path:
    proj = tmp / "proj"
    for part in ("recipes/demo", "patches/demo", "upstream/minisglang"):
        shutil.copytree(REPO / part, proj / part, ignore=shutil.ignore_patterns("*.lock.json", "__pycache__"))
    base = proj / "recipes" / "demo" / "baseline.toml"
    head, rest = base.read_text().split("[benchmark]", 1)
    base.write_text(head + "[benchmark]\n" + SMALL + rest[rest.index("\n[", 1):])
    return proj


def _recipe(proj: Path, name: str, parent: str) -> str:
    path = proj / "recipes" / "bench" / f"{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'extends = "{parent}"\n\n[server.env]\nPB_BENCH_SIDE = "{name}"\n')
    return f"bench/{name}"


def _cli(argv: list[str]) -> tuple[int, dict]:
    from toolkit.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    text = buf.getvalue()
    return rc, json.loads(text[text.index("{"):]) if "{" in text else {}


def _false(kind: str, verdict: str) -> bool:
    if kind == "aa":
        return verdict in ("faster", "slower")
    return verdict == "slower" or verdict.startswith("equal")


def main(n: int, *, json_out: bool = False, seed: int = 0) -> int:
    t0 = time.monotonic()
    tally = {d: {k: {"comparisons": 0, "launches": 0, "verdicts": 0, "settled": 0, "false": 0, "words": {}}
                 for k in ("aa", "ab")} for d in ("sequential", "fixed")}
    with tempfile.TemporaryDirectory(prefix="pb-seq-pipeline-") as tmp:
        proj = _project(Path(tmp))
        os.environ["PATCHBENCH_HOME"] = str(Path(tmp) / "home")
        os.environ.pop("PATCHBENCH_RECIPES", None)
        os.chdir(proj)
        for i in range(n):
            for kind, parent in (("aa", "demo/baseline"), ("ab", "demo/fast")):
                for design in ("sequential", "fixed"):
                    a = _recipe(proj, f"{kind}-{design}-{seed}-{i}-a", "demo/baseline")
                    b = _recipe(proj, f"{kind}-{design}-{seed}-{i}-b", parent)
                    t = tally[design][kind]
                    if design == "sequential":
                        rc, out = _cli(["run", a, b, "--json"])
                        words = [r["verdict"] if r["settled"] else "not settled" for r in out.get("sequential", [])]
                    else:
                        rc, out = _cli(["run", a, b, "--fixed", "--repeats", str(FIXED_REPEATS), "--json"])
                        _, cmp = _cli(["compare", a, b, "--json"])
                        words = [r["verdict"] for r in cmp.get("rows", [])
                                 if r.get("recipe") == b and r.get("metric") == "output_tok_s"]
                    if rc != 0 or not words:
                        print(f"{design} {kind} {i}: run exited {rc}", file=sys.stderr)
                        return 1
                    settled = [w for w in words if w in ("faster", "slower") or w.startswith("equal")]
                    t["comparisons"] += 1
                    t["launches"] += len(out.get("runs", []))
                    t["verdicts"] += len(words)
                    t["settled"] += len(settled)
                    t["false"] += sum(_false(kind, w) for w in words)
                    for w in words:
                        t["words"][w] = t["words"].get(w, 0) + 1
                    print(f"[pipeline] {design} {kind} #{i}: {len(out.get('runs', []))} launches, {words}; "
                          f"so far {json.dumps(tally)}", file=sys.stderr, flush=True)
    for d in tally.values():
        for t in d.values():
            t["launches_per_settled"] = t["launches"] / t["settled"] if t["settled"] else None
    out = {"comparisons_each": n, "fixed_repeats": FIXED_REPEATS, "designs": tally,
           "seconds": round(time.monotonic() - t0, 1)}
    if json_out:
        print(json.dumps(out, indent=1))
        return 0
    for design, d in tally.items():
        for kind, t in d.items():
            lps = f"{t['launches_per_settled']:.2f}" if t["launches_per_settled"] else "-"
            print(f"{design:10s} {'A/A' if kind == 'aa' else 'A/B'}: {t['comparisons']} comparisons, "
                  f"{t['launches']} launches ({t['launches'] / max(1, t['comparisons']):.1f} each comparison), "
                  f"settled {t['settled']}/{t['verdicts']} point verdicts, {lps} launches per settled, "
                  f"false {t['false']}; {t['words']}")
    print(f"({out['seconds']} s)")
    return 0
