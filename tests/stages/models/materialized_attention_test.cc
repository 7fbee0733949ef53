// materialized_attention against the composition it computes, softmax(q k^T / sqrt(d) + bias) v
// per head: values and the gradients of q, k and v, in float32 on the CPU, with an additive bias
// and with a bool mask; which shapes it applies to; the refusal of shapes that do not fit.
#include "models/materialized_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "testing/expect_error.h"

namespace wam {
namespace {

constexpr int64_t kBatch = 2, kQueries = 5, kKeys = 7, kHeads = 3, kHeadDim = 4;

struct Inputs {
  at::Tensor q, k, v, allowed, grad;  // q, k, v: [B, N, H, d] leaves requiring gradients
};

// `mask_rows`: the mask's query rows (1: one row for every query, as the context masks).
Inputs make_inputs(uint64_t seed, bool bool_mask, int64_t mask_rows) {
  at::manual_seed(seed);
  Inputs in;
  in.q = at::randn({kBatch, kQueries, kHeads, kHeadDim}).requires_grad_();
  in.k = at::randn({kBatch, kKeys, kHeads, kHeadDim}).requires_grad_();
  in.v = at::randn({kBatch, kKeys, kHeads, kHeadDim}).requires_grad_();
  at::Tensor allowed = at::rand({kBatch, 1, mask_rows, kKeys}).gt(0.3);
  allowed.select(3, 0).fill_(true);  // every query may attend to some key
  in.allowed = bool_mask ? allowed
                         : at::zeros(allowed.sizes())
                               .masked_fill_(allowed.logical_not(),
                                             -std::numeric_limits<double>::infinity());
  in.grad = at::randn({kBatch, kQueries, kHeads * kHeadDim});
  return in;
}

struct Result {
  at::Tensor out, grad_q, grad_k, grad_v;
};

template <class Attend>
Result run(const Inputs& in, Attend attend) {
  for (const at::Tensor* t : {&in.q, &in.k, &in.v}) t->mutable_grad() = at::Tensor();
  const at::Tensor out = attend();
  out.backward(in.grad);
  return {out.detach(), in.q.grad(), in.k.grad(), in.v.grad()};
}

Result composition(const Inputs& in) {
  return run(in, [&] {
    const at::Tensor q = in.q.transpose(1, 2), k = in.k.transpose(1, 2), v = in.v.transpose(1, 2);
    at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(kHeadDim));
    scores =
        in.allowed.scalar_type() == at::kBool
            ? scores.masked_fill(in.allowed.logical_not(), -std::numeric_limits<double>::infinity())
            : scores + in.allowed;
    return at::matmul(at::softmax(scores, -1), v).transpose(1, 2).reshape({kBatch, kQueries, -1});
  });
}

Result materialized(const Inputs& in) {
  return run(in, [&] { return models::materialized_attention(in.q, in.k, in.v, in.allowed); });
}

void expect_close(const Result& got, const Result& want) {
  const std::pair<const char*, std::pair<at::Tensor, at::Tensor>> pairs[] = {
      {"out", {got.out, want.out}},
      {"grad q", {got.grad_q, want.grad_q}},
      {"grad k", {got.grad_k, want.grad_k}},
      {"grad v", {got.grad_v, want.grad_v}}};
  for (const auto& [name, tensors] : pairs) {
    const auto& [a, b] = tensors;
    ASSERT_TRUE(a.defined()) << name;
    EXPECT_EQ(a.sizes(), b.sizes()) << name;
    EXPECT_FALSE(a.isnan().any().item<bool>()) << name;
    EXPECT_TRUE(at::allclose(a, b, 1e-5, 1e-6))
        << name << ": largest difference " << (a - b).abs().max().item<double>();
  }
}

TEST(MaterializedAttention, MatchesTheCompositionWithABiasOrAMask) {
  for (const bool bool_mask : {false, true}) {
    for (const int64_t mask_rows : {int64_t{1}, kQueries}) {
      for (uint64_t seed : {1, 2}) {
        SCOPED_TRACE(::testing::Message() << "bool mask " << bool_mask << ", mask rows "
                                          << mask_rows << ", seed " << seed);
        const Inputs in = make_inputs(seed, bool_mask, mask_rows);
        const Result got = materialized(in);
        expect_close(got, composition(in));
        EXPECT_EQ(got.out.sizes(), (std::vector<int64_t>{kBatch, kQueries, kHeads * kHeadDim}));
      }
    }
  }
}

TEST(MaterializedAttention, AppliesWhereTheScoresAreNoLargerThanQKAndV) {
  // The base preset's attentions (batch 16, 16 heads of 96): the video tokens over the text
  // context, the action tokens over the VLM context, and the joint self-attention.
  const auto heads = [](int64_t tokens) { return at::empty({16, tokens, 16, 96}); };
  EXPECT_TRUE(models::materialized_attention_applies(heads(576), heads(129)));
  EXPECT_TRUE(models::materialized_attention_applies(heads(32), heads(1025)));
  EXPECT_FALSE(models::materialized_attention_applies(heads(608), heads(608)));
  EXPECT_FALSE(models::materialized_attention_applies(at::empty({16, 32, 1536}), heads(1025)));
}

TEST(MaterializedAttention, ShapesThatDoNotFitAreRefusedNamingThem) {
  const Inputs in = make_inputs(3, false, 1);
  EXPECT_ERROR(models::materialized_attention(in.q, in.k, in.v.narrow(1, 0, 6), in.allowed),
               "materialized_attention: q [2, 5, 3, 4], k [2, 7, 3, 4], v [2, 6, 3, 4] and mask "
               "[2, 1, 1, 7] do not fit ([B, Nq, H, d], [B, Nk, H, d] twice, [B, 1, 1 or Nq, "
               "Nk])");
}

}  // namespace
}  // namespace wam
