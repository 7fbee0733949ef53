#include "models/materialized_attention.h"

#include <cmath>
#include <limits>

#include "wam/error.h"

namespace wam::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// [B, N, H, d] -> [B*H, N, d]: a batched product takes one batch stride.
at::Tensor by_head(const at::Tensor& x) {
  return x.transpose(1, 2).reshape({x.size(0) * x.size(2), x.size(1), x.size(3)});
}

// [B*H, N, d] -> [B, N, H, d] (a view).
at::Tensor from_heads(const at::Tensor& x, int64_t batch) {
  return x.view({batch, -1, x.size(1), x.size(2)}).transpose(1, 2);
}

// Saves q, k, v by head and the probabilities; the bias has no gradient.
class MaterializedAttention : public torch::autograd::Function<MaterializedAttention> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const at::Tensor& bias) {
    const int64_t batch = q.size(0), queries = q.size(1), heads = q.size(2);
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
    const at::Tensor qh = by_head(q), kh = by_head(k), vh = by_head(v);
    // bias + scale * q k^T in one pass, the bias broadcast over heads (and query rows).
    const at::Tensor scores =
        at::add(bias, at::bmm(qh, kh.transpose(1, 2)).view({batch, heads, queries, -1}), scale);
    const at::Tensor probabilities =
        at::_softmax(scores, -1, /*half_to_float=*/false).view({batch * heads, queries, -1});
    ctx->save_for_backward({qh, kh, vh, probabilities});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["batch"] = batch;
    return from_heads(at::bmm(probabilities, vh), batch).reshape({batch, queries, -1});
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &qh = saved[0], &kh = saved[1], &vh = saved[2], &probabilities = saved[3];
    const double scale = ctx->saved_data["scale"].toDouble();
    const int64_t batch = ctx->saved_data["batch"].toInt();
    const at::Tensor grad_out = by_head(grads[0].reshape({batch, qh.size(1), -1, qh.size(2)}));
    const at::Tensor grad_v = at::bmm(probabilities.transpose(1, 2), grad_out);
    at::Tensor grad_scores = at::_softmax_backward_data(
        at::bmm(grad_out, vh.transpose(1, 2)), probabilities, -1, probabilities.scalar_type());
    grad_scores.mul_(scale);
    return {from_heads(at::bmm(grad_scores, kh), batch),
            from_heads(at::bmm(grad_scores.transpose(1, 2), qh), batch), from_heads(grad_v, batch),
            at::Tensor()};
  }
};

}  // namespace

bool materialized_attention_applies(const at::Tensor& q, const at::Tensor& k) {
  if (q.dim() != 4 || k.dim() != 4 || !at::isFloatingType(q.scalar_type())) return false;
  const int64_t queries = q.size(1), keys = k.size(1), head_dim = q.size(3);
  return queries * keys <= (queries + 2 * keys) * head_dim;
}

at::Tensor materialized_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& allowed) {
  const bool fits = q.dim() == 4 && k.dim() == 4 && v.sizes() == k.sizes() &&
                    k.size(0) == q.size(0) && k.size(2) == q.size(2) && k.size(3) == q.size(3) &&
                    allowed.dim() == 4 && allowed.size(0) == q.size(0) && allowed.size(1) == 1 &&
                    (allowed.size(2) == 1 || allowed.size(2) == q.size(1)) &&
                    allowed.size(3) == k.size(1);
  if (!fits) {
    throw Error(c10::str("materialized_attention: q ", q.sizes(), ", k ", k.sizes(), ", v ",
                         v.sizes(), " and mask ", allowed.sizes(),
                         " do not fit ([B, Nq, H, d], [B, Nk, H, d] twice, [B, 1, 1 or Nq, Nk])"));
  }
  at::Tensor bias = allowed;
  if (allowed.scalar_type() == at::kBool) {
    bias = at::zeros(allowed.sizes(), q.options())
               .masked_fill_(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  }
  return MaterializedAttention::apply(q, k, v, bias.to(q.scalar_type()));
}

}  // namespace wam::models
