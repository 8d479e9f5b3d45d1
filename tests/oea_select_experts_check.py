"""Run by an interpreter that can import the patched sglang: sglang's own select_experts under
GLM-5's routing config (256 experts, top-8, n_group 1, topk_group 1, sigmoid, correction bias,
routed_scaling_factor 2.5), with OEA off, on, and above its token limit. Prints one JSON object."""

from __future__ import annotations

import json
import logging
import os
import sys

import torch

from sglang.srt.layers.moe import oea
from sglang.srt.layers.moe.topk import TopKConfig, select_experts

E, K, TOKENS, K0 = 256, 8, 16, 4


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def route(logits, bias, *, grouped: bool, env: dict):
    for k in ("SGLANG_OEA_K0", "SGLANG_OEA_MAX_TOKENS", "SGLANG_OEA_LOG_INTERVAL"):
        os.environ.pop(k, None)
    os.environ.update(env)
    oea.oea_config.cache_clear()
    oea._last_log_time = None
    cfg = TopKConfig(top_k=K, use_grouped_topk=grouped, num_expert_group=1 if grouped else None,
                     topk_group=1 if grouped else None, renormalize=True,
                     correction_bias=bias if grouped else None,
                     routed_scaling_factor=2.5 if grouped else None,
                     apply_routed_scaling_factor_on_output=grouped,
                     scoring_func="sigmoid" if grouped else "softmax", torch_native=True)
    out = select_experts(hidden_states=torch.zeros(logits.shape[0], 8), router_logits=logits,
                         topk_config=cfg)
    return out.topk_weights.tolist(), out.topk_ids.tolist()


def main() -> None:
    env_on = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {"SGLANG_OEA_K0": str(K0)}
    handler = _Lines()
    logging.getLogger("sglang").addHandler(handler)
    logging.getLogger("sglang").setLevel(logging.INFO)
    g = torch.Generator().manual_seed(0)
    result = {}
    for grouped in (True, False):
        logits = torch.randn(TOKENS, E, generator=g) * (1.0 if grouped else 2.0)
        bias = torch.randn(E, generator=g) * 0.1
        big = torch.randn(128, E, generator=g)
        result["grouped" if grouped else "ungrouped"] = {
            "logits": logits.tolist(), "bias": bias.tolist(),
            "off": route(logits, bias, grouped=grouped, env={}),
            "on": route(logits, bias, grouped=grouped, env=env_on),
            "big_off": route(big, bias, grouped=grouped, env={}),
            "big_on": route(big, bias, grouped=grouped, env=env_on),
        }
    result["log_lines"] = handler.lines
    print(json.dumps(result))


if __name__ == "__main__":
    main()
