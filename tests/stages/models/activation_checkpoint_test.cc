// models::activation_checkpoint, the hand-written activation checkpointing.
#include "models/activation_checkpoint.h"

#include <gtest/gtest.h>

#include <vector>

namespace wam {
namespace {

// models::activation_checkpoint against the same function run plainly: the gradients reach the
// inputs, the parameters used inside and the tensors before it.
TEST(ActivationCheckpointTest, GradientsMatchAPlainBackward) {
  torch::manual_seed(2);
  torch::nn::Linear linear(4, 3);
  const at::Tensor leaf = torch::randn({5, 4}, torch::requires_grad());
  const models::RecomputedFn fn = [&](const torch::autograd::variable_list& in) {
    return torch::autograd::variable_list{at::tanh(linear->forward(in[0] * in[1]))};
  };
  std::vector<at::Tensor> grads;
  for (bool checkpointed : {false, true}) {
    linear->zero_grad();
    leaf.mutable_grad() = at::Tensor();
    const torch::autograd::variable_list in = {leaf * 2, leaf.cos()};
    const at::Tensor out = (checkpointed ? models::activation_checkpoint(fn, in) : fn(in))[0];
    ASSERT_TRUE(out.requires_grad());
    out.pow(2).sum().backward();
    ASSERT_TRUE(leaf.grad().defined());
    grads.push_back(leaf.grad().clone());
    grads.push_back(linear->weight.grad().clone());
  }
  EXPECT_TRUE(torch::allclose(grads[2], grads[0]));
  EXPECT_TRUE(torch::allclose(grads[3], grads[1]));
}

}  // namespace
}  // namespace wam
