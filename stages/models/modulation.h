// AdaLN modulation of a token stream whose tokens come in equal runs that share a modulation row.
// The MoT's video stream is one run per latent frame (the future-delta queries counting as one
// more) and has two segments, each with its own row: the clean condition frames (timestep 0) and
// the noised rest; the action chunk is one run and one segment. Viewing x as [B, groups, run, D]
// lets the rows broadcast: no per-token copy of them forward, a plain reduction backward.
#pragma once

#include <torch/torch.h>

namespace wam::models {

struct TokenGroups {
  int64_t groups = 1;
  at::Tensor segment_of_group;  // long [groups] on x's device; undefined: all in segment 0
};

// x [B, N, D] (N a multiple of groups) * (1 + scale) + shift, with shift/scale [B, S, D] one row
// per segment: one fused kernel over x.
at::Tensor modulate(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale,
                    const TokenGroups& layout);

// modulate() with its result written in `dtype` by the same kernel: the compiled step hands the
// next matrix product its bf16 input without autocast's separate cast, forward and backward.
// Same values as modulate(...).to(dtype), same gradients.
at::Tensor modulate_as(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale,
                       const TokenGroups& layout, at::ScalarType dtype);

// x [B, N, D] * gate, gate [B, S, D] one row per segment.
at::Tensor gated(const at::Tensor& x, const at::Tensor& gate, const TokenGroups& layout);

// residual + gated(x, gate, layout) as one kernel that reads x in its own dtype (no gated
// intermediate, and under autocast no widening copy of x): the result has residual's dtype when
// that is the wider one.
at::Tensor add_gated(const at::Tensor& residual, const at::Tensor& x, const at::Tensor& gate,
                     const TokenGroups& layout);

}  // namespace wam::models
