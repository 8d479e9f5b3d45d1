// minisglang: MoE router top-k (softmax over expert logits, then the k largest), one warp per token.
//
//   logits:  [num_tokens, num_experts] fp32
//   weights: [num_tokens, k] fp32 (renormalised softmax probabilities of the chosen experts)
//   ids:     [num_tokens, k] int32 (expert ids, best first; ties -> lower id)
//
// This is the selection an "opportunistic expert activation" patch would change. num_experts <=
// 32 * MINI_TOPK_MAX_PER_LANE, k <= MINI_TOPK_MAX_K.

#include <stdint.h>
#include <math.h>

#ifndef MINI_TOPK_MAX_PER_LANE
#define MINI_TOPK_MAX_PER_LANE 8  // up to 256 experts
#endif
#ifndef MINI_TOPK_MAX_K
#define MINI_TOPK_MAX_K 16
#endif

__device__ __forceinline__ void warp_argmax(float& v, int& idx) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, v, offset);
    int oi = __shfl_xor_sync(0xffffffffu, idx, offset);
    if (ov > v || (ov == v && oi < idx)) { v = ov; idx = oi; }
  }
}

extern "C" __global__ void moe_softmax_topk_f32(const float* __restrict__ logits,
                                                float* __restrict__ weights,
                                                int32_t* __restrict__ ids,
                                                int num_tokens, int num_experts, int k,
                                                int renormalize) {
  const int lane = threadIdx.x & 31;
  const int token = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (token >= num_tokens) return;
  const float* row = logits + (int64_t)token * num_experts;

  float vals[MINI_TOPK_MAX_PER_LANE];
  float row_max = -INFINITY;
#pragma unroll
  for (int j = 0; j < MINI_TOPK_MAX_PER_LANE; ++j) {
    int e = lane + 32 * j;
    vals[j] = e < num_experts ? row[e] : -INFINITY;
    row_max = fmaxf(row_max, vals[j]);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, offset));
  float denom = 0.f;
#pragma unroll
  for (int j = 0; j < MINI_TOPK_MAX_PER_LANE; ++j) {
    vals[j] = (lane + 32 * j) < num_experts ? __expf(vals[j] - row_max) : -1.f;
    denom += vals[j] > 0.f ? vals[j] : 0.f;
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    denom += __shfl_xor_sync(0xffffffffu, denom, offset);

  float chosen_sum = 0.f;
  float chosen[MINI_TOPK_MAX_K];
  for (int s = 0; s < k && s < MINI_TOPK_MAX_K; ++s) {
    float best = -1.f;
    int best_idx = 0x7fffffff;
#pragma unroll
    for (int j = 0; j < MINI_TOPK_MAX_PER_LANE; ++j) {
      int e = lane + 32 * j;
      if (vals[j] > best || (vals[j] == best && e < best_idx)) { best = vals[j]; best_idx = e; }
    }
    warp_argmax(best, best_idx);
    if ((best_idx & 31) == lane) vals[best_idx >> 5] = -1.f;  // owner removes the winner
    chosen[s] = best / denom;
    chosen_sum += chosen[s];
    if (lane == 0) ids[(int64_t)token * k + s] = best_idx;
  }
  if (lane == 0) {
    for (int s = 0; s < k && s < MINI_TOPK_MAX_K; ++s)
      weights[(int64_t)token * k + s] = renormalize ? chosen[s] / chosen_sum : chosen[s];
  }
}
