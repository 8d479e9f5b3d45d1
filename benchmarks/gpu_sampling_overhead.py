"""What does sampling GPU state cost the serving client? (benchmarks/gpu_sampling_overhead.py)

Runs the miniature sglang server and drives it with patchbench's serving client, alternating
rounds with and without the GPU-state sampler (toolkit.run.gpustate.sampler) running in the
client's process at --interval (0.2 s, as during runs). Without a GPU the sampler reads a test
double of pynvml (tests/nvml_double.py) that answers like NVML from a recorded series; with
--real it reads the real NVML. Prints the client's output tok/s per round, then the ratio of the
medians against the named baseline "no sampling" (no sampling / sampling: 1.000x = free) and PASS
when it is <= --max-ratio (1.005x).

    python benchmarks/gpu_sampling_overhead.py --rounds 5 --concurrency 8
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
MINI_PY = ROOT / "upstream" / "minisglang" / "python"
sys.path.insert(0, str(ROOT / "benchmarks"))
from profile_gpu import _wait as wait_ready  # noqa: E402  (the benchmarks' one readiness wait)


def ratio_line(without: list[float], with_: list[float], max_ratio: float) -> tuple[float, str]:
    """(ratio, the line): median tok/s of the baseline "no sampling" over the median with sampling."""
    base, samp = statistics.median(without), statistics.median(with_)
    ratio = base / samp
    verdict = "PASS" if ratio <= max_ratio else "FAIL"
    return ratio, (f"{verdict} sampling every {{interval}} s: {samp:.1f} tok/s vs {base:.1f} tok/s for the baseline "
                   f"\"no sampling\": {ratio:.4f}x (limit {max_ratio}x)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="rounds of each, interleaved")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--interval", type=float, default=0.2)
    ap.add_argument("--gpus", type=int, default=8, help="GPUs the double pretends to have")
    ap.add_argument("--real", action="store_true", help="sample the real NVML (a GPU box)")
    ap.add_argument("--max-ratio", type=float, default=1.005)
    args = ap.parse_args(argv)

    from toolkit.run.bench.serving import ServingConfig, run_serving
    from toolkit.run.gpustate.sampler import Sampler
    from toolkit.run.server import free_port

    module = None
    if not args.real:
        from nvml_double import FakeNvml, gpu

        module = FakeNvml({"gpus": [gpu(i, n=50, sm=list(range(2350, 2400))) for i in range(args.gpus)]})
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    work = Path(tempfile.mkdtemp(prefix="patchbench-sampling-"))
    log = open(work / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--model-path", "mini", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(MINI_PY)},
                            start_new_session=True)
    cfg = ServingConfig(input_len=32, output_len=args.output_len, concurrency=(args.concurrency,),
                        num_prompts=4 * args.concurrency, warmup=1)
    rates: dict[bool, list[float]] = {False: [], True: []}
    ticks = 0
    try:
        wait_ready(url, proc, 120)
        run_serving(url, cfg)  # warm the server and the client's imports
        for r in range(args.rounds):
            for sampling in ((False, True) if r % 2 == 0 else (True, False)):
                sampler = Sampler(module=module, interval_s=args.interval).start() if sampling else None
                (point,) = run_serving(url, cfg)
                if sampler is not None:
                    record = sampler.stop()
                    if not record.get("available"):
                        raise SystemExit(f"no GPU state to sample: {record.get('reason')}")
                    ticks += len(record["t"])
                tok_s = next(s.value for s in point.to_samples() if s.metric == "output_tok_s")
                rates[sampling].append(tok_s)
                print(f"round {r} {'sampling   ' if sampling else 'no sampling'}: {tok_s:8.1f} tok/s", flush=True)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(30)
        log.close()
    ratio, line = ratio_line(rates[False], rates[True], args.max_ratio)
    print(f"{ticks} sampling ticks over {args.gpus if not args.real else 'the'} GPU(s) "
          f"({'real NVML' if args.real else 'pynvml test double'})")
    print(line.format(interval=args.interval))
    return 0 if ratio <= args.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
