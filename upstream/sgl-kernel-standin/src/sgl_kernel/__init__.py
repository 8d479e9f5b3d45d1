"""A stand-in for `sgl_kernel` on a CPU: the names sglang 0.5.23 imports, each raising when called.

Not sgl_kernel: no kernel lives here. Every name is a function that writes
`patchbench sgl_kernel stand-in called: <name>` to stderr and raises NotImplementedError, so a
server that reaches one fails loudly and its log says which.
"""

from __future__ import annotations

import sys

__version__ = "0.0.0+patchbench.standin"
MARKER = "patchbench sgl_kernel stand-in called:"

# The names `import sglang` and `sglang.launch_server` import with SGLANG_USE_CPU_ENGINE=1
# (found by launching real sglang 0.5.23 on this CPU until it started).
NAMES = (
    "assign_req_to_token_pool_cpu",
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "build_tree_kernel_efficient_cpu",
    "copy_all_layer_kv_cache_cpu",
    "rotate_input_ids_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "verify_tree_greedy_cpu",
)


def _standin(name: str):
    def call(*args, **kwargs):
        print(f"{MARKER} {name}", file=sys.stderr, flush=True)
        raise NotImplementedError(f"sgl_kernel.{name}: patchbench's CPU stand-in has no kernel")

    call.__name__ = call.__qualname__ = name
    return call


for _name in NAMES:
    globals()[_name] = _standin(_name)
