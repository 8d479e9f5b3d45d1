"""Server arguments, with the same API shape as sglang's `sglang/srt/server_args.py`:

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    server_args = ServerArgs.from_cli_args(parser.parse_args(argv))

Flag names, aliases and field names follow sglang (`--tp-size`/`--tensor-parallel-size`,
`--ep-size`/`--expert-parallel-size`/`--ep`, ...). Unknown flags fail like argparse does (exit 2).
The `--mini-*` flags exist only in the miniature (test knobs); sglang has no such flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
from typing import List, Optional

MOE_RUNNER_BACKEND_CHOICES = [
    "auto",
    "deep_gemm",
    "triton",
    "triton_kernel",
    "flashinfer_trtllm",
    "flashinfer_cutlass",
    "flashinfer_mxfp4",
    "flashinfer_cutedsl",
    "cutlass",
]
MOE_A2A_BACKEND_CHOICES = ["none", "deepep", "mooncake", "ascend_fuseep"]
LOG_LEVEL_CHOICES = ["debug", "info", "warning", "error", "critical"]


def _env_int(name: str) -> Optional[int]:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else None


@dataclasses.dataclass
class ServerArgs:
    # Model and tokenizer
    model_path: str
    tokenizer_path: Optional[str] = None
    tokenizer_mode: str = "auto"
    load_format: str = "auto"
    trust_remote_code: bool = False
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    quantization: Optional[str] = None
    context_length: Optional[int] = None
    device: Optional[str] = None
    served_model_name: Optional[str] = None
    revision: Optional[str] = None

    # HTTP server
    host: str = "127.0.0.1"
    port: int = 30000
    skip_server_warmup: bool = False

    # Memory and scheduling
    mem_fraction_static: Optional[float] = None
    max_running_requests: Optional[int] = None
    max_total_tokens: Optional[int] = None
    chunked_prefill_size: Optional[int] = None
    max_prefill_tokens: int = 16384
    schedule_policy: str = "fcfs"
    stream_interval: int = 1

    # Runtime options
    random_seed: Optional[int] = None
    log_level: str = "info"
    log_requests: bool = False
    show_time_cost: bool = False
    enable_metrics: bool = False

    # Parallelism
    tp_size: int = 1
    pp_size: int = 1
    dp_size: int = 1
    attn_dp_size: int = 1
    ep_size: int = 1
    nnodes: int = 1
    node_rank: int = 0
    enable_dp_attention: bool = False

    # Kernel backends
    attention_backend: Optional[str] = None
    sampling_backend: Optional[str] = None
    moe_runner_backend: str = "auto"
    moe_a2a_backend: str = "none"

    # Optimizations
    disable_radix_cache: bool = False
    disable_cuda_graph: bool = False
    cuda_graph_max_bs: Optional[int] = None
    enable_torch_compile: bool = False
    enable_two_batch_overlap: bool = False
    enable_single_batch_overlap: bool = False
    enable_mscclpp: bool = False

    # Miniature-only test knobs (not sglang flags)
    mini_startup_s: float = 0.0
    mini_step_base_ms: Optional[float] = None
    mini_step_per_seq_us: Optional[float] = None
    mini_prefill_base_ms: Optional[float] = None
    mini_prefill_per_token_us: Optional[float] = None
    mini_crash_after_requests: Optional[int] = None
    mini_torch_step: bool = False

    def __post_init__(self):
        # Resolve defaults the way sglang does (in spirit): effective values, not None.
        if self.tokenizer_path is None:
            self.tokenizer_path = self.model_path
        if self.served_model_name is None:
            self.served_model_name = self.model_path
        if self.device is None:
            self.device = "cuda"
        if self.mem_fraction_static is None:
            self.mem_fraction_static = 0.88 if self.tp_size < 4 else 0.85
        if self.chunked_prefill_size is None:
            self.chunked_prefill_size = 8192
        # Attention DP as sglang 0.5.23 resolves it: the deprecated `--dp-size N --enable-dp-attention`
        # becomes attn_dp_size N with dp_size 1; enable_dp_attention reads set when attention DP
        # runs (and only then: the flag alone, at dp_size 1, reads false); each attention-DP rank
        # prefills chunked_prefill_size // attn_dp_size tokens.
        if self.enable_dp_attention and self.attn_dp_size == 1:
            self.attn_dp_size, self.dp_size = self.dp_size, 1
        if self.attn_dp_size < 1:
            raise ValueError(f"--attn-dp-size must be positive (got {self.attn_dp_size}).")
        if self.attn_dp_size > 1 and self.dp_size > 1:
            raise ValueError(f"--dp-size {self.dp_size} with --attn-dp-size {self.attn_dp_size}: data-parallel "
                             "replicas combined with attention data parallelism are not supported.")
        if self.attn_dp_size > 1:
            if self.tp_size % self.attn_dp_size:
                raise ValueError("tp_size must be divisible by attn_dp_size")
            self.chunked_prefill_size //= self.attn_dp_size
        self.enable_dp_attention = self.attn_dp_size > 1
        # As sglang 0.5.23's _handle_a2a_moe: an all-to-all MoE backend runs whole experts per rank,
        # so the expert-parallel size is set to the tensor-parallel size whatever --ep-size said.
        if self.moe_a2a_backend in ("deepep", "mooncake", "ascend_fuseep"):
            self.ep_size = self.tp_size
        if self.cuda_graph_max_bs is None:
            self.cuda_graph_max_bs = 0 if self.disable_cuda_graph else 256
        if self.random_seed is None:
            self.random_seed = random.randint(0, 1 << 30)
        if self.attention_backend is None:
            self.attention_backend = "flashinfer"
        if self.sampling_backend is None:
            self.sampling_backend = "flashinfer"
        if self.mini_crash_after_requests is None:
            self.mini_crash_after_requests = _env_int("SGLANG_MINI_CRASH_AFTER_REQUESTS")
        if not self.mini_torch_step:
            self.mini_torch_step = os.environ.get("SGLANG_MINI_TORCH_STEP", "").strip().lower() in (
                "1", "true", "yes")
        if self.stream_interval < 1:
            raise ValueError("stream_interval must be >= 1")

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser):
        d = ServerArgs
        # Model and tokenizer
        parser.add_argument("--model-path", "--model", dest="model_path", type=str, required=True,
                            help="The path of the model weights (a local folder or a Hugging Face repo id).")
        parser.add_argument("--tokenizer-path", type=str, default=d.tokenizer_path)
        parser.add_argument("--tokenizer-mode", type=str, default=d.tokenizer_mode, choices=["auto", "slow"])
        parser.add_argument("--load-format", type=str, default=d.load_format,
                            choices=["auto", "pt", "safetensors", "npcache", "dummy", "gguf", "bitsandbytes", "layered"])
        parser.add_argument("--trust-remote-code", action="store_true")
        parser.add_argument("--dtype", type=str, default=d.dtype,
                            choices=["auto", "half", "float16", "bfloat16", "float", "float32"])
        parser.add_argument("--kv-cache-dtype", type=str, default=d.kv_cache_dtype,
                            choices=["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"])
        parser.add_argument("--quantization", type=str, default=d.quantization)
        parser.add_argument("--context-length", type=int, default=d.context_length)
        parser.add_argument("--device", type=str, default=d.device)
        parser.add_argument("--served-model-name", type=str, default=d.served_model_name)
        parser.add_argument("--revision", type=str, default=d.revision)
        # HTTP server
        parser.add_argument("--host", type=str, default=d.host)
        parser.add_argument("--port", type=int, default=d.port)
        parser.add_argument("--skip-server-warmup", action="store_true")
        # Memory and scheduling
        parser.add_argument("--mem-fraction-static", type=float, default=d.mem_fraction_static)
        parser.add_argument("--max-running-requests", type=int, default=d.max_running_requests)
        parser.add_argument("--max-total-tokens", type=int, default=d.max_total_tokens)
        parser.add_argument("--chunked-prefill-size", type=int, default=d.chunked_prefill_size)
        parser.add_argument("--max-prefill-tokens", type=int, default=d.max_prefill_tokens)
        parser.add_argument("--schedule-policy", type=str, default=d.schedule_policy,
                            choices=["lpm", "random", "fcfs", "dfs-weight", "lof", "priority"])
        parser.add_argument("--stream-interval", type=int, default=d.stream_interval)
        # Runtime options
        parser.add_argument("--random-seed", type=int, default=d.random_seed)
        parser.add_argument("--log-level", type=str, default=d.log_level, choices=LOG_LEVEL_CHOICES)
        parser.add_argument("--log-requests", action="store_true")
        parser.add_argument("--show-time-cost", action="store_true")
        parser.add_argument("--enable-metrics", action="store_true")
        # Parallelism
        parser.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=d.tp_size)
        parser.add_argument("--pp-size", "--pipeline-parallel-size", dest="pp_size", type=int, default=d.pp_size)
        parser.add_argument("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=d.dp_size)
        parser.add_argument("--attn-dp-size", type=int, default=d.attn_dp_size)
        parser.add_argument("--ep-size", "--expert-parallel-size", "--ep", dest="ep_size", type=int,
                            default=d.ep_size)
        parser.add_argument("--nnodes", type=int, default=d.nnodes)
        parser.add_argument("--node-rank", type=int, default=d.node_rank)
        parser.add_argument("--enable-dp-attention", action="store_true")
        # Kernel backends
        parser.add_argument("--attention-backend", type=str, default=d.attention_backend,
                            choices=["flashinfer", "triton", "torch_native", "fa3", "fa4", "flashmla",
                                     "cutlass_mla", "trtllm_mla", "trtllm_mha", "aiter"])
        parser.add_argument("--sampling-backend", type=str, default=d.sampling_backend,
                            choices=["flashinfer", "pytorch"])
        parser.add_argument("--moe-runner-backend", type=str, default=d.moe_runner_backend,
                            choices=MOE_RUNNER_BACKEND_CHOICES)
        parser.add_argument("--moe-a2a-backend", type=str, default=d.moe_a2a_backend,
                            choices=MOE_A2A_BACKEND_CHOICES)
        # Optimizations
        parser.add_argument("--disable-radix-cache", action="store_true")
        parser.add_argument("--disable-cuda-graph", action="store_true")
        parser.add_argument("--cuda-graph-max-bs", type=int, default=d.cuda_graph_max_bs)
        parser.add_argument("--enable-torch-compile", action="store_true")
        parser.add_argument("--enable-two-batch-overlap", action="store_true")
        parser.add_argument("--enable-single-batch-overlap", action="store_true")
        parser.add_argument("--enable-mscclpp", action="store_true")
        # Miniature-only
        g = parser.add_argument_group("minisglang (miniature only, for tests)")
        g.add_argument("--mini-startup-s", type=float, default=d.mini_startup_s,
                       help="Seconds before the server reports ready (/health_generate 200).")
        g.add_argument("--mini-step-base-ms", type=float, default=d.mini_step_base_ms,
                       help="Override cost.STEP_BASE_S (milliseconds).")
        g.add_argument("--mini-step-per-seq-us", type=float, default=d.mini_step_per_seq_us,
                       help="Override cost.STEP_PER_SEQ_S (microseconds).")
        g.add_argument("--mini-prefill-base-ms", type=float, default=d.mini_prefill_base_ms,
                       help="Override cost.PREFILL_BASE_S (milliseconds).")
        g.add_argument("--mini-prefill-per-token-us", type=float, default=d.mini_prefill_per_token_us,
                       help="Override cost.PREFILL_PER_TOKEN_S (microseconds).")
        g.add_argument("--mini-crash-after-requests", type=int, default=d.mini_crash_after_requests,
                       help="After N finished requests, the next forward step dies with a CUDA error "
                            "(env SGLANG_MINI_CRASH_AFTER_REQUESTS).")
        g.add_argument("--mini-torch-step", action="store_true",
                       help="Every forward step also runs real torch work shaped like a MoE block "
                            "(needs torch; env SGLANG_MINI_TORCH_STEP=1).")

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace):
        attrs = [attr.name for attr in dataclasses.fields(cls)]
        return cls(**{attr: getattr(args, attr) for attr in attrs})

    def resolve_once(self) -> "ServerArgs":
        """sglang >= 0.5.23 resolves defaults here; the miniature already did in __post_init__."""
        return self

    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def prepare_server_args(argv: List[str]) -> ServerArgs:
    """Parse `argv` into ServerArgs (exit 2 on an unknown flag, like sglang)."""
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    raw_args = parser.parse_args(argv)
    return ServerArgs.from_cli_args(raw_args)
