// The fused kernels' time against the bytes each must move, on the base preset's video-stream
// shapes (batch 16, 576 tokens of width 1536 in 6 groups, the FFN's 6144, the VLM context's 16400
// rows): microseconds a call (20 launches after 3) and the bandwidth that is, so that each
// version's prediction in docs/KERNELS.md can be set beside its kernel's own figure as well as the
// step's. On the GPU machine:
//   nvcc -O3 -std=c++17 -arch=sm_90 -I stages scripts/kernel-bytes.cu stages/kernels/adaln.cu \
//     stages/kernels/epilogue_gemm.cu stages/kernels/rms_norm_rope.cu \
//     stages/kernels/gelu_backward.cu stages/kernels/adamw.cu stages/kernels/row_copy.cu -lcublasLt
//     -o /tmp/kernel-bytes
//   /tmp/kernel-bytes
// The inputs are zeros: these kernels' time does not depend on the values.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "kernels/adaln.h"
#include "kernels/adamw.h"
#include "kernels/epilogue_gemm.h"
#include "kernels/gelu_backward.h"
#include "kernels/rms_norm_rope.h"
#include "kernels/row_copy.h"

namespace {

using wam::kernels::ModulationLayout;
using wam::kernels::Precision;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}

void* zeros(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  check(cudaMemset(p, 0, bytes), "cudaMemset");
  return p;
}

// Microseconds a launch, 20 launches timed after 3.
float micros(const std::function<void()>& launch, cudaStream_t stream) {
  for (int i = 0; i < 3; ++i) launch();
  cudaEvent_t begin, end;
  check(cudaEventCreate(&begin), "cudaEventCreate");
  check(cudaEventCreate(&end), "cudaEventCreate");
  check(cudaEventRecord(begin, stream), "cudaEventRecord");
  for (int i = 0; i < 20; ++i) launch();
  check(cudaEventRecord(end, stream), "cudaEventRecord");
  check(cudaEventSynchronize(end), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime");
  return ms * 1000.0f / 20.0f;
}

void report(const char* name, double bytes, float us) {
  std::printf("%-58s %9.1f MB %8.1f us %7.2f TB/s\n", name, bytes / 1e6, us, bytes / us / 1e6);
}

}  // namespace

int main() {
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);

  // The video stream: 16 samples of 576 tokens, 6 groups of 96 rows, each sample its own rows.
  ModulationLayout video;
  video.rows = 16 * 576;
  video.width = 1536;
  video.tokens = 576;
  video.run = 96;
  video.sample_stride = 6;
  const size_t n = static_cast<size_t>(video.rows * video.width);
  const size_t partial_bytes = wam::kernels::adaln_backward_blocks(video) * video.width * 4;
  void* grad_f32 = zeros(n * 4);
  void* x_f32 = zeros(n * 4);
  void* residual_grad = zeros(n * 4);
  void* out_f32 = zeros(n * 4);
  void* update_bf16 = zeros(n * 2);
  void* grad_bf16 = zeros(n * 2);
  void* out_bf16 = zeros(n * 2);
  auto* rows_f32 = static_cast<float*>(zeros(video.rows * 4));
  auto* modulation = static_cast<float*>(zeros(video.modulation_rows() * video.width * 4));
  auto* bias = static_cast<float*>(zeros(video.width * 4));
  auto* partials_a = static_cast<float*>(zeros(partial_bytes));
  auto* partials_b = static_cast<float*>(zeros(partial_bytes));

  // Gated residual backward: grad_out float32, update bfloat16 read, grad_update bfloat16 written.
  report("gated residual backward, no bias", n * (4 + 2 + 2) + partial_bytes,
         micros(
             [&] {
               wam::kernels::gated_residual_backward(grad_f32, Precision::kFloat32, update_bf16,
                                                     Precision::kBFloat16, nullptr, modulation,
                                                     grad_bf16, partials_a, nullptr, video, stream);
             },
             stream));
  report("gated residual backward, bias", n * (4 + 2 + 2) + 2 * partial_bytes,
         micros(
             [&] {
               wam::kernels::gated_residual_backward(
                   grad_f32, Precision::kFloat32, update_bf16, Precision::kBFloat16, bias,
                   modulation, grad_bf16, partials_a, partials_b, video, stream);
             },
             stream));
  report("gated residual forward, bias", n * (4 + 2 + 4),
         micros(
             [&] {
               wam::kernels::gated_residual_forward(x_f32, Precision::kFloat32, update_bf16,
                                                    Precision::kBFloat16, bias, modulation, out_f32,
                                                    video, stream);
             },
             stream));
  // LayerNorm + modulation: x float32 in, bfloat16 out; backward with the residual's gradient.
  report("layer norm + modulation forward", n * (4 + 2),
         micros(
             [&] {
               wam::kernels::layer_norm_modulate_forward(x_f32, Precision::kFloat32, modulation,
                                                         modulation, out_bf16, Precision::kBFloat16,
                                                         rows_f32, rows_f32, video, 1e-6f, stream);
             },
             stream));
  report("layer norm + modulation backward, residual's gradient",
         n * (2 + 4 + 4 + 4) + 2 * partial_bytes,
         micros(
             [&] {
               wam::kernels::layer_norm_modulate_backward(grad_bf16, Precision::kBFloat16, x_f32,
                                                          Precision::kFloat32, modulation, rows_f32,
                                                          rows_f32, residual_grad, out_f32, nullptr,
                                                          partials_a, partials_b, video, stream);
             },
             stream));
  // The same writing x's gradient in bfloat16 too, for the cross-attention's output product
  // (models/fused_norm.cc, docs/KERNELS.md version 44).
  report("layer norm + modulation backward, residual's gradient, bf16 copy",
         n * (2 + 4 + 4 + 4 + 2) + 2 * partial_bytes,
         micros(
             [&] {
               wam::kernels::layer_norm_modulate_backward(
                   grad_bf16, Precision::kBFloat16, x_f32, Precision::kFloat32, modulation,
                   rows_f32, rows_f32, residual_grad, out_f32, out_bf16, partials_a, partials_b,
                   video, stream);
             },
             stream));

  // The video q's RMSNorm + RoPE, read from the q/k/v product's rows (4608 apart) and written
  // into the joint q [16, 608, 1536] (models/fused_norm.cc's FusedJointQkv), heads of 96.
  wam::kernels::RmsNormRopeShape q;
  q.rows = video.rows;
  q.width = 1536;
  q.head_dim = 96;
  q.tokens = 576;
  q.x_row_stride = 3 * 1536;
  q.out_row_stride = 1536;
  q.out_sample_stride = 608 * 1536;
  q.grad_x_row_stride = 3 * 1536;
  const size_t qkv_bytes = n * 3 * 2, joint_bytes = static_cast<size_t>(16) * 608 * 1536 * 2;
  void* qkv = zeros(qkv_bytes);
  void* grad_qkv = zeros(qkv_bytes);
  void* joint = zeros(joint_bytes);
  auto* norm_weight = static_cast<float*>(zeros(1536 * 4));
  auto* rotation = static_cast<float*>(zeros(576 * 48 * 2 * 4));
  auto* weight_partials =
      static_cast<float*>(zeros(wam::kernels::rms_norm_rope_backward_blocks(q) * 1536 * 4));
  report("RMSNorm + RoPE forward, video q", n * (2 + 2),
         micros(
             [&] {
               wam::kernels::rms_norm_rope_forward(qkv, norm_weight, rotation, joint, rows_f32, q,
                                                   1e-6f, Precision::kBFloat16, stream);
             },
             stream));
  report("RMSNorm + RoPE backward, video q", n * (2 + 2 + 2),
         micros(
             [&] {
               wam::kernels::rms_norm_rope_backward(joint, qkv, norm_weight, rotation, rows_f32,
                                                    grad_qkv, weight_partials, q,
                                                    Precision::kBFloat16, stream);
             },
             stream));
  // The joint attention's v: the video stream's v columns of its q/k/v product into its rows of
  // the joint [16, 608, 1536] tensor, as version 29's 3-D copy and version 31's kernel move them.
  const wam::kernels::RowLayout v_columns{576 * 3 * 1536 * 2, 3 * 1536 * 2},
      joint_rows{608 * 1536 * 2, 1536 * 2};
  const auto* v_source = static_cast<const char*>(qkv) + 2 * 1536 * 2;
  cudaMemcpy3DParms v_copy = {};
  v_copy.srcPtr = {const_cast<char*>(v_source), 3 * 1536 * 2, 1536 * 2, 576};
  v_copy.dstPtr = {joint, 1536 * 2, 1536 * 2, 608};
  v_copy.extent = {1536 * 2, 576, 16};
  v_copy.kind = cudaMemcpyDeviceToDevice;
  report("joint v copied in, cudaMemcpy3DAsync", n * (2 + 2),
         micros([&] { check(cudaMemcpy3DAsync(&v_copy, stream), "cudaMemcpy3DAsync"); }, stream));
  if (!wam::kernels::copy_rows_supports(joint, joint_rows, v_source, v_columns, 16, 576,
                                        1536 * 2)) {
    std::fprintf(stderr, "copy_rows refused the joint v\n");
    std::exit(1);
  }
  report("joint v copied in, copy_rows", n * (2 + 2),
         micros(
             [&] {
               wam::kernels::copy_rows(joint, joint_rows, v_source, v_columns, 16, 576, 1536 * 2,
                                       stream);
             },
             stream));
  // GELU's derivative with the FFN's first bias gradient, video 9216 x 6144.
  const int64_t ffn = 6144;
  void* grad_activated = zeros(video.rows * ffn * 2);
  void* pre_activation = zeros(video.rows * ffn * 2);
  void* grad_pre = zeros(video.rows * ffn * 2);
  auto* gelu_partials =
      static_cast<float*>(zeros(wam::kernels::gelu_backward_blocks(video.rows) * ffn * 4));
  report("GELU backward with column sums, video FFN", static_cast<double>(video.rows) * ffn * 6,
         micros(
             [&] {
               wam::kernels::gelu_backward_with_column_sums(grad_activated, pre_activation,
                                                            video.rows, ffn, grad_pre,
                                                            gelu_partials, stream);
             },
             stream));

  // Column sums (bias gradients) of the products' bfloat16 gradients.
  void* workspace = zeros(wam::kernels::kEpilogueGemmWorkspaceBytes);
  auto* sums = static_cast<float*>(zeros(16384 * 4));
  struct Sums {
    const char* name;
    int64_t rows, width;
  };
  for (const Sums& s : {Sums{"column sums, video 1536 (output, cross query)", 9216, 1536},
                        Sums{"column sums, video q/k/v 4608", 9216, 4608},
                        Sums{"column sums, VLM context K/V 3072", 16400, 3072},
                        Sums{"column sums, action 1536", 512, 1536}}) {
    void* grad = zeros(static_cast<size_t>(s.rows * s.width) * 2);
    report(s.name, static_cast<double>(s.rows) * s.width * 2,
           micros(
               [&] {
                 if (!wam::kernels::column_sums(grad, s.rows, s.width, sums, Precision::kFloat32,
                                                workspace, stream)) {
                   std::fprintf(stderr, "column_sums refused %s\n", s.name);
                   std::exit(1);
                 }
               },
               stream));
    check(cudaFree(grad), "cudaFree");
  }
  // AdamW with the bfloat16 copies (version 9), over 64 tensors of 4M parameters: the step's
  // 1.05B parameters move 30 bytes each (param, moments read and written, gradient read, copy).
  {
    constexpr int kTensors = 64;
    constexpr int64_t kNumel = int64_t{1} << 22;
    std::vector<wam::kernels::AdamWTensor> tensors(kTensors);
    for (auto& t : tensors) {
      t.param = static_cast<float*>(zeros(kNumel * 4));
      t.grad = static_cast<const float*>(zeros(kNumel * 4));
      t.exp_avg = static_cast<float*>(zeros(kNumel * 4));
      t.exp_avg_sq = static_cast<float*>(zeros(kNumel * 4));
      t.bf16_copy = static_cast<uint16_t*>(zeros(kNumel * 2));
      t.numel = kNumel;
    }
    auto* scalars = static_cast<float*>(zeros(3 * 4));
    const float host_scalars[3] = {1e-4f, 1.0f, 1.0f};  // lr, step, grad scale
    check(cudaMemcpy(scalars, host_scalars, sizeof(host_scalars), cudaMemcpyHostToDevice),
          "cudaMemcpy");
    const wam::kernels::AdamWHyper hyper;
    report("AdamW with bfloat16 copies, 268M parameters", 30.0 * kTensors * kNumel,
           micros(
               [&] {
                 wam::kernels::adamw_step(tensors.data(), kTensors, hyper, scalars, scalars + 1,
                                          scalars + 2, stream);
               },
               stream));
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return 0;
}
