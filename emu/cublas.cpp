// cuBLAS and cuBLASLt for the emulator, implemented against the toolkit's own
// declarations (cublas_v2.h, cublasLt.h) so host code runs unchanged.
//
// Semantics follow NVIDIA's documentation: column-major matrices, op(A) is m x k,
// op(B) is k x n, C/D are m x n; D = alpha*op(A)op(B) + beta*C where C is not read
// when beta == 0; fp32 compute for every supported type (bf16/fp16 inputs are
// exact in fp32), one rounding to the output type. The inner product runs on
// OpenBLAS sgemm after converting op(A)/op(B) to dense fp32.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cblas.h>

#include <cmath>
#include <cstring>
#include <new>
#include <vector>

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
};

struct cublasLtContext {
  int unused = 0;
};

namespace gpt2 {
namespace emu {
namespace {

bool supported_storage(cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_16BF || t == CUDA_R_16F; }

float load(cudaDataType t, const void* base, int64_t index) {
  switch (t) {
    case CUDA_R_32F: return static_cast<const float*>(base)[index];
    case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
    default: return __half2float(static_cast<const __half*>(base)[index]);
  }
}

void store(cudaDataType t, void* base, int64_t index, float v) {
  switch (t) {
    case CUDA_R_32F: static_cast<float*>(base)[index] = v; break;
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16(v); break;
    default: static_cast<__half*>(base)[index] = __float2half(v); break;
  }
}

size_t type_bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

// A stored column-major matrix: element (r, c) of batch b is at
// ptr[b*batch_stride + r + c*ld].
struct Matrix {
  const void* ptr;
  cudaDataType type;
  int64_t ld;
  int64_t batch_stride;
};

// op(M) as dense fp32 row-major (rows x cols).
void gather(const Matrix& m, int64_t batch, bool transposed, int64_t rows, int64_t cols, std::vector<float>& out) {
  out.resize(static_cast<size_t>(rows * cols));
  int64_t base = batch * m.batch_stride;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out[static_cast<size_t>(r * cols + c)] =
          transposed ? load(m.type, m.ptr, base + c + r * m.ld) : load(m.type, m.ptr, base + r + c * m.ld);
}

// The GEMM core: acc (row-major m x n) = alpha * op(A) op(B) + beta * C.
void gemm_batch(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const Matrix& a,
                const Matrix& b, float beta, const Matrix* c, int64_t batch, std::vector<float>& a_buf,
                std::vector<float>& b_buf, std::vector<float>& acc) {
  acc.assign(static_cast<size_t>(m * n), 0.0f);
  if (k > 0 && alpha != 0.0f) {
    gather(a, batch, trans_a, m, k, a_buf);
    gather(b, batch, trans_b, k, n, b_buf);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, a_buf.data(), static_cast<int>(k), b_buf.data(), static_cast<int>(n), 0.0f,
                acc.data(), static_cast<int>(n));
  }
  if (beta != 0.0f && c != nullptr) {
    int64_t base = batch * c->batch_stride;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) acc[static_cast<size_t>(i * n + j)] += beta * load(c->type, c->ptr, base + i + j * c->ld);
  }
}

bool is_transposed(cublasOperation_t op) { return op == CUBLAS_OP_T || op == CUBLAS_OP_C; }
bool valid_op(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

bool fp32_compute(cublasComputeType_t t) {
  return t == CUBLAS_COMPUTE_32F || t == CUBLAS_COMPUTE_32F_PEDANTIC || t == CUBLAS_COMPUTE_32F_FAST_16F ||
         t == CUBLAS_COMPUTE_32F_FAST_16BF || t == CUBLAS_COMPUTE_32F_FAST_TF32;
}

// Type combinations cuBLAS offers with fp32 compute: A and B of one type, C of that
// type or fp32.
bool supported_combination(cudaDataType a, cudaDataType b, cudaDataType c) {
  return supported_storage(a) && a == b && (c == a || c == CUDA_R_32F);
}

cublasStatus_t gemm_common(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const void* alpha, const void* A, cudaDataType Atype, int lda, long long strideA,
                           const void* B, cudaDataType Btype, int ldb, long long strideB, const void* beta, void* C,
                           cudaDataType Ctype, int ldc, long long strideC, int batch_count,
                           cublasComputeType_t compute) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!valid_op(transa) || !valid_op(transb) || m < 0 || n < 0 || k < 0 || batch_count < 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  int rows_a = transa == CUBLAS_OP_N ? m : k;
  int rows_b = transb == CUBLAS_OP_N ? k : n;
  if (lda < std::max(1, rows_a) || ldb < std::max(1, rows_b) || ldc < std::max(1, m)) return CUBLAS_STATUS_INVALID_VALUE;
  if (!fp32_compute(compute) || !supported_combination(Atype, Btype, Ctype)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0 || batch_count == 0) return CUBLAS_STATUS_SUCCESS;
  // Pointer mode device or host: both are host-addressable in emulation.
  float alpha_v = *static_cast<const float*>(alpha), beta_v = *static_cast<const float*>(beta);
  Matrix a{A, Atype, lda, strideA}, b{B, Btype, ldb, strideB}, c{C, Ctype, ldc, strideC};
  std::vector<float> a_buf, b_buf, acc;
  for (int batch = 0; batch < batch_count; ++batch) {
    gemm_batch(is_transposed(transa), is_transposed(transb), m, n, k, alpha_v, a, b, beta_v, &c, batch, a_buf, b_buf,
               acc);
    int64_t base = batch * strideC;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) store(Ctype, C, base + i + j * ldc, acc[static_cast<size_t>(i * n + j)]);
  }
  return CUBLAS_STATUS_SUCCESS;
}

// ---- cuBLASLt descriptors, stored inside the toolkit's semi-opaque structs ----------------
struct LayoutDesc {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch_count;
  int64_t batch_stride;
  int32_t order;
};
static_assert(sizeof(LayoutDesc) <= sizeof(cublasLtMatrixLayoutOpaque_t), "layout descriptor too large");

struct MatmulDesc {
  cublasComputeType_t compute;
  cudaDataType scale_type;
  int32_t pointer_mode;
  int32_t trans_a, trans_b, trans_c;
  uint32_t epilogue;
  const void* bias;
  int64_t bias_batch_stride;
  int32_t bias_type;
  void* aux;
  int64_t aux_ld;
  int64_t aux_batch_stride;
  int32_t aux_type;
};
static_assert(sizeof(MatmulDesc) <= sizeof(cublasLtMatmulDescOpaque_t), "matmul descriptor too large");

struct PreferenceDesc {
  uint64_t max_workspace;
};

LayoutDesc* layout(cublasLtMatrixLayout_t d) { return reinterpret_cast<LayoutDesc*>(d); }
MatmulDesc* matmul(cublasLtMatmulDesc_t d) { return reinterpret_cast<MatmulDesc*>(d); }
PreferenceDesc* preference(cublasLtMatmulPreference_t d) { return reinterpret_cast<PreferenceDesc*>(d); }

template <class T>
cublasStatus_t set_value(T& field, const void* buf, size_t size) {
  if (buf == nullptr || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

template <class T>
cublasStatus_t get_value(const T& field, void* buf, size_t size, size_t* written) {
  if (size == 0 && written != nullptr) {
    *written = sizeof(T);
    return CUBLAS_STATUS_SUCCESS;
  }
  if (buf == nullptr || size < sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(buf, &field, sizeof(T));
  if (written != nullptr) *written = sizeof(T);
  return CUBLAS_STATUS_SUCCESS;
}

// GELU as cuBLASLt computes it: the tanh approximation.
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
float gelu(float x) {
  float u = kGeluScale * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(u));
}
float gelu_grad(float x) {
  float u = kGeluScale * (x + 0.044715f * x * x * x);
  float t = std::tanh(u);
  float du = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

enum EpilogueBits : uint32_t {
  kRelu = 2, kBias = 4, kDRelu = 8, kBGrad = 16, kGelu = 32, kDGelu = 64, kAux = 128, kBGradA = 256, kBGradB = 512
};

bool supported_epilogue(uint32_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: case CUBLASLT_EPILOGUE_RELU: case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_RELU_BIAS: case CUBLASLT_EPILOGUE_GELU: case CUBLASLT_EPILOGUE_GELU_AUX:
    case CUBLASLT_EPILOGUE_GELU_BIAS: case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: case CUBLASLT_EPILOGUE_DGELU:
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: case CUBLASLT_EPILOGUE_BGRADA: case CUBLASLT_EPILOGUE_BGRADB:
      return true;
    default:  // the ReLU bit-mask epilogues are not emulated
      return false;
  }
}

// Validates a cublasLtMatmul problem; shared by the heuristic query and the matmul.
cublasStatus_t check_problem(const MatmulDesc& d, const LayoutDesc& a, const LayoutDesc& b, const LayoutDesc& c,
                             const LayoutDesc& out) {
  if (!fp32_compute(d.compute) || d.scale_type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (d.trans_c != CUBLAS_OP_N) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!valid_op(static_cast<cublasOperation_t>(d.trans_a)) || !valid_op(static_cast<cublasOperation_t>(d.trans_b)))
    return CUBLAS_STATUS_INVALID_VALUE;
  for (const LayoutDesc* l : {&a, &b, &c, &out}) {
    if (l->order != CUBLASLT_ORDER_COL) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (l->ld < static_cast<int64_t>(std::max<uint64_t>(1, l->rows))) return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!supported_combination(a.type, b.type, out.type) || c.type != out.type) return CUBLAS_STATUS_NOT_SUPPORTED;
  bool ta = is_transposed(static_cast<cublasOperation_t>(d.trans_a));
  bool tb = is_transposed(static_cast<cublasOperation_t>(d.trans_b));
  uint64_t m = out.rows, n = out.cols, k = ta ? a.rows : a.cols;
  if ((ta ? a.cols : a.rows) != m || (tb ? b.rows : b.cols) != n || (tb ? b.cols : b.rows) != k ||
      c.rows != m || c.cols != n)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (a.batch_count != out.batch_count || b.batch_count != out.batch_count || c.batch_count != out.batch_count)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!supported_epilogue(d.epilogue)) return CUBLAS_STATUS_NOT_SUPPORTED;
  cudaDataType bias_type = d.bias_type == -1 ? out.type : static_cast<cudaDataType>(d.bias_type);
  cudaDataType aux_type = d.aux_type == -1 ? out.type : static_cast<cudaDataType>(d.aux_type);
  if ((d.epilogue & (kBias | kBGrad | kBGradA | kBGradB)) && bias_type != out.type && bias_type != CUDA_R_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (d.epilogue & kAux) {
    if (aux_type != out.type) return CUBLAS_STATUS_NOT_SUPPORTED;
    // Documented: the GELU aux leading dimension is a multiple of 8, at least rows of D.
    if (d.aux_ld < static_cast<int64_t>(m) || d.aux_ld % 8 != 0 || d.aux_batch_stride % 8 != 0)
      return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace
}  // namespace emu
}  // namespace gpt2

using namespace gpt2::emu;

extern "C" {

// ---- cuBLAS -------------------------------------------------------------------------------
cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new (std::nothrow) cublasContext();
  return *handle == nullptr ? CUBLAS_STATUS_ALLOC_FAILED : CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (workspace == nullptr && bytes != 0) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->math_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->math_mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    default: return "unknown error";
  }
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                              const float* beta, float* C, int ldc) {
  return gemm_common(handle, transa, transb, m, n, k, alpha, A, CUDA_R_32F, lda, 0, B, CUDA_R_32F, ldb, 0, beta, C,
                     CUDA_R_32F, ldc, 0, 1, CUBLAS_COMPUTE_32F);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* A, int lda,
                                         long long strideA, const float* B, int ldb, long long strideB,
                                         const float* beta, float* C, int ldc, long long strideC, int batchCount) {
  return gemm_common(handle, transa, transb, m, n, k, alpha, A, CUDA_R_32F, lda, strideA, B, CUDA_R_32F, ldb, strideB,
                     beta, C, CUDA_R_32F, ldc, strideC, batchCount, CUBLAS_COMPUTE_32F);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  (void)algo;
  return gemm_common(handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C, Ctype, ldc,
                     0, 1, computeType);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo) {
  (void)algo;
  return gemm_common(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C,
                     Ctype, ldc, strideC, batchCount, computeType);
}

// ---- cuBLASLt -----------------------------------------------------------------------------
cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new (std::nothrow) cublasLtContext();
  return *handle == nullptr ? CUBLAS_STATUS_ALLOC_FAILED : CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* out, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* d = new (std::nothrow) cublasLtMatrixLayoutOpaque_t();
  if (d == nullptr) return CUBLAS_STATUS_ALLOC_FAILED;
  *layout(d) = LayoutDesc{type, rows, cols, ld, 1, 0, CUBLASLT_ORDER_COL};
  *out = d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t d, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  if (d == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  LayoutDesc& l = *layout(d);
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: {
      uint32_t t;
      cublasStatus_t s = set_value(t, buf, size);
      if (s == CUBLAS_STATUS_SUCCESS) l.type = static_cast<cudaDataType>(t);
      return s;
    }
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return set_value(l.order, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return set_value(l.rows, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return set_value(l.cols, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_LD: return set_value(l.ld, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return set_value(l.batch_count, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return set_value(l.batch_stride, buf, size);
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t d, cublasLtMatrixLayoutAttribute_t attr,
                                                void* buf, size_t size, size_t* written) {
  if (d == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const LayoutDesc& l = *layout(d);
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return get_value(static_cast<uint32_t>(l.type), buf, size, written);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return get_value(l.order, buf, size, written);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return get_value(l.rows, buf, size, written);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return get_value(l.cols, buf, size, written);
    case CUBLASLT_MATRIX_LAYOUT_LD: return get_value(l.ld, buf, size, written);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return get_value(l.batch_count, buf, size, written);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return get_value(l.batch_stride, buf, size, written);
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* out, cublasComputeType_t compute,
                                        cudaDataType_t scale_type) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* d = new (std::nothrow) cublasLtMatmulDescOpaque_t();
  if (d == nullptr) return CUBLAS_STATUS_ALLOC_FAILED;
  *matmul(d) = MatmulDesc{compute, scale_type, CUBLASLT_POINTER_MODE_HOST, CUBLAS_OP_N, CUBLAS_OP_N, CUBLAS_OP_N,
                          CUBLASLT_EPILOGUE_DEFAULT, nullptr, 0, -1, nullptr, 0, 0, -1};
  *out = d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  if (d == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  MatmulDesc& m = *matmul(d);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return set_value(m.compute, buf, size);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return set_value(m.scale_type, buf, size);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return set_value(m.pointer_mode, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSA: return set_value(m.trans_a, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSB: return set_value(m.trans_b, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSC: return set_value(m.trans_c, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set_value(m.epilogue, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set_value(m.bias, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return set_value(m.bias_batch_stride, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return set_value(m.bias_type, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return set_value(m.aux, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return set_value(m.aux_ld, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: return set_value(m.aux_batch_stride, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return set_value(m.aux_type, buf, size);
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, void* buf,
                                              size_t size, size_t* written) {
  if (d == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const MatmulDesc& m = *matmul(d);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return get_value(m.compute, buf, size, written);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return get_value(m.scale_type, buf, size, written);
    case CUBLASLT_MATMUL_DESC_TRANSA: return get_value(m.trans_a, buf, size, written);
    case CUBLASLT_MATMUL_DESC_TRANSB: return get_value(m.trans_b, buf, size, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return get_value(m.epilogue, buf, size, written);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return get_value(m.bias, buf, size, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return get_value(m.aux, buf, size, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return get_value(m.aux_ld, buf, size, written);
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* out) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* d = new (std::nothrow) cublasLtMatmulPreferenceOpaque_t();
  if (d == nullptr) return CUBLAS_STATUS_ALLOC_FAILED;
  *preference(d) = PreferenceDesc{0};
  *out = d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t d,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  if (d == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return set_value(preference(d)->max_workspace, buf, size);
  // Other preferences only narrow the choice among GPU kernels: accepted, no effect.
  return buf == nullptr ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (op == nullptr || Adesc == nullptr || Bdesc == nullptr || Cdesc == nullptr || Ddesc == nullptr ||
      pref == nullptr || requested <= 0 || results == nullptr || returned == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  *returned = 0;
  cublasStatus_t s = check_problem(*matmul(op), *layout(Adesc), *layout(Bdesc), *layout(Cdesc), *layout(Ddesc));
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  std::memset(&results[0], 0, sizeof(results[0]));
  results[0].workspaceSize = 0;  // the emulated algorithm needs no workspace
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
  (void)algo, (void)workspace, (void)workspaceSizeInBytes, (void)stream;
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (op == nullptr || Adesc == nullptr || Bdesc == nullptr || Cdesc == nullptr || Ddesc == nullptr ||
      alpha == nullptr || beta == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  const MatmulDesc& d = *matmul(op);
  const LayoutDesc &la = *layout(Adesc), &lb = *layout(Bdesc), &lc = *layout(Cdesc), &ld = *layout(Ddesc);
  cublasStatus_t s = check_problem(d, la, lb, lc, ld);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  uint32_t e = d.epilogue;
  if ((e & (kBias | kBGrad | kBGradA | kBGradB)) && d.bias == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if ((e & kAux) && d.aux == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  bool ta = is_transposed(static_cast<cublasOperation_t>(d.trans_a));
  bool tb = is_transposed(static_cast<cublasOperation_t>(d.trans_b));
  int64_t m = static_cast<int64_t>(ld.rows), n = static_cast<int64_t>(ld.cols);
  int64_t k = static_cast<int64_t>(ta ? la.rows : la.cols);
  float alpha_v = *static_cast<const float*>(alpha), beta_v = *static_cast<const float*>(beta);
  cudaDataType bias_type = d.bias_type == -1 ? ld.type : static_cast<cudaDataType>(d.bias_type);
  cudaDataType aux_type = d.aux_type == -1 ? ld.type : static_cast<cudaDataType>(d.aux_type);
  Matrix a{A, la.type, la.ld, la.batch_stride}, b{B, lb.type, lb.ld, lb.batch_stride};
  Matrix c{C, lc.type, lc.ld, lc.batch_stride};
  std::vector<float> a_buf, b_buf, acc;
  for (int64_t batch = 0; batch < ld.batch_count; ++batch) {
    gemm_batch(ta, tb, m, n, k, alpha_v, a, b, beta_v, &c, batch, a_buf, b_buf, acc);
    int64_t bias_base = batch * d.bias_batch_stride;
    int64_t aux_base = batch * d.aux_batch_stride;
    void* aux = d.aux;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        float& x = acc[static_cast<size_t>(i * n + j)];
        if (e & kBias) x += load(bias_type, d.bias, bias_base + i);
        if (e & kGelu) {
          if (e & kAux) store(aux_type, aux, aux_base + i + j * d.aux_ld, x);  // GELU input, for backward
          x = gelu(x);
        } else if (e & kRelu) {
          x = x > 0.0f ? x : 0.0f;
        } else if (e & kDGelu) {
          x *= gelu_grad(load(aux_type, aux, aux_base + i + j * d.aux_ld));
        }
      }
    }
    int64_t d_base = batch * ld.batch_stride;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) store(ld.type, D, d_base + i + j * ld.ld, acc[static_cast<size_t>(i * n + j)]);
    void* bias_out = const_cast<void*>(d.bias);
    if (e & kBGrad) {  // bias gradient of the (GELU-gradient) result: sum over columns
      for (int64_t i = 0; i < m; ++i) {
        float sum = 0.0f;
        for (int64_t j = 0; j < n; ++j) sum += acc[static_cast<size_t>(i * n + j)];
        store(bias_type, bias_out, bias_base + i, sum);
      }
    }
    if (e & (kBGradA | kBGradB)) {  // reductions over the GEMM's k dimension of op(A) / op(B)
      bool from_a = (e & kBGradA) != 0;
      int64_t len = from_a ? m : n;
      for (int64_t idx = 0; idx < len; ++idx) {
        float sum = 0.0f;
        for (int64_t kk = 0; kk < k; ++kk) {
          sum += from_a ? load(la.type, A, batch * la.batch_stride + (ta ? kk + idx * la.ld : idx + kk * la.ld))
                        : load(lb.type, B, batch * lb.batch_stride + (tb ? idx + kk * lb.ld : kk + idx * lb.ld));
        }
        store(bias_type, bias_out, bias_base + idx, sum);
      }
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
