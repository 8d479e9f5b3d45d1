"""The miniature's optional real decode work: one MoE block's worth of torch ops per step.

Off by default (the miniature stays standard-library only). `--mini-torch-step` (or env
`SGLANG_MINI_TORCH_STEP=1`) makes every forward step run, before the cost model paces it, the
shapes of a small MoE transformer for each running sequence:

    per layer:  rmsnorm -> qkv projection (GEMM) -> attention over a KV cache (two batched matmuls and
                a softmax) -> o projection (GEMM) -> all-reduce stand-in -> rmsnorm -> router GEMM +
                top-k -> for each selected expert: gate_up GEMM, silu_and_mul, down GEMM
    then:       lm_head GEMM (over the last layer's expert output) -> sampling (softmax, multinomial)

Given the running requests (`rows`: each one's previous token, prompt seed and position), the step
also *decides their tokens*: each row's input is the embedding of its previous token plus a
position vector drawn from its prompt seed (other bits of it than the first token's), and its next token is the greedy argmax of the lm_head
(returned with its log-probability). So the text the server returns depends on this computation:
a patch that changes the expert GEMMs changes the answers, and one that zeroes them makes every
row's logits zero (argmax 0: one token repeated). Each row is computed independently of the others
(its KV cache is the same fixed block whatever the batch), so a correct step answers the same at
batch 1 and batch 16, up to floating-point differences between GEMM shapes.

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
        self.embed = torch.randn(VOCAB, HIDDEN, generator=g).to(self.device, dtype)
        self.position = torch.randn(VOCAB, HIDDEN, generator=g).to(self.device, dtype)
        kv = (1, HEADS, KV_CONTEXT, HIDDEN // HEADS)
        self.kv = tuple(torch.randn(*kv, generator=g).to(self.device, dtype) for _ in range(2))
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

    def _row_inputs(self, rows):
        """Hidden states of real rows: embedding of the previous token + a position vector."""
        t = self.torch
        prev = t.tensor([r[0] % VOCAB for r in rows], device=self.device)
        pos = t.tensor([(r[1] // VOCAB + 7919 * r[2]) % VOCAB for r in rows], device=self.device)
        x = self.embed[prev] + self.position[pos]
        k_cache, v_cache = (c.expand(len(rows), -1, -1, -1) for c in self.kv)
        return x, k_cache, v_cache

    def run(self, batch: int, rows=None):
        """One step for `batch` sequences. With `rows` ((previous token, prompt seed, position) per
        sequence): return each row's greedy token (an lm_head index) and its log-probability."""
        if batch < 1:
            return []
        t = self.torch
        rf = t.profiler.record_function
        with t.inference_mode():
            x, k_cache, v_cache = self._inputs(batch) if rows is None else self._row_inputs(rows)
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
                logits = self._rmsnorm(out, self.layers[-1]["norm1"]) @ self.lm_head
            with rf("mini::sampling"):
                logp = t.log_softmax(logits.float(), dim=-1)
                t.multinomial(logp.exp(), 1)
                best, token = logp.max(dim=-1)
            if self.device.type == "cuda":
                t.cuda.synchronize()
            if rows is None:
                return None
            return list(zip(token.tolist(), best.tolist()))
