// Written against cuBLASLt's C API by hand: LibTorch exposes none of these epilogues as an op
// (kernels/epilogue_gemm.h says why they are worth it), and LibTorch 1.13 has no FP8 product.
#include "kernels/epilogue_gemm.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/block_reduce.cuh"
#include "kernels/fp8.h"

namespace wam::kernels {
namespace {

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("epilogue_gemm: ") + what + ": " +
                             cublasLtGetStatusString(status));
  }
}

cudaDataType_t data_type(Precision precision) {
  return precision == Precision::kFloat32 ? CUDA_R_32F : CUDA_R_16BF;
}

// The largest power of two up to 256 dividing the address: cuBLASLt picks kernels for the
// alignment it is promised, and slices of tensors are less aligned than allocations.
uint32_t alignment_of(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

// One product in cuBLASLt's column-major terms: D [m, n] = op(A) [m, k] op(B) [k, n], a row-major
// [r, c] tensor being a column-major [c, r] one. Everything that decides the algorithm.
struct Product {
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldd = 0;
  cudaDataType_t a_type = CUDA_R_16BF, b_type = CUDA_R_16BF;
  cudaDataType_t d_type = CUDA_R_16BF, bias_type = CUDA_R_16BF;
  bool fast_accumulation = false;  // FP8 only
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  int64_t aux_ld = 0;   // 0: no auxiliary matrix
  bool adds_c = false;  // D = op(A) op(B) + C (C: D's type and layout), else C is unused
  // A strided batch where batches > 1: product i reads A and B and writes D that many elements
  // further on (a stride 0: every product the same matrix).
  int32_t batches = 1;
  int64_t a_batch_stride = 0, b_batch_stride = 0, d_batch_stride = 0;
  uint32_t align_a = 0, align_b = 0, align_c = 0, align_d = 0;
  int device = 0;

  auto key() const {
    return std::make_tuple(trans_a, trans_b, m, n, k, lda, ldb, ldd, a_type, b_type, d_type,
                           bias_type, fast_accumulation, epilogue, aux_ld, adds_c, batches,
                           a_batch_stride, b_batch_stride, d_batch_stride, align_a, align_b,
                           align_c, align_d, device);
  }
  bool operator<(const Product& other) const { return key() < other.key(); }
};

// A product of `epilogue`, D [m, n] = op(A) [m, k] op(B) [k, n], with A's, B's and D's leading
// dimensions.
Product product_of(cublasOperation_t trans_a, cublasOperation_t trans_b, int64_t m, int64_t n,
                   int64_t k, int64_t lda, int64_t ldb, int64_t ldd, cublasLtEpilogue_t epilogue) {
  Product p;
  p.trans_a = trans_a;
  p.trans_b = trans_b;
  p.m = m;
  p.n = n;
  p.k = k;
  p.lda = lda;
  p.ldb = ldb;
  p.ldd = ldd;
  p.epilogue = epilogue;
  return p;
}

struct Pointers {
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;
  void* bias = nullptr;
  void* aux = nullptr;
  const float* a_scale = nullptr;  // FP8 operands' dequantisation scales
  const float* b_scale = nullptr;
  const void* c = nullptr;  // added to the product (beta 1) where given
};

// RAII for the descriptors one product needs.
class Descriptors {
 public:
  explicit Descriptors(const Product& p) {
    check(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "descriptor");
    set(CUBLASLT_MATMUL_DESC_TRANSA, p.trans_a);
    set(CUBLASLT_MATMUL_DESC_TRANSB, p.trans_b);
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, p.epilogue);
    set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, p.bias_type);
    if (p.aux_ld != 0) set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, p.aux_ld);
    if (p.a_type != CUDA_R_16BF) {
      set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<int8_t>(p.fast_accumulation ? 1 : 0));
    }
    const bool a_n = p.trans_a == CUBLAS_OP_N, b_n = p.trans_b == CUBLAS_OP_N;
    check(cublasLtMatrixLayoutCreate(&a_, p.a_type, a_n ? p.m : p.k, a_n ? p.k : p.m, p.lda),
          "layout of A");
    check(cublasLtMatrixLayoutCreate(&b_, p.b_type, b_n ? p.k : p.n, b_n ? p.n : p.k, p.ldb),
          "layout of B");
    check(cublasLtMatrixLayoutCreate(&d_, p.d_type, p.m, p.n, p.ldd), "layout of D");
    if (p.batches > 1) {
      batch(a_, p.batches, p.a_batch_stride);
      batch(b_, p.batches, p.b_batch_stride);
      batch(d_, p.batches, p.d_batch_stride);
    }
  }
  ~Descriptors() {
    if (d_) cublasLtMatrixLayoutDestroy(d_);
    if (b_) cublasLtMatrixLayoutDestroy(b_);
    if (a_) cublasLtMatrixLayoutDestroy(a_);
    if (desc_) cublasLtMatmulDescDestroy(desc_);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;

  template <class T>
  void set(cublasLtMatmulDescAttributes_t attribute, const T& value) {
    check(cublasLtMatmulDescSetAttribute(desc_, attribute, &value, sizeof(value)), "attribute");
  }

  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;

 private:
  static void batch(cublasLtMatrixLayout_t layout, int32_t count, int64_t stride) {
    check(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                           sizeof(count)),
          "batch count");
    check(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                           &stride, sizeof(stride)),
          "batch stride");
  }
};

cublasLtHandle_t handle_for(int device) {
  static std::mutex mutex;
  static std::map<int, cublasLtHandle_t> handles;  // one per device, kept for the process
  std::lock_guard<std::mutex> lock(mutex);
  cublasLtHandle_t& handle = handles[device];
  if (handle == nullptr) check(cublasLtCreate(&handle), "cublasLtCreate");
  return handle;
}

// How many of cuBLASLt's heuristic choices a product's first call times: its first choice is not
// the fastest for several of the step's shapes (docs/KERNELS.md, version 22).
constexpr int kCandidates = 8;

// Milliseconds that `launch` (returning whether it launched) takes `times` times in a row on
// `stream`, or a negative value where it fails.
template <class Launch>
float elapsed_ms(Launch launch, int times, CUstream_st* stream) {
  cudaEvent_t begin = nullptr, end = nullptr;
  float ms = -1.0f;
  if (cudaEventCreate(&begin) == cudaSuccess && cudaEventCreate(&end) == cudaSuccess &&
      cudaEventRecord(begin, stream) == cudaSuccess) {
    bool launched = true;
    for (int run = 0; launched && run < times; ++run) launched = launch();
    if (!launched || cudaEventRecord(end, stream) != cudaSuccess ||
        cudaEventSynchronize(end) != cudaSuccess ||
        cudaEventElapsedTime(&ms, begin, end) != cudaSuccess) {
      ms = -1.0f;
    }
  }
  if (end != nullptr) cudaEventDestroy(end);
  if (begin != nullptr) cudaEventDestroy(begin);
  return ms;
}

// Launches timed per candidate and round: the first of each is left out.
constexpr int kTimedLaunches = 3;

// Rounds over the candidates, each candidate's least time kept: one round taken once per candidate
// picked different algorithms in different processes, since a clock or another process's load
// that changes during the timing weighs on whichever candidate runs then (docs/KERNELS.md, version
// 35).
constexpr int kTimingRounds = 3;

// The least time of each of `launches` (each returning whether it launched) over kTimingRounds
// rounds, the launches taken in turn in every round after one untimed run each; -1 for one that
// does not launch.
std::vector<float> least_times_ms(const std::vector<std::function<bool()>>& launches,
                                  CUstream_st* stream) {
  std::vector<float> least(launches.size(), -1.0f);
  std::vector<bool> launched(launches.size());
  for (size_t i = 0; i < launches.size(); ++i) launched[i] = launches[i]();
  for (int round = 0; round < kTimingRounds; ++round) {
    for (size_t i = 0; i < launches.size(); ++i) {
      if (!launched[i]) continue;
      const float ms = elapsed_ms(launches[i], kTimedLaunches, stream);
      if (ms >= 0 && (least[i] < 0 || ms < least[i])) least[i] = ms;
    }
  }
  return least;
}

// The index of the least of `times_ms` that is not negative, or `times_ms.size()` where none is.
size_t least_index(const std::vector<float>& times_ms) {
  size_t best = times_ms.size();
  for (size_t i = 0; i < times_ms.size(); ++i) {
    if (times_ms[i] >= 0 && (best == times_ms.size() || times_ms[i] < times_ms[best])) best = i;
  }
  return best;
}

// The fastest of `candidates` at `launch`, on the caller's stream with the call's own operands
// (the products write only their outputs, which the caller's launch after this writes again), or
// the first where none can be timed.
template <class Launch>
cublasLtMatmulAlgo_t fastest_of(const std::vector<cublasLtMatmulHeuristicResult_t>& candidates,
                                Launch launch, CUstream_st* stream) {
  std::vector<std::function<bool()>> launches;
  for (const auto& candidate : candidates) {
    launches.emplace_back(
        [&launch, &candidate] { return launch(candidate.algo) == CUBLAS_STATUS_SUCCESS; });
  }
  const size_t best = least_index(least_times_ms(launches, stream));
  return candidates[best < candidates.size() ? best : 0].algo;
}

bool capturing(CUstream_st* stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &capture) != cudaSuccess ||
         capture != cudaStreamCaptureStatusNone;
}

// The algorithm for a product, or none: the fastest of cuBLASLt's first kCandidates heuristic
// choices, timed at the product's first call outside a CUDA graph capture and kept per Product
// (the step's warm-up calls come before its capture); inside a capture, the first choice, timed at
// the next call outside one.
template <class Launch>
bool algorithm_for(cublasLtHandle_t handle, const Product& p, const Descriptors& descriptors,
                   Launch launch, CUstream_st* stream, cublasLtMatmulAlgo_t* algorithm) {
  struct Chosen {
    bool usable = false, timed = false;
    cublasLtMatmulAlgo_t algorithm{};
  };
  static std::mutex mutex;
  static std::map<Product, Chosen> chosen;
  std::lock_guard<std::mutex> lock(mutex);
  Chosen& choice = chosen[p];
  if (!choice.timed) {
    const bool in_capture = capturing(stream);
    cublasLtMatmulPreference_t preference = nullptr;
    check(cublasLtMatmulPreferenceCreate(&preference), "preference");
    const uint64_t workspace = kEpilogueGemmWorkspaceBytes;
    const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, p.align_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, p.align_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, p.align_c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, p.align_d}};
    cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
    for (const auto& [attribute, bytes] : alignments) {
      if (status == CUBLAS_STATUS_SUCCESS) {
        status = cublasLtMatmulPreferenceSetAttribute(preference, attribute, &bytes, sizeof(bytes));
      }
    }
    std::vector<cublasLtMatmulHeuristicResult_t> results(in_capture ? 1 : kCandidates);
    int found = 0;
    if (status == CUBLAS_STATUS_SUCCESS) {
      status = cublasLtMatmulAlgoGetHeuristic(
          handle, descriptors.desc_, descriptors.a_, descriptors.b_, descriptors.d_, descriptors.d_,
          preference, static_cast<int>(results.size()), results.data(), &found);
    }
    cublasLtMatmulPreferenceDestroy(preference);
    results.resize(status == CUBLAS_STATUS_SUCCESS ? static_cast<size_t>(found) : 0);
    choice.usable = !results.empty();
    choice.timed = !in_capture;
    if (choice.usable) {
      choice.algorithm = in_capture || results.size() == 1 ? results.front().algo
                                                           : fastest_of(results, launch, stream);
    }
  }
  *algorithm = choice.algorithm;
  return choice.usable;
}

// `p` with what the pointers and the current device decide.
Product resolved(Product p, const Pointers& pointers) {
  if (cudaGetDevice(&p.device) != cudaSuccess) throw std::runtime_error("epilogue_gemm: no device");
  p.align_a = alignment_of(pointers.a);
  p.align_b = alignment_of(pointers.b);
  p.align_d = alignment_of(pointers.d);
  p.adds_c = pointers.c != nullptr;
  p.align_c = p.adds_c ? alignment_of(pointers.c) : p.align_d;
  return p;
}

bool run(Product unresolved, const Pointers& pointers, void* workspace, CUstream_st* stream) {
  const Product p = resolved(unresolved, pointers);
  Descriptors descriptors(p);
  if (pointers.bias != nullptr) descriptors.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, pointers.bias);
  if (pointers.aux != nullptr) {
    descriptors.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, pointers.aux);
  }
  if (pointers.a_scale != nullptr) {
    descriptors.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, pointers.a_scale);
  }
  if (pointers.b_scale != nullptr) {
    descriptors.set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, pointers.b_scale);
  }
  const cublasLtHandle_t handle = handle_for(p.device);
  const float alpha = 1.0f, beta = p.adds_c ? 1.0f : 0.0f;
  // D = A B + C writes D only (C is never D here), so a launch may repeat while timing.
  const auto launch = [&](const cublasLtMatmulAlgo_t& algorithm) {
    return cublasLtMatmul(handle, descriptors.desc_, &alpha, pointers.a, descriptors.a_, pointers.b,
                          descriptors.b_, &beta, p.adds_c ? pointers.c : pointers.d, descriptors.d_,
                          pointers.d, descriptors.d_, &algorithm, workspace,
                          kEpilogueGemmWorkspaceBytes, stream);
  };
  cublasLtMatmulAlgo_t algorithm;
  if (!algorithm_for(handle, p, descriptors, launch, stream, &algorithm)) return false;
  check(launch(algorithm), "cublasLtMatmul");
  return true;
}

// ---- the bias gradient as column sums of our own, after the plain product ---------------------

constexpr int kSumThreads = 256;
constexpr int kSumVector = 8;          // bfloat16 columns a thread: one 16-byte load a row
constexpr int64_t kSumBlockRows = 32;  // rows a partial sum: 288 of the base preset's 9,216
constexpr int kReduceColumns = 32;     // columns a block of the reduction, a warp wide
constexpr int kReduceWarps = 8;

int64_t partial_blocks(int64_t rows) { return (rows + kSumBlockRows - 1) / kSumBlockRows; }

// partials [blocks, width]: the sums of each column of `grad` over each block of kSumBlockRows
// rows; 16-byte loads along a row, the sums in registers.
__global__ void __launch_bounds__(kSumThreads)
    column_partials_kernel(const __nv_bfloat16* grad, int64_t rows, int64_t width,
                           float* partials) {
  const int64_t column =
      (static_cast<int64_t>(blockIdx.x) * kSumThreads + threadIdx.x) * kSumVector;
  if (column >= width) return;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * kSumBlockRows;
  const int64_t last = first + kSumBlockRows < rows ? first + kSumBlockRows : rows;
  float sums[kSumVector] = {};
#pragma unroll 8
  for (int64_t row = first; row < last; ++row) {
    const uint4 raw = *reinterpret_cast<const uint4*>(grad + row * width + column);
    const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int pair = 0; pair < kSumVector / 2; ++pair) {
      const float2 value = __bfloat1622float2(pairs[pair]);
      sums[2 * pair] += value.x;
      sums[2 * pair + 1] += value.y;
    }
  }
  float* partial = partials + static_cast<int64_t>(blockIdx.y) * width + column;
  *reinterpret_cast<float4*>(partial) = make_float4(sums[0], sums[1], sums[2], sums[3]);
  *reinterpret_cast<float4*>(partial + 4) = make_float4(sums[4], sums[5], sums[6], sums[7]);
}

__device__ __forceinline__ void store_sum(float* out, float value) { *out = value; }
__device__ __forceinline__ void store_sum(__nv_bfloat16* out, float value) {
  *out = __float2bfloat16(value);
}

// out [width] = the partials summed over their blocks: warp w of a block adds blocks w, w + 8,
// ... of its 32 columns in order, then the warps' sums are added in warp order: the same bits on
// every run.
template <class Out>
__global__ void __launch_bounds__(kReduceColumns* kReduceWarps)
    sum_partials_kernel(const float* partials, int64_t blocks, int64_t width, Out* out) {
  __shared__ float warp_sums[kReduceWarps][kReduceColumns];
  const int lane = threadIdx.x % kReduceColumns, warp = threadIdx.x / kReduceColumns;
  const int64_t column = static_cast<int64_t>(blockIdx.x) * kReduceColumns + lane;
  float sum = 0.0f;
  if (column < width) {
    for (int64_t block = warp; block < blocks; block += kReduceWarps) {
      sum += partials[block * width + column];
    }
  }
  warp_sums[warp][lane] = sum;
  __syncthreads();
  if (warp == 0 && column < width) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kReduceWarps; ++w) total += warp_sums[w][lane];
    store_sum(out + column, total);
  }
}

// Whether column_sums takes `grad` [rows, width]: whole 16-byte loads, and the partials within the
// product's workspace, which the sums use after the product is done with it.
bool column_sums_apply(const void* grad, int64_t rows, int64_t width) {
  return rows > 0 && width % kSumVector == 0 && alignment_of(grad) >= 16 &&
         static_cast<size_t>(partial_blocks(rows) * width) * sizeof(float) <=
             kEpilogueGemmWorkspaceBytes;
}

// Runs whichever of `in_epilogue` and `separately` (each returning whether it ran) was faster for
// `key` at its first call outside a capture, both timed there; inside a capture before that,
// `in_epilogue`. Either falls back to the other where it cannot run.
template <class InEpilogue, class Separately>
bool faster_route(const Product& key, InEpilogue in_epilogue, Separately separately,
                  CUstream_st* stream) {
  static std::mutex mutex;
  static std::map<Product, bool> separately_faster;
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto found = separately_faster.find(key);
    if (found != separately_faster.end()) {
      return found->second ? separately() || in_epilogue() : in_epilogue() || separately();
    }
  }
  if (capturing(stream)) return in_epilogue() || separately();
  // Each route's untimed first run picks its products' algorithms.
  const size_t best = least_index(least_times_ms({in_epilogue, separately}, stream));
  if (best == 2) return false;
  const bool faster = best == 1;
  {
    std::lock_guard<std::mutex> lock(mutex);
    separately_faster.emplace(key, faster);
  }
  return faster ? separately() : in_epilogue();
}

}  // namespace

bool column_sums(const void* grad, int64_t rows, int64_t width, void* out, Precision precision,
                 void* workspace, CUstream_st* stream) {
  if (!column_sums_apply(grad, rows, width)) return false;
  auto* partials = static_cast<float*>(workspace);
  const int64_t per_block = int64_t{kSumThreads} * kSumVector;
  const dim3 grid(static_cast<unsigned>((width + per_block - 1) / per_block),
                  static_cast<unsigned>(partial_blocks(rows)));
  column_partials_kernel<<<grid, kSumThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(grad),
                                                           rows, width, partials);
  check_launch("column_partials_kernel");
  const auto columns = static_cast<unsigned>((width + kReduceColumns - 1) / kReduceColumns);
  if (precision == Precision::kFloat32) {
    sum_partials_kernel<<<columns, kReduceColumns * kReduceWarps, 0, stream>>>(
        partials, partial_blocks(rows), width, static_cast<float*>(out));
  } else {
    sum_partials_kernel<<<columns, kReduceColumns * kReduceWarps, 0, stream>>>(
        partials, partial_blocks(rows), width, static_cast<__nv_bfloat16*>(out));
  }
  check_launch("sum_partials_kernel");
  return true;
}

bool linear_weight_grad_with_bias_grad(const void* grad_out, const void* x,
                                       const LinearShape& shape, void* grad_weight, void* grad_bias,
                                       Precision precision, void* workspace, CUstream_st* stream) {
  // grad_weight^T [in, out] = x^T [in, rows] grad_out [rows, out]: A = x (column-major [in,
  // rows]), B = grad_out^T; BGRADB sums B over k = rows, one value per column of D.
  Product p = product_of(
      CUBLAS_OP_N, CUBLAS_OP_T, shape.in, shape.out, shape.rows, shape.in, shape.out, shape.in,
      grad_bias != nullptr ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT);
  p.d_type = p.bias_type = data_type(precision);
  const Pointers with_bias{x, grad_out, grad_weight, grad_bias, nullptr};
  if (grad_bias == nullptr || !column_sums_apply(grad_out, shape.rows, shape.out)) {
    return run(p, with_bias, workspace, stream);
  }
  // The bias gradient in BGRADB's epilogue, or the plain product and then our column sums:
  // BGRADB runs a kernel of its own after most of the step's products, slower than the bytes it
  // reads (docs/KERNELS.md, version 23), so each shape takes the faster.
  Product plain = p;
  plain.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const auto in_epilogue = [&] { return run(p, with_bias, workspace, stream); };
  const auto separately = [&] {
    return run(plain, {x, grad_out, grad_weight, nullptr, nullptr}, workspace, stream) &&
           column_sums(grad_out, shape.rows, shape.out, grad_bias, precision, workspace, stream);
  };
  return faster_route(resolved(p, with_bias), in_epilogue, separately, stream);
}

bool linear_forward_with_residual(const void* x, const void* weight, const float* bias,
                                  const float* residual, const LinearShape& shape, float* out,
                                  void* workspace, CUstream_st* stream) {
  // out^T [out, rows] = weight [out, in] x^T [in, rows] + residual^T: as linear_gelu_forward, with
  // C = the residual (column-major [out, rows], D's layout) and float32 D, C and bias.
  Product p = product_of(CUBLAS_OP_T, CUBLAS_OP_N, shape.out, shape.rows, shape.in, shape.in,
                         shape.in, shape.out, CUBLASLT_EPILOGUE_BIAS);
  p.d_type = p.bias_type = CUDA_R_32F;
  Pointers pointers{weight, x, out, const_cast<float*>(bias)};
  pointers.c = residual;
  return run(p, pointers, workspace, stream);
}

bool linear_row_groups(const void* x, const RowGroups& x_rows, const void* weight,
                       WeightLayout layout, const void* bias, const LinearShape& shape, void* out,
                       const RowGroups& out_rows, void* workspace, CUstream_st* stream) {
  const int64_t groups = x_rows.groups;
  if (groups < 1 || groups > INT32_MAX || out_rows.groups != groups || shape.rows % groups != 0 ||
      x_rows.row_stride < shape.in || out_rows.row_stride < shape.out) {
    return false;
  }
  // Per group, out^T [out, rows] = weight' [out, in] x^T [in, rows] as in linear_gelu_forward,
  // B's and D's columns (x's and out's rows) row_stride apart. weight' is a [out, in] weight
  // transposed (stored column-major [in, out]), or a [in, out] one as stored (column-major
  // [out, in]).
  const bool out_in = layout == WeightLayout::kOutIn;
  const int64_t rows = shape.rows / groups;
  Product p = product_of(out_in ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, shape.out, rows, shape.in,
                         out_in ? shape.in : shape.out, x_rows.row_stride, out_rows.row_stride,
                         bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
  p.batches = static_cast<int32_t>(groups);
  p.b_batch_stride = x_rows.group_stride;
  p.d_batch_stride = out_rows.group_stride;
  return run(p, {weight, x, out, const_cast<void*>(bias)}, workspace, stream);
}

bool linear_gelu_forward(const void* x, const void* weight, const void* bias,
                         const LinearShape& shape, void* activated, void* pre_activation,
                         void* workspace, CUstream_st* stream) {
  // out^T [out, rows] = weight [out, in] x^T [in, rows]: A = weight^T stored (column-major [in,
  // out]) transposed, B = x (column-major [in, rows]); bias and aux per row of D.
  Product p = product_of(CUBLAS_OP_T, CUBLAS_OP_N, shape.out, shape.rows, shape.in, shape.in,
                         shape.in, shape.out, CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
  p.aux_ld = shape.out;
  return run(p, {weight, x, activated, const_cast<void*>(bias), pre_activation}, workspace, stream);
}

namespace {

cudaDataType_t data_type(Fp8Format format) {
  return format == Fp8Format::kE4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

}  // namespace

bool fp8_product(const Fp8Operand& left, const Fp8Operand& right, int64_t rows, int64_t k,
                 int64_t n, const void* bias, void* out, Precision out_precision,
                 void* pre_activation, bool fast_accumulation, void* workspace,
                 CUstream_st* stream) {
  // Hopper's FP8 products take no E5M2 x E5M2 pair.
  if (left.format == Fp8Format::kE5M2 && right.format == Fp8Format::kE5M2) return false;
  // out^T [n, rows] = right [n, k] left^T [k, rows]: A = right (column-major [k, n]) transposed,
  // B = left (column-major [k, rows]): the "TN" layout FP8 products require.
  const cublasLtEpilogue_t epilogue = pre_activation != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                      : bias != nullptr         ? CUBLASLT_EPILOGUE_BIAS
                                                                : CUBLASLT_EPILOGUE_DEFAULT;
  Product p = product_of(CUBLAS_OP_T, CUBLAS_OP_N, n, rows, k, k, k, n, epilogue);
  p.a_type = data_type(right.format);
  p.b_type = data_type(left.format);
  p.fast_accumulation = fast_accumulation;
  p.d_type = data_type(out_precision);
  if (bias == nullptr) p.bias_type = p.d_type;
  if (pre_activation != nullptr) p.aux_ld = n;
  Pointers pointers{right.data, left.data, out, const_cast<void*>(bias), pre_activation};
  pointers.a_scale = right.scale_inverse;
  pointers.b_scale = left.scale_inverse;
  return run(p, pointers, workspace, stream);
}

}  // namespace wam::kernels
