// cuBLASLt's heuristic choices timed on the compiled step's epilogue products (base preset, batch
// 16, RoboTwin shapes): per product, the first choice's time, the fastest of the first 16 and the
// product without its BGRADB bias gradient, and the sums over a step with each product's calls a
// step as estimated below (docs/KERNELS.md, versions 22 and 23). On the GPU machine:
//   nvcc -O2 -arch=sm_90 scripts/gemm-choices.cu -lcublasLt -o /tmp/gemm-choices
//   /tmp/gemm-choices
// The layouts are epilogue_gemm.cu's: the weight gradient with BGRADB (float32 out and bias), the
// FFN's first product with GELU_AUX_BIAS, and the output projection with its residual (beta 1).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                         \
  do {                                                                \
    auto s = (x);                                                     \
    if (s != 0) {                                                     \
      std::printf("error %d at %s:%d\n", (int)s, __FILE__, __LINE__); \
      std::exit(1);                                                   \
    }                                                                 \
  } while (0)

enum Kind { kWgradBias, kWgrad, kGelu, kResidual };

struct Case {
  const char* name;
  Kind kind;
  long rows, in, out;
  int per_step;
};

static void* scratch(size_t bytes) {
  void* p;
  CK(cudaMalloc(&p, bytes));
  CK(cudaMemset(p, 0, bytes));
  return p;
}

int main() {
  // name, kind, rows, in, out, calls a step: 20 layers; the video stream's three 1536 -> 1536
  // products (attention output, cross query, cross output) as one row of 60 calls; the contexts'
  // K/V rows 16 x 129 text and 16 x 1025 VLM tokens.
  const Case cases[] = {
      {"video qkv wgrad+bgrad", kWgradBias, 9216, 1536, 4608, 20},
      {"video out wgrad+bgrad", kWgradBias, 9216, 1536, 1536, 60},
      {"video ffn2 wgrad+bgrad", kWgradBias, 9216, 6144, 1536, 20},
      {"video ffn1 wgrad", kWgrad, 9216, 1536, 6144, 20},
      {"video ffn1 gelu fwd", kGelu, 9216, 1536, 6144, 20},
      {"video out residual fwd", kResidual, 9216, 1536, 1536, 20},
      {"action qkv wgrad+bgrad", kWgradBias, 512, 512, 4608, 20},
      {"action out wgrad+bgrad", kWgradBias, 512, 1536, 512, 40},
      {"action ffn2 wgrad+bgrad", kWgradBias, 512, 2048, 512, 20},
      {"action ffn1 gelu fwd", kGelu, 512, 512, 2048, 20},
      {"text kv wgrad+bgrad", kWgradBias, 2064, 1536, 3072, 20},
      {"vlm kv wgrad+bgrad", kWgradBias, 16400, 512, 1024, 20},
  };
  cublasLtHandle_t handle;
  CK(cublasLtCreate(&handle));
  const size_t workspace_bytes = 32u << 20;
  void* workspace = scratch(workspace_bytes);
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  double total_first = 0, total_best = 0, total_nobgrad = 0;
  for (const Case& c : cases) {
    cublasOperation_t ta, tb;
    long m, n, k, lda, ldb, ldd;
    cudaDataType_t dtype, btype;
    cublasLtEpilogue_t epi;
    if (c.kind == kWgradBias || c.kind == kWgrad) {
      ta = CUBLAS_OP_N;
      tb = CUBLAS_OP_T;
      m = c.in;
      n = c.out;
      k = c.rows;
      lda = c.in;
      ldb = c.out;
      ldd = c.in;
      dtype = btype = CUDA_R_32F;
      epi = c.kind == kWgradBias ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT;
    } else {
      ta = CUBLAS_OP_T;
      tb = CUBLAS_OP_N;
      m = c.out;
      n = c.rows;
      k = c.in;
      lda = c.in;
      ldb = c.in;
      ldd = c.out;
      dtype = btype = c.kind == kGelu ? CUDA_R_16BF : CUDA_R_32F;
      epi = c.kind == kGelu ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_BIAS;
    }
    void* a = scratch(size_t(m > 0 ? (ta == CUBLAS_OP_N ? m * k : k * m) : 0) * 2);
    void* b = scratch(size_t(k * n) * 2);
    void* d = scratch(size_t(m * n) * 4);
    void* cmat = scratch(size_t(m * n) * 4);
    void* bias = scratch(size_t(std::max(m, n)) * 4);
    void* aux = scratch(size_t(m * n) * 2);
    auto time_with = [&](cublasLtEpilogue_t epilogue, int max_algos, std::vector<float>* times) {
      cublasLtMatmulDesc_t desc;
      CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
      CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
      CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                        sizeof(epilogue)));
      CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &btype,
                                        sizeof(btype)));
      if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                          sizeof(bias)));
      }
      if (epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
        int64_t ld = ldd;
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                          sizeof(aux)));
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                          sizeof(ld)));
      }
      cublasLtMatrixLayout_t la, lb, ld;
      const bool an = ta == CUBLAS_OP_N, bn = tb == CUBLAS_OP_N;
      CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, an ? m : k, an ? k : m, lda));
      CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, bn ? k : n, bn ? n : k, ldb));
      CK(cublasLtMatrixLayoutCreate(&ld, dtype, m, n, ldd));
      cublasLtMatmulPreference_t pref;
      CK(cublasLtMatmulPreferenceCreate(&pref));
      uint64_t ws = workspace_bytes;
      CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                              sizeof(ws)));
      std::vector<cublasLtMatmulHeuristicResult_t> results(max_algos);
      int found = 0;
      CK(cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, ld, ld, pref, max_algos,
                                        results.data(), &found));
      const float alpha = 1, beta = c.kind == kResidual ? 1 : 0;
      void* cptr = c.kind == kResidual ? cmat : d;
      for (int i = 0; i < found; ++i) {
        auto go = [&] {
          return cublasLtMatmul(handle, desc, &alpha, a, la, b, lb, &beta, cptr, ld, d, ld,
                                &results[i].algo, workspace, workspace_bytes, stream);
        };
        if (go() != CUBLAS_STATUS_SUCCESS) {
          times->push_back(1e9);
          continue;
        }
        for (int w = 0; w < 3; ++w) go();
        const int reps = 20;
        CK(cudaEventRecord(e0, stream));
        for (int r = 0; r < reps; ++r) go();
        CK(cudaEventRecord(e1, stream));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        times->push_back(ms / reps);
      }
      cublasLtMatmulPreferenceDestroy(pref);
      cublasLtMatrixLayoutDestroy(la);
      cublasLtMatrixLayoutDestroy(lb);
      cublasLtMatrixLayoutDestroy(ld);
      cublasLtMatmulDescDestroy(desc);
    };
    std::vector<float> times;
    time_with(epi, 16, &times);
    if (times.empty()) {
      std::printf("%-26s no algorithm\n", c.name);
      continue;
    }
    const auto best = std::min_element(times.begin(), times.end());
    double nobgrad = 0;
    if (c.kind == kWgradBias) {
      std::vector<float> plain;
      time_with(CUBLASLT_EPILOGUE_DEFAULT, 1, &plain);
      nobgrad = plain.empty() ? 0 : plain[0];
    }
    const double tflop = 2.0 * c.rows * c.in * c.out / 1e9;
    std::printf("%-26s algos %2zu  first %.4f ms  best %.4f ms (#%ld)  x%.3f  %.0f TFLOPS best",
                c.name, times.size(), times[0], *best, long(best - times.begin()), times[0] / *best,
                tflop / *best);
    if (nobgrad > 0) std::printf("  no-bgrad first %.4f ms", nobgrad);
    std::printf("  all:");
    for (float t : times) std::printf(" %.3f", t);
    std::printf("\n");
    total_first += times[0] * c.per_step;
    total_best += *best * c.per_step;
    total_nobgrad += (nobgrad > 0 ? nobgrad : times[0]) * c.per_step;
    cudaFree(a);
    cudaFree(b);
    cudaFree(d);
    cudaFree(cmat);
    cudaFree(bias);
    cudaFree(aux);
  }
  std::printf("per step: first %.2f ms, best %.2f ms, first without bgrad %.2f ms\n", total_first,
              total_best, total_nobgrad);
  return 0;
}
