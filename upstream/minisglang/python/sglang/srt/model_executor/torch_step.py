"""The miniature's optional real decode work: one MoE block's worth of torch ops per step.

Off by default (the miniature stays standard-library only). `--mini-torch-step` (or env
`SGLANG_MINI_TORCH_STEP=1`) makes every forward step run, before the cost model paces it, the
shapes of a small MoE transformer for each running sequence:

    per layer:  rmsnorm -> qkv projection (GEMM) -> attention over a KV cache (two batched matmuls and
                a softmax) -> o projection (GEMM) -> all-reduce stand-in -> rmsnorm -> router GEMM +
                top-k -> for each selected expert: gate_up GEMM, silu_and_mul, down GEMM
    then:       lm_head GEMM -> sampling (softmax, multinomial)

Each piece runs inside a `torch.profiler.record_function` scope named after the sglang kernel
family it stands for (`mini::...`), so a profiler trace of the miniature reads like one of sglang's:
the scopes are what patchbench's kernel-family rules classify on a CPU trace (there are no CUDA
kernels there), and on a GPU the same scopes appear as `gpu_user_annotation` spans over the kernels.

The sizes below are the knobs a patch turns (e.g. a smaller EXPERT_INTERMEDIATE makes the expert
GEMMs cheaper and nothing else). The real work is timed as it happens; the cost model still paces
the step, so a step lasts max(real work, cost model).
"""

from __future__ import annotations

from typing import Optional

HIDDEN = 256
HEADS = 8
LAYERS = 2
N_EXPERTS = 8
TOP_K = 2
EXPERT_INTERMEDIATE = 768
VOCAB = 2048
KV_CONTEXT = 128  # tokens of KV cache each sequence attends over
WEIGHT_DTYPE = "float32"  # CPU GEMMs: float32 (bf16 on CPU is emulated on many x86 parts)
SEED = 0


class TorchStep:
    """Weights made once (seeded); `run(batch)` does one decode step's work for `batch` sequences."""

    def __init__(self, device: Optional[str] = None):
        import torch

        self.torch = torch
        torch.set_num_threads(1)  # one "stream": steady timings on a shared machine
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        dtype = torch.bfloat16 if self.device.type == "cuda" else getattr(torch, WEIGHT_DTYPE)
        self.dtype = dtype
        g = torch.Generator(device="cpu").manual_seed(SEED)

        def w(*shape):
            return (torch.randn(*shape, generator=g) / shape[0] ** 0.5).to(self.device, dtype)

        self.layers = []
        for _ in range(LAYERS):
            self.layers.append({
                "norm1": torch.ones(HIDDEN, device=self.device, dtype=dtype),
                "norm2": torch.ones(HIDDEN, device=self.device, dtype=dtype),
                "qkv": w(HIDDEN, 3 * HIDDEN),
                "o": w(HIDDEN, HIDDEN),
                "router": w(HIDDEN, N_EXPERTS),
                "gate_up": [w(HIDDEN, 2 * EXPERT_INTERMEDIATE) for _ in range(N_EXPERTS)],
                "down": [w(EXPERT_INTERMEDIATE, HIDDEN) for _ in range(N_EXPERTS)],
            })
        self.lm_head = w(HIDDEN, VOCAB)
        self.inputs = {}  # batch -> (hidden states, K cache, V cache), made on first use

    def _inputs(self, batch: int):
        """The same hidden states every step at a given batch: the same experts are routed to,
        so step-to-step variation is the machine's, not the routing's."""
        if batch not in self.inputs:
            t = self.torch
            g = t.Generator(device="cpu").manual_seed(SEED + batch)
            shape = (batch, HEADS, KV_CONTEXT, HIDDEN // HEADS)
            self.inputs[batch] = tuple(t.randn(*s, generator=g).to(self.device, self.dtype)
                                       for s in ((batch, HIDDEN), shape, shape))
        return self.inputs[batch]

    def _rmsnorm(self, x, weight):
        with self.torch.profiler.record_function("mini::rmsnorm"):
            var = x.pow(2).mean(-1, keepdim=True)
            return x * self.torch.rsqrt(var + 1e-6) * weight

    def run(self, batch: int) -> None:
        if batch < 1:
            return
        t = self.torch
        rf = t.profiler.record_function
        with t.inference_mode():
            x, k_cache, v_cache = self._inputs(batch)
            for layer in self.layers:
                h = self._rmsnorm(x, layer["norm1"])
                with rf("mini::dense_gemm_bf16[qkv_proj]"):
                    qkv = h @ layer["qkv"]
                with rf("mini::attention_decode"):
                    q = qkv[:, :HIDDEN].reshape(batch, HEADS, 1, HIDDEN // HEADS)
                    scores = t.matmul(q, k_cache.transpose(-1, -2)) / (HIDDEN // HEADS) ** 0.5
                    ctx = t.matmul(t.softmax(scores, dim=-1), v_cache).reshape(batch, HIDDEN)
                with rf("mini::dense_gemm_bf16[o_proj]"):
                    h = ctx @ layer["o"]
                with rf("mini::all_reduce"):
                    # A two-rank sum standing in for the tensor-parallel all-reduce.
                    h = t.stack((h, h)).sum(0) * 0.5
                x = x + h
                h = self._rmsnorm(x, layer["norm2"])
                with rf("mini::moe_gate_topk"):
                    logits = h @ layer["router"]
                    weights, experts = t.topk(t.softmax(logits, dim=-1), TOP_K, dim=-1)
                out = t.zeros_like(h)
                with rf("mini::fused_moe_experts"):
                    for e in experts.unique().tolist():
                        rows, slot = (experts == e).nonzero(as_tuple=True)
                        gu = h[rows] @ layer["gate_up"][e]
                        # the activation is fused into the expert GEMMs (as in cutlass_fused_moe)
                        act = t.nn.functional.silu(gu[:, :EXPERT_INTERMEDIATE]) * gu[:, EXPERT_INTERMEDIATE:]
                        y = act @ layer["down"][e]
                        out.index_add_(0, rows, y * weights[rows, slot].unsqueeze(-1))
                with rf("mini::all_reduce"):
                    out = t.stack((out, out)).sum(0) * 0.5
                x = x + out
            with rf("mini::dense_gemm_bf16[lm_head]"):
                logits = self._rmsnorm(x, self.layers[-1]["norm1"]) @ self.lm_head
            with rf("mini::sampling"):
                probs = t.softmax(logits.float(), dim=-1)
                t.multinomial(probs, 1)
            if self.device.type == "cuda":
                t.cuda.synchronize()
