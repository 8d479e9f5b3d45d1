"""patchbench: time one kernel op over a list of shapes inside an env, and check every shape against a
reference computed from the same quantized inputs (one JSON object on the last line of stdout).

Run by `toolkit.kernels.measure` with the env's own interpreter (its torch, its FlashInfer, its JIT
workspace, the recipe's server environment); imports only the standard library and what the env has.
Job (a JSON file named on the command line):

    {"mode": "check" | "run", "op": NAME, "backend": NAME | null, "shapes": [{...}, ...],
     "warmup": 10, "iters": 50, "trials": 5, "flush_mb": null, "seed": 0, "autotune": true,
     "cuda_graph": true, "server": {"use_fused_finalize": false, "tune_max_num_tokens": 8192},
     "rtol": .., "atol": .., "min_within": .., "device": null | "cpu" | "cuda"}

`check` imports the op and lists the backends the env offers for the probe's call (no kernel runs,
no GPU needed), with the backends it leaves out and why (`not_offered`); `run` measures. Per shape:
build inputs; a shape the backend cannot take in the probe's call is not run and says why
(status "skipped"); the first warmup call inside FlashInfer's autotuner context, as sglang 0.5.23
tunes FlashInfer ops before serving (flashinfer.autotuner.autotune(True) with autotune_v2(mode="tune",
persistent_cache=False)), the rest after it, using the tuned tactics; then one call captured in a
CUDA graph, as sglang's decode runs it, so the Python wrapper's dispatch stays out of the timed
region (eager calls, said in `timing`, when capture fails or on CPU); `trials` x `iters` timed calls
(graph replays), each after a write to a buffer larger than the L2 cache (cold L2), timed with CUDA
events (wall clock on CPU); then one more call is checked against the fp32 reference: max abs/rel
error, share of elements within `atol * max|ref| + rtol * |ref|`, all-zero and non-finite outputs
called out. `configuration` in the result says how the call was made (what sglang's runner passes,
and what this FlashInfer did not accept).

Ops (one entry each in OPS; the host side's facts are in toolkit/kernels/registry.py):
- `flashinfer.mm_fp4`: NVFP4 GEMM out[M,N] = A[M,K] @ B[N,K]^T, A and B quantized with
  FlashInfer's own fp4 quantizer (E2M1, one E4M3 scale per 16 values in the 128x4 swizzled layout,
  one fp32 global scale each, so one scalar alpha); the reference dequantizes those very bytes and
  multiplies in fp32. Backends whose requirements this call cannot meet are left out (CALL_LIMITS).
- `flashinfer.cutlass_fused_moe`: the NVFP4 grouped MoE (gate/up GEMM, SiLU-and-mul, down GEMM,
  weighted sum over top-k) that sglang's flashinfer_cutlass MoE runner calls, with the runner's
  `use_fused_finalize` (SGLANG_FLASHINFER_MOE_FUSED_FINALIZE, default False; FlashInfer's own default
  is True) and `tune_max_num_tokens` (from the job: the host computes it as the runner does).
- `test.matmul`: bf16 matmul with torch (CPU or CUDA); `PATCHBENCH_TEST_OP_ZEROS_FROM_M=8` in the
  environment makes it return zeros for M >= 8, the failure FlashInfer #3398 showed on SM120.
"""

import inspect
import json
import os
import sys
import typing

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # kernel_timing.py beside this file (run with -I)
from kernel_timing import Flusher, autotuner, capture, check_output, time_calls, warm_up  # noqa: E402

E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
FP4_GLOBAL = 448.0 * 6.0  # E4M3 max x E2M1 max: the global scale that maps amax onto the fp4 grid


# ------------------------------------------------------------------------------------- nvfp4 helpers


def _unswizzle(sf, rows, sf_cols):
    """Scale factors in CUTLASS's 128x4 swizzled layout -> [rows, sf_cols] (row-major)."""
    mt, kt = -(-rows // 128), -(-sf_cols // 4)
    flat = sf.reshape(-1)[: mt * kt * 512]
    return flat.reshape(mt, kt, 32, 4, 4).permute(0, 3, 2, 1, 4).reshape(mt * 128, kt * 4)[:rows, :sf_cols]


def dequant_nvfp4(torch, q, sf, global_scale, rows, cols, block=16):
    """fp32 values of packed E2M1 bytes `q` [rows, cols/2] with swizzled E4M3 block scales `sf`."""
    q = q.view(torch.uint8).reshape(rows, cols // 2)
    lut = torch.tensor(E2M1, dtype=torch.float32, device=q.device)
    vals = torch.stack((lut[(q & 0xF).long()], lut[(q >> 4).long()]), dim=-1).reshape(rows, cols)
    if sf.element_size() == 1 and sf.dtype != torch.float8_e4m3fn:
        sf = sf.view(torch.float8_e4m3fn)
    scales = _unswizzle(sf, rows, cols // block).float() / float(global_scale)
    return (vals.reshape(rows, cols // block, block) * scales.unsqueeze(-1)).reshape(rows, cols)


def _cos(torch, a, b):
    a, b = a.float().reshape(-1), b.float().reshape(-1)
    den = float(a.norm() * b.norm())
    return float((a * b).sum()) / den if den else 0.0


def _round_up(x, y):
    return -(-x // y) * y


def _fp4_quantize(fi, torch, x, gs):
    """FlashInfer's own NVFP4 quantizer, scales in the 128x4 swizzled layout: (packed bytes [rows,
    cols/2], scales [round_up(rows, 128), round_up(cols/16, 4)])."""
    rows, cols = x.shape
    if hasattr(fi, "nvfp4_quantize") and hasattr(fi, "SfLayout"):
        q, sf = fi.nvfp4_quantize(x, gs, sfLayout=fi.SfLayout.layout_128x4, do_shuffle=False)
    else:
        q, sf = fi.fp4_quantize(x, gs)
    return q, sf.reshape(_round_up(rows, 128), _round_up(cols // 16, 4))


# ------------------------------------------------------------------- what the probe's calls can take

# mm_fp4 backends (FlashInfer 0.7.x, SM100/SM103) whose requirements the probe's call cannot meet at
# some or all shapes: backend -> (why, shape -> runnable; None: at no shape). The call passes one
# scalar alpha (one global scale per operand, as sglang's NVFP4 linear layers do), 128x4 scales.
CALL_LIMITS = {
    "cake": ("per-row alpha only (alpha of shape [M]); the probe's call passes one scalar alpha", None),
    "cutedsl_low_latency": ("M <= 8 and K divisible by 64 only", lambda shape: shape["m"] <= 8 and shape["k"] % 64 == 0),
}


def call_limit(backend, shape):
    """Why `backend` cannot take the probe's call at `shape` (None: it can)."""
    limit = CALL_LIMITS.get(backend)
    if limit is None or (limit[1] is not None and limit[1](shape)):
        return None
    return f"{backend}: {limit[0]}"


def never_runs(backend):
    """Why `backend` cannot take the probe's call at any shape (None: at some it can)."""
    limit = CALL_LIMITS.get(backend)
    return f"{backend}: {limit[0]}" if limit is not None and limit[1] is None else None


def accepted(fn, wanted):
    """(the keyword arguments of `wanted` that `fn` takes, {name: why not} for the others)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return dict(wanted), {}
    taken = {k: v for k, v in wanted.items() if k in params}
    return taken, {k: "not an argument of this FlashInfer's call" for k in wanted if k not in params}


# ----------------------------------------------------------------------------------------------- ops


class TestMatmul:
    """bf16 out = A @ B^T with torch; the reference is fp32 on the same bf16 inputs."""

    name = "test.matmul"
    dims = ("m", "n", "k")
    tunable = False

    def __init__(self, torch, device, server=None):
        self.torch, self.device = torch, device
        self.configuration = {}

    def backends(self):
        return ["torch"]

    def build(self, shape, backend, seed):
        torch = self.torch
        g = torch.Generator(device="cpu").manual_seed(seed)
        m, n, k = shape["m"], shape["n"], shape["k"]
        a = torch.randn(m, k, generator=g).to(torch.bfloat16).to(self.device)
        b = torch.randn(n, k, generator=g).to(torch.bfloat16).to(self.device)
        zeros_from = int(os.environ.get("PATCHBENCH_TEST_OP_ZEROS_FROM_M", "0") or 0)
        return {"a": a, "b": b, "broken": bool(zeros_from) and m >= zeros_from,
                "out": torch.empty(m, n, dtype=torch.bfloat16, device=self.device)}

    def call(self, st):
        self.torch.matmul(st["a"], st["b"].t(), out=st["out"])
        if st["broken"]:
            st["out"].zero_()
        return st["out"]

    def reference(self, st):
        return st["a"].float() @ st["b"].float().t(), {}


class MmFp4:
    """FlashInfer's NVFP4 GEMM, one backend at a time."""

    name = "flashinfer.mm_fp4"
    dims = ("m", "n", "k")
    KNOWN = ("cudnn", "trtllm", "cutlass", "cute-dsl", "b12x")
    tunable = True

    def __init__(self, torch, device, server=None):
        import flashinfer

        self.torch, self.device, self.fi = torch, device, flashinfer
        self.fn = getattr(flashinfer, "mm_fp4", None) or getattr(flashinfer.gemm, "mm_fp4")
        self.configuration = {"alpha": "scalar (one global scale per operand)", "scale_layout": "128x4",
                              "block_size": 16}
        self.not_offered = {}

    def backends(self):
        """The backends FlashInfer offers on this GPU that can take the probe's call at some shape;
        the others land in `not_offered` with the reason."""
        offered = []
        for b in self.offered_by_flashinfer():
            why = never_runs(b)
            if why:
                self.not_offered[b] = why
            else:
                offered.append(b)
        return offered

    def offered_by_flashinfer(self):
        offered = list(self.KNOWN)
        try:
            ann = inspect.signature(self.fn).parameters["backend"].annotation
            args = [a for a in typing.get_args(ann) if isinstance(a, str)]
            if args:
                offered = args
        except (KeyError, TypeError, ValueError):
            pass
        offered = [b for b in offered if b != "auto"]
        check = getattr(self.fn, "is_backend_supported", None)
        if self.device == "cuda" and check is not None:
            cc = self.torch.cuda.get_device_capability()
            offered = [b for b in offered if _safe(lambda: check(b, cc[0] * 10 + cc[1]))]
        return offered

    def build(self, shape, backend, seed):
        torch, fi = self.torch, self.fi
        m, n, k = shape["m"], shape["n"], shape["k"]
        g = torch.Generator(device="cpu").manual_seed(seed)
        a = torch.randn(m, k, generator=g).to(torch.bfloat16).to(self.device)
        b = torch.randn(n, k, generator=g).to(torch.bfloat16).to(self.device)
        ga = FP4_GLOBAL / a.float().abs().max()  # 0-dim fp32 global scales, as FlashInfer's tests pass them
        gb = FP4_GLOBAL / b.float().abs().max()
        a_q, a_sf = _fp4_quantize(fi, torch, a, ga)
        b_q, b_sf = _fp4_quantize(fi, torch, b, gb)
        call_b_q, call_b_sf = b_q, b_sf
        if backend == "trtllm":  # trtllm swaps A and B and wants B shuffled
            call_b_q, call_b_sf = fi.nvfp4_quantize(b, gb, sfLayout=fi.SfLayout.layout_128x4, do_shuffle=True)
        kwargs = {"block_size": 16, "use_8x4_sf_layout": False, "backend": backend}
        if "use_nvfp4" in inspect.signature(self.fn).parameters:
            kwargs["use_nvfp4"] = True
        return {"args": (a_q, call_b_q.T, a_sf, call_b_sf.T, (1.0 / (ga * gb)).float(), torch.bfloat16),
                "kwargs": kwargs, "out": torch.empty(m, n, dtype=torch.bfloat16, device=self.device),
                "ref": (a, b, a_q, a_sf, ga, b_q, b_sf, gb), "shape": (m, n, k)}

    def call(self, st):
        self.fn(*st["args"], st["out"], **st["kwargs"])
        return st["out"]

    def reference(self, st):
        torch = self.torch
        a, b, a_q, a_sf, ga, b_q, b_sf, gb = st["ref"]
        m, n, k = st["shape"]
        ad = dequant_nvfp4(torch, a_q, a_sf, ga, m, k)
        bd = dequant_nvfp4(torch, b_q, b_sf, gb, n, k)
        return ad @ bd.t(), {"reference_input_cos": min(_cos(torch, ad, a), _cos(torch, bd, b))}


class CutlassFusedMoe:
    """FlashInfer's NVFP4 grouped MoE (cutlass_fused_moe) for one GPU's share of the experts."""

    name = "flashinfer.cutlass_fused_moe"
    dims = ("tokens", "experts", "top_k", "hidden", "inter")
    tunable = True

    def __init__(self, torch, device, server=None):
        import flashinfer
        import flashinfer.fused_moe

        self.torch, self.device, self.fi = torch, device, flashinfer
        self.fn = flashinfer.fused_moe.cutlass_fused_moe
        server = dict(server or {})
        wanted = {"use_fused_finalize": bool(server.get("use_fused_finalize", False))}
        tune = server.get("tune_max_num_tokens")
        if tune:  # "per-call": next power of two of the call's tokens (sglang's PD decode servers)
            wanted["tune_max_num_tokens"] = tune if tune == "per-call" else int(tune)
        self.kwargs, refused = accepted(self.fn, wanted)
        self.configuration = {**self.kwargs, **({"not_passed": refused} if refused else {})}

    def backends(self):
        return ["cutlass"]

    def build(self, shape, backend, seed):
        torch, fi = self.torch, self.fi
        t, e, topk, h, i = (shape[d] for d in self.dims)
        g = torch.Generator(device="cpu").manual_seed(seed)
        dev = self.device
        x = torch.randn(t, h, generator=g).to(torch.bfloat16).to(dev)
        w1 = (torch.randn(e, 2 * i, h, generator=g) / 10).to(torch.bfloat16).to(dev)
        w2 = (torch.randn(e, h, i, generator=g) / 10).to(torch.bfloat16).to(dev)
        w1_gs = torch.stack([FP4_GLOBAL / w1[j].float().abs().max() for j in range(e)]).float()
        w2_gs = torch.stack([FP4_GLOBAL / w2[j].float().abs().max() for j in range(e)]).float()
        q1 = [_fp4_quantize(fi, torch, w1[j], w1_gs[j]) for j in range(e)]
        q2 = [_fp4_quantize(fi, torch, w2[j], w2_gs[j]) for j in range(e)]
        w1_q = torch.stack([q for q, _ in q1]).contiguous()  # [E, 2I, H/2]
        w1_sf = torch.stack([s for _, s in q1]).contiguous()  # [E, round_up(2I, 128), round_up(H/16, 4)]
        w2_q = torch.stack([q for q, _ in q2]).contiguous()
        w2_sf = torch.stack([s for _, s in q2]).contiguous()
        sel = torch.rand(t, e, generator=g).topk(topk, dim=1).indices.to(torch.int32).to(dev)
        weights = torch.softmax(torch.randn(t, topk, generator=g), dim=1).float().to(dev)
        one = torch.ones((), dtype=torch.float32, device=dev)
        scales = [one, w1_sf.view(torch.int32), (1.0 / w1_gs), one, w2_sf.view(torch.int32), (1.0 / w2_gs)]
        kwargs = dict(self.kwargs)
        if kwargs.get("tune_max_num_tokens") == "per-call":
            kwargs["tune_max_num_tokens"] = 1 << (t - 1).bit_length()
        return {"kwargs": kwargs, "x": x, "sel": sel, "weights": weights, "w1": w1_q.view(torch.long),
                "w2": w2_q.view(torch.long),
                "scales": scales, "out": torch.empty(t, h, dtype=torch.bfloat16, device=dev),
                "ref": (w1_q, w1_sf, w1_gs, w2_q, w2_sf, w2_gs), "dims": (t, e, topk, h, i)}

    def call(self, st):
        self.fn(st["x"], st["sel"], st["weights"], st["w1"], st["w2"], self.torch.bfloat16,
                quant_scales=st["scales"], output=st["out"], **st["kwargs"])
        return st["out"]

    def reference(self, st):
        torch, fi = self.torch, self.fi
        w1_q, w1_sf, w1_gs, w2_q, w2_sf, w2_gs = st["ref"]
        t, e, topk, h, i = st["dims"]
        one = torch.ones((), dtype=torch.float32, device=self.device)
        xq, xsf = _fp4_quantize(fi, torch, st["x"], one)
        xd = dequant_nvfp4(torch, xq, xsf, 1.0, t, h)
        out = torch.zeros(t, h, dtype=torch.float32, device=self.device)
        for j in st["sel"].unique().tolist():
            rows, slot = torch.where(st["sel"] == j)
            w1d = dequant_nvfp4(torch, w1_q[j], w1_sf[j], float(w1_gs[j]), 2 * i, h)
            w2d = dequant_nvfp4(torch, w2_q[j], w2_sf[j], float(w2_gs[j]), h, i)
            a = xd[rows]
            inter = torch.nn.functional.silu(a @ w1d[i:].t()) * (a @ w1d[:i].t())
            iq, isf = _fp4_quantize(fi, torch, inter.to(torch.bfloat16), one)  # the kernel requantizes
            inter_d = dequant_nvfp4(torch, iq, isf, 1.0, inter.shape[0], i)
            out.index_add_(0, rows, st["weights"][rows, slot].unsqueeze(1) * (inter_d @ w2d.t()))
        return out, {"touched_experts": int(st["sel"].unique().numel()),
                     "reference_input_cos": _cos(torch, xd, st["x"])}


OPS = {op.name: op for op in (TestMatmul, MmFp4, CutlassFusedMoe)}


def _safe(fn):
    try:
        return bool(fn())
    except Exception:
        return False


# ------------------------------------------------------------------------------------ measurement


def measure_shape(torch, op, device, shape, job, flush):
    why = call_limit(job.get("backend"), shape) if isinstance(op, MmFp4) else None
    if why:
        return {"shape": shape, "status": "skipped", "error": f"not run: {why}"}
    st = op.build(shape, job.get("backend"), int(job.get("seed", 0)))
    flushed = flush.calls
    tuner, _ = autotuner(op, job)
    warm_up(torch, device, lambda: op.call(st), int(job["warmup"]), tuner)
    timed, timing = (lambda: op.call(st)), "eager calls (wall clock on CPU)" if device != "cuda" else None
    if device == "cuda":
        graph, failed = capture(torch, lambda: op.call(st)) if job.get("cuda_graph", True) else (None, "off")
        if graph is not None:
            timed, timing = graph.replay, "CUDA graph replay of one call (the Python wrapper's dispatch is not timed)"
        else:
            timing = f"eager calls, CUDA events (the wrapper's dispatch is timed): graph capture {failed}"
    times = time_calls(torch, device, timed, flush, 0, int(job["iters"]), int(job["trials"]))
    transient = None
    if device == "cuda":  # what one warm call allocates beyond its inputs (FlashInfer #4549: 34 MiB per call)
        torch.cuda.synchronize()
        held = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        op.call(st)
        torch.cuda.synchronize()
        transient = int(torch.cuda.max_memory_allocated() - held)
    out = op.call(st).clone()
    if device == "cuda":
        torch.cuda.synchronize()
    ref, extra = op.reference(st)
    corr = check_output(torch, out, ref, float(job["rtol"]), float(job["atol"]), float(job["min_within"]))
    if extra.get("reference_input_cos", 1.0) < 0.9:  # the dequantized inputs do not resemble the inputs
        corr["verdict"] = "reference-broken"
    corr.update(extra)
    return {"shape": shape, "status": "ok", "times_ms": times, "flushes": flush.calls - flushed,
            "transient_alloc_bytes": transient, "timing": timing, "correctness": corr}


def _device(torch, op, job):
    want = job.get("device")
    if want:
        return want
    if op is TestMatmul:
        return "cpu"
    return "cuda"


def _versions():
    import importlib.metadata as md

    out = {}
    for name in ("torch", "sglang", "flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return out


def main(path):
    with open(path) as fh:
        job = json.load(fh)
    cls = OPS.get(job["op"])
    if cls is None:
        return {"ok": False, "error": f"unknown op {job['op']!r}", "ops": sorted(OPS)}
    try:
        import torch
    except ImportError as exc:
        return {"ok": False, "error": f"torch is not importable in this env: {exc}"}
    device = _device(torch, cls, job)
    has_cuda = bool(torch.cuda.is_available())
    info = {"ok": True, "op": cls.name, "device": device, "versions": _versions(), "cuda_available": has_cuda,
            "python": sys.executable}
    if has_cuda:
        info["gpu"] = torch.cuda.get_device_name(0)
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    try:
        op = cls(torch, device if (device != "cuda" or has_cuda) else "cpu", job.get("server"))
        info["backends"] = op.backends()
        info["not_offered"] = dict(getattr(op, "not_offered", {}))
    except Exception as exc:  # the env lacks the op (an old FlashInfer, a missing module)
        return {**info, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
    info["configuration"] = {**op.configuration, "autotune": autotuner(op, job)[1]}
    if job.get("mode", "run") == "check":
        return info
    if device == "cuda" and not has_cuda:
        return {**info, "ok": False, "error": "no CUDA device visible to torch in this env"}
    op = cls(torch, device, job.get("server"))
    flush = Flusher(torch, device, job.get("flush_mb"))
    results = []
    for shape in job["shapes"]:
        try:
            results.append(measure_shape(torch, op, device, shape, job, flush))
        except Exception as exc:  # one shape failing (unsupported, out of memory) is a result too
            results.append({"shape": shape, "status": "error", "error": f"{type(exc).__name__}: {exc}"[:2000]})
            if device == "cuda":
                torch.cuda.empty_cache()
    return {**info, "backend": job.get("backend"), "flush_bytes": flush.nbytes, "results": results}


if __name__ == "__main__":
    result = main(sys.argv[1])
    sys.stdout.write("\n" + json.dumps(result, allow_nan=True, default=str) + "\n")
    sys.exit(0)
