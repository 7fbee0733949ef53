// Per-segment AdaLN modulation over grouped tokens against splitting the stream at the segment
// boundary and modulating each part with its own row, values and gradients.
#include "models/modulation.h"

#include <gtest/gtest.h>

#include <functional>

namespace wam {
namespace {

// 2 samples, 5 groups of 3 tokens, width 4; groups 0-2 are segment 0, groups 3-4 segment 1.
constexpr int64_t kBatch = 2, kGroups = 5, kRun = 3, kWidth = 4, kFirstSegmentGroups = 3;

models::TokenGroups two_segments() {
  return {kGroups, torch::tensor({0, 0, 0, 1, 1}, torch::kLong)};
}

// The stream split at the boundary, each part with its segment's row.
at::Tensor split_reference(
    const at::Tensor& x, const at::Tensor& rows,
    const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& op) {
  const int64_t boundary = kFirstSegmentGroups * kRun;
  return at::cat({op(x.narrow(1, 0, boundary), rows.narrow(1, 0, 1)),
                  op(x.narrow(1, boundary, x.size(1) - boundary), rows.narrow(1, 1, 1))},
                 1);
}

// Leaf tensors to differentiate: x [B, N, D] and shift/scale rows [B, 2, D], seeded.
struct ModulationInputs {
  at::Tensor x, shift, scale;

  explicit ModulationInputs(uint64_t seed) {
    torch::manual_seed(seed);
    x = torch::randn({kBatch, kGroups * kRun, kWidth});
    shift = torch::randn({kBatch, 2, kWidth});
    scale = torch::randn({kBatch, 2, kWidth});
  }
  // A copy with fresh gradients.
  ModulationInputs leaves() const {
    ModulationInputs copy = *this;
    for (at::Tensor* t : {&copy.x, &copy.shift, &copy.scale}) *t = t->clone().requires_grad_(true);
    return copy;
  }
};

TEST(ModulationTest, ModulateGivesEachSegmentItsOwnRowWithGradients) {
  const ModulationInputs given(1);
  const at::Tensor &x0 = given.x, &shift0 = given.shift, &scale0 = given.scale;
  const ModulationInputs ours = given.leaves(), ref = given.leaves();
  const at::Tensor &x = ours.x, &shift = ours.shift, &scale = ours.scale;
  const at::Tensor &x_ref = ref.x, &shift_ref = ref.shift, &scale_ref = ref.scale;

  const at::Tensor out = models::modulate(x, shift, scale, two_segments());
  const at::Tensor shift_scale = at::cat({shift_ref, scale_ref}, 2);
  const at::Tensor expected =
      split_reference(x_ref, shift_scale, [](const at::Tensor& part, const at::Tensor& row) {
        return part * (1 + row.narrow(2, kWidth, kWidth)) + row.narrow(2, 0, kWidth);
      });
  ASSERT_EQ(out.sizes(), x.sizes());
  EXPECT_TRUE(at::allclose(out, expected, 1e-6, 1e-6));
  // Token 8 is the last of segment 0, token 9 the first of segment 1.
  EXPECT_TRUE(at::allclose(out[0][8], x0[0][8] * (1 + scale0[0][0]) + shift0[0][0], 1e-6, 1e-6));
  EXPECT_TRUE(at::allclose(out[0][9], x0[0][9] * (1 + scale0[0][1]) + shift0[0][1], 1e-6, 1e-6));

  const at::Tensor grad = torch::randn(out.sizes());
  out.backward(grad);
  expected.backward(grad);
  EXPECT_TRUE(at::allclose(x.grad(), x_ref.grad(), 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(shift.grad(), shift_ref.grad(), 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(scale.grad(), scale_ref.grad(), 1e-5, 1e-6));
}

TEST(ModulationTest, GatedWithOneSegmentBroadcastsItsRow) {
  torch::manual_seed(2);
  const at::Tensor x = torch::randn({kBatch, 7, kWidth}), gate = torch::randn({kBatch, 1, kWidth});
  const at::Tensor out = models::gated(x, gate, models::TokenGroups{});
  EXPECT_TRUE(at::allclose(out, x * gate, 1e-6, 1e-6));
}

TEST(ModulationTest, GatedGivesEachSegmentItsOwnRow) {
  torch::manual_seed(3);
  const at::Tensor x = torch::randn({kBatch, kGroups * kRun, kWidth});
  const at::Tensor gate = torch::randn({kBatch, 2, kWidth});
  const at::Tensor expected = split_reference(
      x, gate, [](const at::Tensor& part, const at::Tensor& row) { return part * row; });
  EXPECT_TRUE(at::allclose(models::gated(x, gate, two_segments()), expected, 1e-6, 1e-6));
}

// The compiled step's forms against the eager ones they replace: modulate_as against modulate and
// a cast, add_gated against an add of gated(); same values, same gradients.
TEST(ModulationTest, ModulateAsEqualsModulateThenCastWithGradients) {
  const ModulationInputs given(4), ours = given.leaves(), ref = given.leaves();
  const at::Tensor &x = ours.x, &shift = ours.shift, &scale = ours.scale;
  const at::Tensor &x_ref = ref.x, &shift_ref = ref.shift, &scale_ref = ref.scale;

  const at::Tensor out = models::modulate_as(x, shift, scale, two_segments(), at::kBFloat16);
  const at::Tensor expected =
      models::modulate(x_ref, shift_ref, scale_ref, two_segments()).to(at::kBFloat16);
  ASSERT_EQ(out.scalar_type(), at::kBFloat16);
  ASSERT_EQ(out.sizes(), x.sizes());
  EXPECT_TRUE(at::equal(out, expected));

  const at::Tensor grad = torch::randn(out.sizes()).to(at::kBFloat16);
  out.backward(grad);
  expected.backward(grad);
  ASSERT_EQ(x.grad().scalar_type(), at::kFloat);
  EXPECT_TRUE(at::allclose(x.grad(), x_ref.grad(), 1e-6, 1e-7));
  EXPECT_TRUE(at::allclose(shift.grad(), shift_ref.grad(), 1e-6, 1e-7));
  EXPECT_TRUE(at::allclose(scale.grad(), scale_ref.grad(), 1e-6, 1e-7));
}

TEST(ModulationTest, AddGatedEqualsAddOfGatedWithGradients) {
  torch::manual_seed(5);
  const at::Tensor residual0 = torch::randn({kBatch, kGroups * kRun, kWidth});
  const at::Tensor x0 = torch::randn({kBatch, kGroups * kRun, kWidth}).to(at::kBFloat16);
  const at::Tensor gate0 = torch::randn({kBatch, 2, kWidth});
  at::Tensor residual = residual0.clone().requires_grad_(true), x = x0.clone().requires_grad_(true),
             gate = gate0.clone().requires_grad_(true);
  at::Tensor residual_ref = residual0.clone().requires_grad_(true),
             x_ref = x0.clone().requires_grad_(true), gate_ref = gate0.clone().requires_grad_(true);

  const at::Tensor out = models::add_gated(residual, x, gate, two_segments());
  const at::Tensor expected = residual_ref + models::gated(x_ref, gate_ref, two_segments());
  ASSERT_EQ(out.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::allclose(out, expected, 1e-6, 1e-6));
  // Token 9 is the first of segment 1.
  EXPECT_TRUE(
      at::allclose(out[1][9], residual0[1][9] + x0[1][9].to(at::kFloat) * gate0[1][1], 1e-6, 1e-6));

  const at::Tensor grad = torch::randn(out.sizes());
  out.backward(grad);
  expected.backward(grad);
  ASSERT_EQ(x.grad().scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(residual.grad(), residual_ref.grad()));
  EXPECT_TRUE(at::equal(x.grad(), x_ref.grad()));
  EXPECT_TRUE(at::allclose(gate.grad(), gate_ref.grad(), 1e-5, 1e-6));
}

}  // namespace
}  // namespace wam
