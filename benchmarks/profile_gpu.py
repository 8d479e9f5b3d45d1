"""The profile path on a CUDA GPU (benchmarks/profile_gpu.py): under 5 minutes, never in CI.

Launches the miniature from source with its torch step on the GPU (`--mini-torch-step`: bf16
weights on `cuda`), drives a steady decode load at --concurrency, records --steps steps through
`POST /start_profile` with activities CPU + GPU (torch's CUDA profiler, CUPTI), and analyses the
trace the server wrote: it must be a GPU trace (CUDA kernels), each kernel scoped by the
miniature's `gpu_user_annotation` spans, >= 95% of kernel time classified into families, and the
families (idle included) must add up to the step. Prints the per-family table; exit 0 on success.

Needs: an interpreter with a CUDA build of torch and patchbench's dependencies (aiohttp, rich);
profiling allowed for this user (NVreg_RestrictProfilingToAdminUsers=0, or root).

    python benchmarks/profile_gpu.py --steps 20 --concurrency 8 [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MINI_PY = ROOT / "upstream" / "minisglang" / "python"


def _wait(url: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health_generate", timeout=10) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit("server not ready in time")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--out", default=None, help="keep the trace here (default: a temporary directory)")
    args = ap.parse_args(argv)

    try:
        import torch
    except ImportError:
        print("needs torch (a CUDA build) in this interpreter", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to do", file=sys.stderr)
        return 2
    from rich.console import Console

    from toolkit.run.bench.serving import ServingConfig
    from toolkit.profile.breakdown import breakdown, classified_share
    from toolkit.profile.capture import PROFILE_FIELDS_0523, capture, profile_body
    from toolkit.profile.families import load_families
    from toolkit.profile.render import render
    from toolkit.profile.session import summarize
    from toolkit.profile.trace import load_trace
    from toolkit.run.server import free_port

    console = Console()
    work = Path(args.out or tempfile.mkdtemp(prefix="patchbench-gpu-profile-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(MINI_PY)}
    log = open(work / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--model-path", "mini", "--port", str(port),
                             "--mini-torch-step", "--mini-step-base-ms", "1"], stdout=log, stderr=subprocess.STDOUT,
                            env=env, start_new_session=True)
    try:
        _wait(url, proc, 180)
        cfg = ServingConfig(input_len=64, output_len=2 * args.steps + 32, concurrency=(args.concurrency,),
                            num_prompts=2 * args.concurrency, warmup=0)
        body = profile_body(PROFILE_FIELDS_0523, output_dir=str(work / "profile"), num_steps=args.steps,
                            profile_id="gpu", gpu=True)
        cap = capture(url, cfg, body, args.steps, work / "profile", timeout=240, console=console)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(30)
        log.close()
    if cap.errors or not cap.traces:
        print(f"FAIL: {cap.errors or 'no trace'}", file=sys.stderr)
        return 1
    fams = load_families()
    trace = load_trace(cap.traces[0])
    b = breakdown(trace, fams)
    share = classified_share(trace, fams)
    itl = next((s.value for p in cap.points for s in p.to_samples() if s.metric == "itl_ms_median"), None)
    for item in render("minisglang (GPU)", fams, summarize(cap.traces, fams, itl), None):
        console.print(item)
    total = sum(b.family_ms().values()) - b.overlap_ms
    ok = trace.has_gpu_kernels and b.steps and share >= 0.95 and abs(total / b.step_ms - 1) <= 0.10
    console.print(f"GPU kernels: {trace.has_gpu_kernels}; decode steps: {len(b.steps)}; classified {100 * share:.1f}% "
                  f"of kernel time; trace {cap.traces[0]} -> {'PASS' if ok else 'FAIL'}")
    if not args.out:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
