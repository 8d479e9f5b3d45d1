"""Write FlashInfer autotuner result files with FlashInfer's own writer (AutoTuner.save_configs), as
sglang's start-up tuning leaves them: `python flashinfer_tuned.py OUT.json TACTIC [TACTIC2]`.

Run by an interpreter that has flashinfer-python (0.7.2: recipes/cpu/baseline's env). The entries
are the fused-MoE GEMMs sglang tunes for the flashinfer_cutlass runner (ops trtllm::fused_moe::gemm1
and ::gemm2, runner MoERunner) at three of FlashInfer's token buckets; gemm1 at 8 tokens gets TACTIC2
(default TACTIC), so two files can differ at exactly one shape. No GPU: the tactics are given, not
measured (the measuring needs CUDA); what is real is the file FlashInfer writes for them.
Also used to make tests/data/flashinfer-tuned-*.json (the fast tier's copies).
"""

import sys

from flashinfer.autotuner.autotuner import AutoTuner, ProfilingCacheKey

out, tactic = sys.argv[1], int(sys.argv[2])
other = int(sys.argv[3]) if len(sys.argv) > 3 else tactic
tuner = AutoTuner.get()
for op in ("trtllm::fused_moe::gemm1", "trtllm::fused_moe::gemm2"):
    for tokens in (1, 8, 64):
        shapes = ((tokens, 3072), (256, 6144, 1536), (tokens, 8))
        chosen = other if (op.endswith("gemm1") and tokens == 8) else tactic
        tuner.profiling_cache[ProfilingCacheKey(op, "MoERunner", 0, shapes, ())] = (chosen, 0.001)
tuner.save_configs(out)
