"""Run by an interpreter that can import the patched sglang: sglang's own select_experts under
GLM-5's routing config (256 experts, top-8, n_group 1, topk_group 1, sigmoid, correction bias,
routed_scaling_factor 2.5) and on the ungrouped softmax path, with OEA off, on, and above its token
limit, and on inside a prefill forward and a decode forward (the mode sglang's forward_context tells
oea.py). After each routing the activation counts are flushed (as a forward's end does), so the
lines are those of that routing. Prints one JSON object.

argv: [ENV_ON_JSON [UPSTREAM_TOPK_PY]]. ENV_ON_JSON is the environment that turns OEA on (default
SGLANG_OEA_K0=4). UPSTREAM_TOPK_PY, when given, is the release's unpatched topk.py: it is loaded
beside the patched one and every input is also routed by its select_experts ("upstream").

On a CPU machine torchvision's CUDA-linked operators are declared by torchvision_ops_placeholder
(the result lists what it declared); sglang itself, oea.py and topk.py are the real modules.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys

import torch

import torchvision_ops_placeholder

PLACEHOLDERS = torchvision_ops_placeholder.install()

from sglang.srt.layers.moe import oea  # noqa: E402
from sglang.srt.layers.moe import topk as patched  # noqa: E402

E, K, TOKENS, BIG, K0 = 256, 8, 16, 128, 4


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _load_upstream(path: str):
    spec = importlib.util.spec_from_file_location("sglang.srt.layers.moe._topk_upstream", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class _Mode:
    """A stand-in for sglang's ForwardMode: is_decode() and is_idle() are read."""

    def __init__(self, decode: bool):
        self.decode = decode

    def is_decode(self) -> bool:
        return self.decode

    def is_idle(self) -> bool:
        return False


class _Batch:
    """A stand-in for sglang's ForwardBatch: what oea.note_forward reads (no speculative decoding,
    every row a real request)."""

    def __init__(self, decode: bool, rows: int):
        self.forward_mode = _Mode(decode)
        self.batch_size = rows
        self.input_ids = torch.zeros(rows, dtype=torch.int64)
        self.spec_algorithm = None
        self.is_extend_in_batch = False


def route(module, logits, bias, *, grouped: bool, env: dict, decode: bool | None = None):
    for k in ("SGLANG_OEA_K0", "SGLANG_OEA_MAX_TOKENS", "SGLANG_OEA_LOG_INTERVAL"):
        os.environ.pop(k, None)
    os.environ.update(env)
    oea.oea_config.cache_clear()
    oea._last_log_time = None
    state = oea.note_forward(_Batch(decode, logits.shape[0])) if decode is not None else None
    try:
        return _route(module, logits, bias, grouped=grouped)
    finally:
        if state is not None:
            oea.restore_forward(state)
        oea.flush(force=True)


def _route(module, logits, bias, *, grouped: bool):
    cfg = module.TopKConfig(top_k=K, use_grouped_topk=grouped, num_expert_group=1 if grouped else None,
                            topk_group=1 if grouped else None, renormalize=True,
                            correction_bias=bias if grouped else None,
                            routed_scaling_factor=2.5 if grouped else None,
                            apply_routed_scaling_factor_on_output=grouped,
                            scoring_func="sigmoid" if grouped else "softmax", torch_native=True)
    out = module.select_experts(hidden_states=torch.zeros(logits.shape[0], 8), router_logits=logits,
                                topk_config=cfg)
    return out.topk_weights.tolist(), out.topk_ids.tolist()


def main() -> None:
    env_on = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {"SGLANG_OEA_K0": str(K0)}
    upstream = _load_upstream(sys.argv[2]) if len(sys.argv) > 2 else None
    handler = _Lines()
    logging.getLogger("sglang").addHandler(handler)
    logging.getLogger("sglang").setLevel(logging.INFO)
    g = torch.Generator().manual_seed(0)
    result = {"placeholders": PLACEHOLDERS, "topk_py": patched.__file__, "oea_py": oea.__file__,
              "torch": torch.__version__, "upstream_topk_py": upstream.__file__ if upstream else None}
    for grouped in (True, False):
        logits = torch.randn(TOKENS, E, generator=g) * (1.0 if grouped else 2.0)
        bias = torch.randn(E, generator=g) * 0.1
        big = torch.randn(BIG, E, generator=g)
        r = result["grouped" if grouped else "ungrouped"] = {
            "logits": logits.tolist(), "bias": bias.tolist(), "big_logits": big.tolist(),
            "off": route(patched, logits, bias, grouped=grouped, env={}),
            "on": route(patched, logits, bias, grouped=grouped, env=env_on),
            "big_off": route(patched, big, bias, grouped=grouped, env={}),
            "big_on": route(patched, big, bias, grouped=grouped, env=env_on),
            "on_prefill": route(patched, logits, bias, grouped=grouped, env=env_on, decode=False),
            "on_decode": route(patched, logits, bias, grouped=grouped, env=env_on, decode=True),
        }
        if upstream is not None:
            r["upstream"] = route(upstream, logits, bias, grouped=grouped, env={})
            r["big_upstream"] = route(upstream, big, bias, grouped=grouped, env={})
    result["log_lines"] = handler.lines
    print(json.dumps(result))


if __name__ == "__main__":
    main()
