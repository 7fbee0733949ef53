// Written against cuBLASLt's C API by hand: LibTorch exposes none of these epilogues as an op
// (kernels/epilogue_gemm.h says why they are worth it), and LibTorch 1.13 has no FP8 product.
#include "kernels/epilogue_gemm.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

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
  uint32_t align_a = 0, align_b = 0, align_c = 0, align_d = 0;
  int device = 0;

  auto key() const {
    return std::make_tuple(trans_a, trans_b, m, n, k, lda, ldb, ldd, a_type, b_type, d_type,
                           bias_type, fast_accumulation, epilogue, aux_ld, adds_c, align_a, align_b,
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

// The fastest of `candidates` at `launch` (1 launch first, then 3 timed, on the caller's stream:
// the products run with the call's own operands, and the caller's launch after this writes the
// outputs again), or the first where none can be timed.
template <class Launch>
cublasLtMatmulAlgo_t fastest_of(const std::vector<cublasLtMatmulHeuristicResult_t>& candidates,
                                Launch launch, CUstream_st* stream) {
  cudaEvent_t begin = nullptr, end = nullptr;
  if (cudaEventCreate(&begin) != cudaSuccess || cudaEventCreate(&end) != cudaSuccess) {
    if (begin != nullptr) cudaEventDestroy(begin);
    return candidates.front().algo;
  }
  size_t best = 0;
  float best_ms = -1.0f;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (launch(candidates[i].algo) != CUBLAS_STATUS_SUCCESS) continue;
    constexpr int kTimed = 3;
    bool launched = cudaEventRecord(begin, stream) == cudaSuccess;
    for (int run = 0; launched && run < kTimed; ++run) {
      launched = launch(candidates[i].algo) == CUBLAS_STATUS_SUCCESS;
    }
    float ms = 0.0f;
    if (launched && cudaEventRecord(end, stream) == cudaSuccess &&
        cudaEventSynchronize(end) == cudaSuccess &&
        cudaEventElapsedTime(&ms, begin, end) == cudaSuccess && (best_ms < 0 || ms < best_ms)) {
      best = i;
      best_ms = ms;
    }
  }
  cudaEventDestroy(end);
  cudaEventDestroy(begin);
  return candidates[best].algo;
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
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    const bool capturing = cudaStreamIsCapturing(stream, &capture) != cudaSuccess ||
                           capture != cudaStreamCaptureStatusNone;
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
    std::vector<cublasLtMatmulHeuristicResult_t> results(capturing ? 1 : kCandidates);
    int found = 0;
    if (status == CUBLAS_STATUS_SUCCESS) {
      status = cublasLtMatmulAlgoGetHeuristic(
          handle, descriptors.desc_, descriptors.a_, descriptors.b_, descriptors.d_, descriptors.d_,
          preference, static_cast<int>(results.size()), results.data(), &found);
    }
    cublasLtMatmulPreferenceDestroy(preference);
    results.resize(status == CUBLAS_STATUS_SUCCESS ? static_cast<size_t>(found) : 0);
    choice.usable = !results.empty();
    choice.timed = !capturing;
    if (choice.usable) {
      choice.algorithm = capturing || results.size() == 1 ? results.front().algo
                                                          : fastest_of(results, launch, stream);
    }
  }
  *algorithm = choice.algorithm;
  return choice.usable;
}

bool run(Product p, const Pointers& pointers, void* workspace, CUstream_st* stream) {
  if (cudaGetDevice(&p.device) != cudaSuccess) throw std::runtime_error("epilogue_gemm: no device");
  p.align_a = alignment_of(pointers.a);
  p.align_b = alignment_of(pointers.b);
  p.align_d = alignment_of(pointers.d);
  p.adds_c = pointers.c != nullptr;
  p.align_c = p.adds_c ? alignment_of(pointers.c) : p.align_d;
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

}  // namespace

bool linear_weight_grad_with_bias_grad(const void* grad_out, const void* x,
                                       const LinearShape& shape, void* grad_weight, void* grad_bias,
                                       Precision precision, void* workspace, CUstream_st* stream) {
  // grad_weight^T [in, out] = x^T [in, rows] grad_out [rows, out]: A = x (column-major [in,
  // rows]), B = grad_out^T; BGRADB sums B over k = rows, one value per column of D.
  Product p = product_of(
      CUBLAS_OP_N, CUBLAS_OP_T, shape.in, shape.out, shape.rows, shape.in, shape.out, shape.in,
      grad_bias != nullptr ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT);
  p.d_type = p.bias_type = data_type(precision);
  return run(p, {x, grad_out, grad_weight, grad_bias, nullptr}, workspace, stream);
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
