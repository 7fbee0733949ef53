// Attention that forms its probabilities as a tensor, for the compiled step's cross-attentions:
// short key sets (the text context's 129 rows for the video tokens, 32 action tokens over the VLM
// context), where a fused flash kernel spends most of its time on tiles it cannot fill
// (docs/KERNELS.md, version 13).
#pragma once

#include <torch/torch.h>

namespace wam::models {

// Whether materialized_attention suits q [B, Nq, H, d] and k [B, Nk, H, d]: 4-D, floating, and a
// score matrix per head (Nq x Nk) no larger than the q, k and v it is made from ((Nq + 2 Nk) x d),
// so keeping it for backward costs no more than attention already keeps.
bool materialized_attention_applies(const at::Tensor& q, const at::Tensor& k);

// softmax(q k^T / sqrt(d) + bias) v per head, as [B, Nq, H*d] (attention()'s layout). q [B, Nq,
// H, d], k and v [B, Nk, H, d]; `allowed` [B, 1, 1 or Nq, Nk]: an additive bias of q's dtype (the
// compiled step's, attention_bias) or a bool mask (true: may attend). Three batched products and
// a softmax each way; backward keeps q, k, v as [B*H, N, d] and the probabilities. Throws
// wam::Error when the shapes do not fit together.
at::Tensor materialized_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& allowed);

}  // namespace wam::models
