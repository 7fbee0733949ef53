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

// Slices of feature columns into slices of token rows (the joint attention's v, forward), and
// back (its gradient): what copy_ writes, nothing outside the slice touched.
TEST(CopyTokenRows, WritesWhatCopyWritesIntoTheSliceAlone) {
  const at::Tensor qkv = at::randn({3, 5, 12}), joint = at::randn({3, 7, 4});
  at::Tensor got = joint.clone(), want = joint.clone();
  models::copy_token_rows(got.narrow(1, 2, 5), qkv.narrow(2, 8, 4));
  want.narrow(1, 2, 5).copy_(qkv.narrow(2, 8, 4));
  EXPECT_TRUE(at::equal(got, want));
  at::Tensor grad_got = at::zeros({3, 5, 12}), grad_want = at::zeros({3, 5, 12});
  models::copy_token_rows(grad_got.narrow(2, 8, 4), joint.narrow(1, 2, 5));
  grad_want.narrow(2, 8, 4).copy_(joint.narrow(1, 2, 5));
  EXPECT_TRUE(at::equal(grad_got, grad_want));
  EXPECT_ERROR(models::copy_token_rows(got.narrow(1, 0, 4), qkv.narrow(2, 8, 4)),
               "copy_token_rows: dst [3, 4, 4] Float and src [3, 5, 4] Float are not views of "
               "the same [B, R, W] sizes and dtype");
}

#if WAM_WITH_CUDA
// On CUDA the row copy kernel: bit for bit copy_'s, at the joint attention's shapes (576 video and
// 32 action tokens, q/k/v of 3 x 1536), both ways; and copy_ itself from a transposed source (not
// rows) and for rows of 12 bytes (not whole 16-byte loads).
TEST(CopyTokenRows, CudaCopiesEqualCopyBothWays) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  at::manual_seed(9);
  const at::TensorOptions bf16 = at::TensorOptions(at::kCUDA).dtype(at::kBFloat16);
  const at::Tensor video = at::randn({4, 576, 4608}, bf16), action = at::randn({4, 32, 4608}, bf16);
  at::Tensor got = at::randn({4, 608, 1536}, bf16), want = got.clone();
  models::copy_token_rows(got.narrow(1, 0, 576), video.narrow(2, 3072, 1536));
  models::copy_token_rows(got.narrow(1, 576, 32), action.narrow(2, 3072, 1536));
  want.narrow(1, 0, 576).copy_(video.narrow(2, 3072, 1536));
  want.narrow(1, 576, 32).copy_(action.narrow(2, 3072, 1536));
  EXPECT_TRUE(at::equal(got, want));
  at::Tensor grad_got = at::zeros({4, 32, 4608}, bf16), grad_want = grad_got.clone();
  models::copy_token_rows(grad_got.narrow(2, 3072, 1536), got.narrow(1, 576, 32));
  grad_want.narrow(2, 3072, 1536).copy_(got.narrow(1, 576, 32));
  EXPECT_TRUE(at::equal(grad_got, grad_want));
  const at::Tensor transposed = at::randn({4, 1536, 32}, bf16).transpose(1, 2);
  models::copy_token_rows(grad_got.narrow(2, 0, 1536), transposed);
  EXPECT_TRUE(at::equal(grad_got.narrow(2, 0, 1536), transposed));
  const at::Tensor narrow_rows = at::randn({4, 32, 6}, bf16);
  models::copy_token_rows(grad_got.narrow(2, 10, 6), narrow_rows);
  EXPECT_TRUE(at::equal(grad_got.narrow(2, 10, 6), narrow_rows));
  EXPECT_TRUE(at::equal(grad_got.narrow(2, 3072, 1536), grad_want.narrow(2, 3072, 1536)));
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
