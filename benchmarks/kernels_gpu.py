"""The kernel-table path on a CUDA GPU (benchmarks/kernels_gpu.py): a few minutes, never in CI.

Runs `toolkit/probes/kernel_bench.py` (the program `patchbench kernels` runs inside a recipe's env)
with an interpreter that has a CUDA build of torch (and FlashInfer, for the FP4 part):

1. `test.matmul` on `cuda` at M = 1, 16, 128: CUDA-event timing, the cold-L2 flush (twice the GPU's
   L2), one flush per timed call, the fp32 reference check; then the same op broken for M >= 8
   (PATCHBENCH_TEST_OP_ZEROS_FROM_M=8) must be flagged "all-zero" at M = 16 and 128.
2. `flashinfer.mm_fp4` at M = 1, 16, 128 on GLM-5's TP8 expert shapes (gate+up 512 x 6144, down
   6144 x 256), for every backend FlashInfer offers on this GPU's compute capability that can take
   the probe's call (one scalar alpha): each shape must run and pass its check against the
   dequantized fp32 reference, autotuned and timed from a CUDA graph as `patchbench kernels` does.
   A backend the call cannot use at all (SM100/103: `cake`, per-row alpha only) and a shape a backend
   cannot take (`cutedsl_low_latency`: M <= 8) are SKIP lines with the reason, never FAILs. A GPU
   without FP4 tensor cores (SM90: H100/H200) offers none: that is a SKIP line, not a PASS.

Prints one `PASS|FAIL|SKIP <what>: <detail>` line per check; `main()` returns 0 when nothing failed
(importable: benchmarks/gpu_check.py calls `main([])` or `checks()`).

    python benchmarks/kernels_gpu.py [--python PATH] [--iters 20] [--trials 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MS = (1, 16, 128)
GLM5_TP8 = (("experts.gate_up", 512, 6144), ("experts.down", 6144, 256))


def _environ(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PATCHBENCH_TEST_OP_ZEROS_FROM_M"}
    env.update(extra)
    return env


def checks(python: str = sys.executable, *, iters: int = 20, trials: int = 5) -> list[tuple[str, str, str]]:
    """(status, what, detail) per check; status is PASS, FAIL or SKIP."""
    from toolkit.errors import PatchbenchError
    from toolkit.kernels.measure import Settings, check_op, measure
    from toolkit.kernels.registry import get_op
    from toolkit.kernels.shapes import Shape

    out: list[tuple[str, str, str]] = []
    settings = Settings(warmup=5, iters=iters, trials=trials, device="cuda")
    test = get_op("test.matmul")
    shapes = [Shape({"m": m, "n": n, "k": k}, label) for label, n, k in GLM5_TP8 for m in MS]
    try:
        res = measure(python, test, shapes, backend="torch", settings=settings, environ=_environ())
    except PatchbenchError as exc:
        return [("FAIL", "test.matmul on cuda", str(exc))]
    gpu = res.get("gpu", "?")
    for r in res["results"]:
        what = f"test.matmul cuda {r['label']} {r['shape']}"
        if r["status"] != "ok":
            out.append(("FAIL", what, r.get("error", "")))
            continue
        med = statistics.median(statistics.median(t) for t in r["times_ms"])
        good = (r["correctness"]["verdict"] == "ok" and r["flushes"] == iters * trials and med > 0
                and res["flush_bytes"] >= 2 << 20)
        out.append(("PASS" if good else "FAIL", what,
                    f"{med * 1e3:.1f} us on {gpu}, flush {res['flush_bytes'] >> 20} MiB x {r['flushes']}, "
                    f"check {r['correctness']['verdict']} (max rel err {r['correctness']['max_relative_error']:.2e})"))
    broken = measure(python, test, shapes[:3], backend="torch", settings=settings,
                     environ=_environ(PATCHBENCH_TEST_OP_ZEROS_FROM_M="8"))
    flagged = {r["shape"]["m"]: r["correctness"]["verdict"] for r in broken["results"] if r["status"] == "ok"}
    want = {1: "ok", 16: "all-zero", 128: "all-zero"}
    out.append(("PASS" if flagged == want else "FAIL", "zeros for M >= 8 are flagged", str(flagged)))

    mm = get_op("flashinfer.mm_fp4")
    try:
        info = check_op(python, mm, _environ())
    except PatchbenchError as exc:
        return out + [("SKIP", "flashinfer.mm_fp4", f"not in this interpreter: {exc}")]
    backends = info.get("backends") or []
    for why in (info.get("not_offered") or {}).values():
        out.append(("SKIP", "mm_fp4 backend not offered", why))
    if not backends:
        return out + [("SKIP", "flashinfer.mm_fp4",
                       f"FlashInfer {info.get('versions', {}).get('flashinfer-python', '?')} offers no FP4 GEMM "
                       f"backend on {info.get('gpu')} (compute capability {info.get('capability')})")]
    for backend in backends:
        try:
            res = measure(python, mm, shapes, backend=backend, settings=settings, environ=_environ())
        except PatchbenchError as exc:
            out.append(("FAIL", f"mm_fp4 [{backend}]", str(exc)))
            continue
        for r in res["results"]:
            what = f"mm_fp4 [{backend}] {r['label']} {r['shape']}"
            if r["status"] == "skipped":
                out.append(("SKIP", what, r.get("error", "")))
                continue
            if r["status"] != "ok":
                out.append(("FAIL", what, r.get("error", "")[:300]))
                continue
            c = r["correctness"]
            med = statistics.median(statistics.median(t) for t in r["times_ms"])
            tflops = 2 * r["shape"]["m"] * r["shape"]["n"] * r["shape"]["k"] / (med * 1e-3) / 1e12
            out.append(("PASS" if c["verdict"] == "ok" else "FAIL", what,
                        f"{med * 1e3:.1f} us ({r.get('timing')}; autotune "
                        f"{(res.get('configuration') or {}).get('autotune')}), {tflops:.3g} TFLOPS, "
                        f"{(r.get('transient_alloc_bytes') or 0) / 2**20:.2f} MiB allocated per call, "
                        f"check {c['verdict']} (max rel err "
                        f"{c['max_relative_error']:.2e}, {100 * c['within_tolerance']:.1f}% within tolerance, "
                        f"reference input cos {c.get('reference_input_cos', float('nan')):.4f})"))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable, help="interpreter with CUDA torch (+ FlashInfer)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--trials", type=int, default=5)
    args = ap.parse_args(argv)
    results = checks(args.python, iters=args.iters, trials=args.trials)
    for status, what, detail in results:
        print(f"{status} {what}: {detail}", flush=True)
    return 1 if any(s == "FAIL" for s, _, _ in results) else 0


if __name__ == "__main__":
    sys.exit(main())
