"""patchbench: how the kernel probe (kernel_bench.py, beside this file) times a call: the cold-L2
flush, FlashInfer's autotuner context as sglang 0.5.23 enters it, a CUDA-graph capture of one call
(so the Python wrapper's dispatch stays out of the timed region), the timed loop, and the check of
an output against its fp32 reference. Runs inside an env: the standard library and the env's torch
and FlashInfer only.
"""

import contextlib
import time

DEFAULT_CPU_FLUSH_MB = 64


class Flusher:
    """Writes a buffer larger than the last-level cache, so every timed call starts with a cold L2."""

    def __init__(self, torch, device, flush_mb):
        if flush_mb is None:
            if device == "cuda":
                l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or (128 << 20)
                nbytes = 2 * int(l2)
            else:
                nbytes = DEFAULT_CPU_FLUSH_MB << 20
        else:
            nbytes = int(float(flush_mb) * (1 << 20))
        self.nbytes = nbytes
        self.calls = 0
        self.buf = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device)

    def __call__(self):
        self.buf.fill_(self.calls & 0xFF)
        self.calls += 1


def autotuner(op, job):
    """(the context sglang 0.5.23 tunes FlashInfer ops in, what it is): FlashInfer's autotune(True)
    with autotune_v2(mode="tune", persistent_cache=False); a null context when off or absent."""
    if not getattr(op, "tunable", False):
        return contextlib.nullcontext(), "not applicable (no FlashInfer tactic to choose)"
    if not job.get("autotune", True):
        return contextlib.nullcontext(), "off (--no-autotune): FlashInfer's default tactics, not the server's"
    try:
        from flashinfer.autotuner import autotune
    except ImportError:
        return contextlib.nullcontext(), "unavailable: this FlashInfer has no flashinfer.autotuner"
    try:
        from flashinfer import autotune_v2
    except ImportError:
        autotune_v2 = None
    said = "flashinfer.autotuner.autotune(True)" + (' + autotune_v2(mode="tune", persistent_cache=False)'
                                                   if autotune_v2 else "")
    return _tuning(autotune, autotune_v2), "on, over the first warmup call: " + said


@contextlib.contextmanager
def _tuning(autotune, autotune_v2):
    with autotune(True), (autotune_v2(mode="tune", persistent_cache=False) if autotune_v2 else contextlib.nullcontext()):
        yield


def capture(torch, fn):
    """(a CUDA graph of one call of `fn`, None) or (None, why it could not be captured)."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()  # one call on the capture stream first, as torch's capture recipe asks
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        torch.cuda.synchronize()
        return graph, None
    except Exception as exc:  # a backend that cannot be captured: timed eagerly, and said
        torch.cuda.synchronize()
        return None, f"{type(exc).__name__}: {exc}"[:300]


def warm_up(torch, device, fn, warmup, tuner):
    """`warmup` calls, the first inside the autotuner context (tuning happens there)."""
    with tuner:
        fn()
    for _ in range(max(warmup - 1, 0)):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()


def time_calls(torch, device, fn, flush, warmup, iters, trials):
    """Per trial, per iteration: milliseconds of one call after an L2 flush (`fn` is already warm
    when `warmup` is 0: a graph replay, say)."""
    cuda = device == "cuda"
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize()
    out = []
    for _ in range(trials):
        times = []
        if cuda:
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
            for start, end in events:
                flush()
                start.record()
                fn()
                end.record()
            torch.cuda.synchronize()
            times = [start.elapsed_time(end) for start, end in events]
        else:
            for _ in range(iters):
                flush()
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        out.append(times)
    return out


def check_output(torch, out, ref, rtol, atol, min_within):
    """Errors of `out` against the fp32 reference and the verdict."""
    o, r = out.float(), ref.float().to(out.device)
    finite = torch.isfinite(o)
    non_finite = int((~finite).sum())
    scale = float(r.abs().max()) if r.numel() else 0.0
    err = (o - r).abs()
    tol = atol * scale + rtol * r.abs()
    within = float((err <= tol).float().mean()) if r.numel() else 1.0
    denom = r.abs().clamp_min(max(atol * scale, 1e-30))
    res = {
        "max_abs_error": float(err[finite].max()) if bool(finite.any()) else float("nan"),
        "max_relative_error": float((err / denom)[finite].max()) if bool(finite.any()) else float("nan"),
        "within_tolerance": within,
        "non_finite": non_finite,
        "all_zero": bool(int(o.count_nonzero()) == 0 and scale > 0),
        "reference_max_abs": scale,
        "rtol": rtol, "atol": atol, "min_within": min_within,
    }
    if non_finite:
        res["verdict"] = "non-finite"
    elif res["all_zero"]:
        res["verdict"] = "all-zero"
    elif within < min_within:
        res["verdict"] = "wrong"
    else:
        res["verdict"] = "ok"
    return res
