// split_tokens against the narrowed views it replaces in the compiled step: the same values, as
// contiguous tensors of their own, and the same gradient reaching x, also when one part receives
// none (autograd then materialises its gradient as zeros).
#include "models/token_split.h"

#include <gtest/gtest.h>

#include "testing/expect_error.h"

namespace wam {
namespace {

constexpr int64_t kBatch = 3, kFirst = 5, kSecond = 2, kWidth = 4;

at::Tensor make_x(uint64_t seed) {
  at::manual_seed(seed);
  return at::randn({kBatch, kFirst + kSecond, kWidth}).requires_grad_();
}

// x's gradient from the loss sum(part0 * w0) + sum(part1 * w1), `use_second` leaving the second
// part out of the loss.
template <class Split>
at::Tensor grad_of(const at::Tensor& x, Split split, bool use_second) {
  x.mutable_grad() = at::Tensor();
  at::manual_seed(99);
  const at::Tensor w0 = at::randn({kBatch, kFirst, kWidth}),
                   w1 = at::randn({kBatch, kSecond, kWidth});
  const std::vector<at::Tensor> parts = split(x);
  at::Tensor loss = (parts[0] * w0).sum();
  if (use_second) loss = loss + (parts[1] * w1).sum();
  loss.backward();
  return x.grad();
}

std::vector<at::Tensor> narrowed(const at::Tensor& x) {
  return {x.narrow(1, 0, kFirst), x.narrow(1, kFirst, kSecond)};
}

std::vector<at::Tensor> split(const at::Tensor& x) {
  return models::split_tokens(x, {kFirst, kSecond});
}

TEST(SplitTokens, PartsHoldTheNarrowedValuesContiguouslyInStorageOfTheirOwn) {
  const at::Tensor x = make_x(1);
  const std::vector<at::Tensor> parts = split(x), views = narrowed(x);
  ASSERT_EQ(parts.size(), 2u);
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_EQ(parts[i].sizes(), views[i].sizes()) << i;
    EXPECT_TRUE(parts[i].is_contiguous()) << i;
    EXPECT_TRUE(at::equal(parts[i], views[i])) << i;
    EXPECT_FALSE(parts[i].storage().is_alias_of(x.storage())) << i;
  }
  EXPECT_EQ(parts[1].sizes(), (std::vector<int64_t>{kBatch, kSecond, kWidth}));
}

#if WAM_WITH_CUDA
// On CUDA the parts are one two-dimensional copy each: the same values, bit for bit, in bfloat16
// at the joint attention's shape (576 video and 32 action tokens of 1536), and from a transposed
// x (rows not contiguous: the strided copy).
TEST(SplitTokens, CudaPartsEqualTheNarrowedViews) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  at::manual_seed(7);
  const at::Tensor joint =
      at::randn({4, 608, 1536}, at::TensorOptions(at::kCUDA)).to(at::kBFloat16);
  const at::Tensor transposed =
      at::randn({4, 64, 608}, at::TensorOptions(at::kCUDA)).transpose(1, 2);
  for (const at::Tensor& x : {joint, transposed}) {
    const std::vector<at::Tensor> parts = models::split_tokens(x, {576, 32});
    ASSERT_EQ(parts.size(), 2u);
    EXPECT_TRUE(parts[0].is_contiguous());
    EXPECT_TRUE(parts[1].is_contiguous());
    EXPECT_TRUE(at::equal(parts[0], x.narrow(1, 0, 576)));
    EXPECT_TRUE(at::equal(parts[1], x.narrow(1, 576, 32)));
  }
}
#endif

TEST(SplitTokens, GradientEqualsTheNarrowedViewsGradient) {
  const at::Tensor x = make_x(2);
  for (const bool use_second : {true, false}) {
    const at::Tensor want = grad_of(x, narrowed, use_second), got = grad_of(x, split, use_second);
    ASSERT_TRUE(got.defined()) << use_second;
    EXPECT_EQ(got.sizes(), x.sizes()) << use_second;
    EXPECT_TRUE(at::equal(got, want)) << use_second;
  }
  // Without the second part in the loss its rows get exactly zero.
  EXPECT_TRUE(grad_of(x, split, false).narrow(1, kFirst, kSecond).eq(0).all().item<bool>());
}

TEST(SplitTokens, CountsThatDoNotSumToTheTokensAreRefusedNamingThem) {
  const at::Tensor x = make_x(3);
  EXPECT_ERROR(models::split_tokens(x, {kFirst, kSecond + 1}),
               "split_tokens: x [3, 7, 4] does not split into token counts [5, 3] ([B, N, W] "
               "with the counts summing to N)");
  EXPECT_ERROR(models::split_tokens(x.flatten(0, 1), {kFirst, kSecond}),
               "split_tokens: x [21, 4] does not split into token counts [5, 2] ([B, N, W] with "
               "the counts summing to N)");
}

}  // namespace
}  // namespace wam
