// Linear layers: out[N,OC] = inp[N,C] @ w[OC,C]^T + bias, and the backward.
//
// Row-major tensors are column-major transposes, so every product is issued
// as its transpose: out^T[OC,N] = (w as C x OC)^T (inp as C x N), i.e. cuBLAS
// sees A = w (transposed), B = inp, D = out (OC x N, ld OC). Compute type fp32
// (CUBLAS_COMPUTE_32F: results comparable with the CPU backend), or with
// BlasContext::tf32 and float matrices CUBLAS_COMPUTE_32F_FAST_TF32 (inputs
// rounded to TF32 on tensor cores, fp32 accumulation); the matrices are T
// (float or __nv_bfloat16), the bias-gradient partials fp32.
//
// Two paths, selected per backend (CudaBackendOptions::use_cublaslt):
//   cuBLASLt (default)  forward: one cublasLtMatmul with the BIAS epilogue (bias
//                       added to the fp32 accumulator, one rounding, no extra
//                       pass over out). backward: dinp = dout @ w (beta 0);
//                       dw += dout^T @ inp (beta 1), in fp32 with the BGRADB
//                       epilogue writing the column sums of dout (the reduction
//                       over the GEMM's k = N) to an fp32 scratch vector that a
//                       small kernel adds to dbias (the epilogue overwrites, the
//                       API promises "+="). bf16 takes dbias from the column-sum
//                       kernels: BGRADB's vector must have D's type (bf16), i.e.
//                       the sum would be rounded before the "+=" rounds again.
//                       Every cuBLASLt call has a fallback computing the same:
//                       cuBLASLt may refuse any call (no algorithm, one whose
//                       state is not success, or NOT_SUPPORTED from
//                       cublasLtMatmul itself) and refuses an operand less
//                       aligned than its promise, so each call declares the real
//                       alignments (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*, and the
//                       bias/aux pointers set before the heuristic, which reads
//                       their alignment from them) and a
//                       refusal takes cuBLAS plus kernels: a bias is broadcast
//                       into out and the GEMM adds the product with beta 1 (the
//                       BIAS epilogue's arithmetic exactly), the bias gradient
//                       comes from the column-sum kernels. Descriptors, layouts
//                       and the heuristic's algorithm are built once per problem
//                       and alignment and reused (BlasContext::lt_plans); a call
//                       then only sets its bias/aux pointers and runs cublasLtMatmul.
//                       GELU (the fc layer, BlasContext::lt_gelu): forward with
//                       GELU_AUX_BIAS (pre-GELU output to the aux matrix, GELU of
//                       the fp32 value to D: one GEMM, no GELU pass over 4C
//                       columns); backward of the fcproj layer with DGELU (dinp
//                       multiplied by gelu'(aux) before its one rounding). The
//                       fallbacks run the GELU kernels, which in bf16 see the
//                       rounded pre-GELU value (one more rounding).
//   cuBLAS              cublasGemmEx for the products; bias added by a kernel
//                       (one read + write of out, a second rounding in bf16);
//                       dbias by a deterministic two-stage column sum (fixed row
//                       chunks, 128-bit loads where OC and dout allow, partials
//                       summed in chunk order).
#ifndef BACKEND_CUDA_MATMUL_CUH
#define BACKEND_CUDA_MATMUL_CUH

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gelu.cuh"
#include "backend/cuda/pack128.cuh"

namespace gpt2 {
namespace kern {

// ---- cuBLASLt plans ---------------------------------------------------------------------------
// Owns the cuBLASLt descriptors of one problem (released with the plan).
class LtCall {
 public:
  LtCall() = default;
  LtCall(const LtCall&) = delete;
  LtCall& operator=(const LtCall&) = delete;
  ~LtCall() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
};

// One problem's cached cuBLASLt state: its descriptors (the bias pointer is set per
// call) and the heuristic's algorithm, or a refusal (usable false, no descriptors).
struct LtPlan {
  bool usable = false;
  cublasLtMatmulAlgo_t algo{};
  std::unique_ptr<LtCall> call;
};
// type, transposes, m, n, k, leading dimensions, epilogue, alignments of A, B, D,
// bias, the aux leading dimension and alignment
using LtKey = std::array<int64_t, 16>;

struct BlasContext {
  cublasHandle_t blas = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* lt_workspace = nullptr;
  size_t lt_workspace_bytes = 0;
  cudaStream_t stream = nullptr;
  bool use_lt = true;
  bool lt_bias_grad = true;  // fp32: BGRADB epilogue for dbias (else the column-sum kernels)
  bool lt_gelu = true;       // GELU_AUX_BIAS / DGELU epilogues for the fc layer's GELU (else kernels)
  bool tf32 = false;         // float GEMMs on TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32)
  // Per problem: the descriptors and the heuristic's answer, built on the first call.
  mutable std::map<LtKey, LtPlan> lt_plans;
};

template <class T>
__global__ void add_bias_kernel(T* out, const T* bias, int N, int OC) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(N) * OC) return;
  out[idx] = from_float<T>(to_float(out[idx]) + to_float(bias[idx % OC]));
}

// out[n][o] = bias[o]: the C operand through which the cuBLAS fallback of the
// BIAS epilogue adds the bias inside the GEMM (beta 1).
template <class T>
__global__ void broadcast_bias_kernel(T* out, const T* bias, int N, int OC) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(N) * OC) return;
  out[idx] = bias[idx % OC];
}

// partials[chunk][OC]: column sums of rows [chunk*rows_per_chunk, ...) of x[N,OC].
// Block (kSumCols packs of P columns) x (kSumRows row lanes), 256 threads: lane y
// adds rows r0+y, r0+y+8, ... of its P columns (one 128-bit load per row when P is
// a pack), then the 8 lane sums are added in lane order through shared memory. The
// order of every column's sum depends only on N, so P = 1 (any OC, any alignment)
// and the packed kernel give the same bits, and the result is deterministic.
constexpr int kSumCols = 32, kSumRows = 8;
template <class T, int P>
__global__ void column_sum_partials_kernel(float* partials, const T* x, int N, int OC,
                                           int rows_per_chunk) {
  __shared__ float lanes[kSumRows][kSumCols * P];
  const int tx = threadIdx.x % kSumCols, ty = threadIdx.x / kSumCols;
  const int c0 = (blockIdx.x * kSumCols + tx) * P;
  const int r0 = blockIdx.y * rows_per_chunk;
  const int r1 = min(N, r0 + rows_per_chunk);
  float s[P];
  for (int k = 0; k < P; k++) s[k] = 0.0f;
  if (c0 < OC) {  // OC % P == 0 when P > 1
    for (int r = r0 + ty; r < r1; r += kSumRows) {
      float f[P];
      load_floats<P>(f, x + static_cast<size_t>(r) * OC + c0);
      for (int k = 0; k < P; k++) s[k] += f[k];
    }
  }
  for (int k = 0; k < P; k++) lanes[ty][tx * P + k] = s[k];
  __syncthreads();
  for (int j = threadIdx.x; j < kSumCols * P; j += blockDim.x) {
    const int c = blockIdx.x * kSumCols * P + j;
    if (c >= OC) continue;
    float t = 0.0f;
    for (int y = 0; y < kSumRows; y++) t += lanes[y][j];
    partials[static_cast<size_t>(blockIdx.y) * OC + c] = t;
  }
}

// dst[c] += sum_k partials[k][c], k in order.
template <class T>
__global__ void accumulate_partials_kernel(T* dst, const float* partials, int chunks, int OC) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= OC) return;
  float s = 0.0f;
  for (int k = 0; k < chunks; k++) s += partials[static_cast<size_t>(k) * OC + c];
  dst[c] = from_float<T>(to_float(dst[c]) + s);
}

inline int column_sum_chunks(int N) { return N < 32 ? 1 : (N / 32 < 64 ? N / 32 : 64); }
inline size_t matmul_backward_scratch_floats(int N, int OC) {
  return static_cast<size_t>(column_sum_chunks(N)) * OC;
}



// The largest power of two <= 256 (cuBLASLt's default promise) dividing x.
inline uint32_t pow2_alignment(uint64_t x) {
  uint32_t a = 256;
  while (a > 1 && x % a != 0) a /= 2;
  return a;
}
// What can be promised about a column-major matrix: its pointer and every column start.
inline uint32_t matrix_alignment(const void* p, int ld, size_t elem) {
  const uint32_t ptr = pow2_alignment(reinterpret_cast<uintptr_t>(p));
  const uint32_t col = pow2_alignment(static_cast<uint64_t>(ld) * elem);
  return ptr < col ? ptr : col;
}

// The compute type of a GEMM on matrices of `type`: TF32 only for fp32 matrices
// (cuBLAS offers CUBLAS_COMPUTE_32F_FAST_TF32 for CUDA_R_32F inputs only).
inline cublasComputeType_t compute_type(const BlasContext& ctx, cudaDataType_t type) {
  return ctx.tf32 && type == CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// Descriptors of D[m,n] = op(A)[m,k] op(B)[k,n] (+ beta D), fp32 compute. The bias
// vector's type is left at its default, D's type: the only one cuBLASLt supports
// here (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE); its pointer is set per call.
inline void lt_describe(LtCall& call, cublasComputeType_t compute, cudaDataType_t type, bool trans_a,
                        bool trans_b, int m, int n, int k, int lda, int ldb, int ldd,
                        cublasLtEpilogue_t epilogue, int aux_ld) {
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&call.op, compute, CUDA_R_32F));
  const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                              sizeof epilogue));
  if (aux_ld > 0) {  // the GELU input matrix: D's type (the default), column-major, ld % 8 == 0
    const int64_t ld = aux_ld;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
  }
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call.a, type, trans_a ? k : m, trans_a ? m : k, lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call.b, type, trans_b ? n : k, trans_b ? k : n, ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&call.d, type, m, n, ldd));
}

// The bias and GELU-aux vectors a call reads or writes (null: the epilogue has none).
inline void lt_set_vectors(LtCall& call, const void* bias, const void* aux) {
  if (bias != nullptr)
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  if (aux != nullptr)
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
}

// One algorithm from the heuristic, promised the operands' real alignments (C is D).
// Every refusal the header allows -- CUBLAS_STATUS_NOT_SUPPORTED, zero results, a
// result whose state is not success -- gives an unusable plan; other errors throw.
inline LtPlan lt_query(const BlasContext& ctx, LtCall& call, uint32_t align_a, uint32_t align_b,
                       uint32_t align_d) {
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&call.pref));
  const uint64_t ws = ctx.lt_workspace_bytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      call.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> promises[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_d},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d}};
  for (const auto& p : promises)
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(call.pref, p.first, &p.second, sizeof p.second));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      ctx.lt, call.op, call.a, call.b, call.d, call.d, call.pref, 1, &result, &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) return LtPlan{};
  CUBLAS_CHECK(status);
  if (found == 0 || result.state != CUBLAS_STATUS_SUCCESS) return LtPlan{};
  LtPlan plan;
  plan.usable = true;
  plan.algo = result.algo;
  return plan;
}

// Column-major D[m,n] = op(A)[m,k] op(B)[k,n] + beta D, all of type `type`, fp32
// compute, with `epilogue` (DEFAULT, BIAS, BGRADB, GELU_AUX(_BIAS), DGELU) whose
// vector `bias` has D's type (null when the epilogue has none) and whose GELU
// input matrix `aux` (m x n, ld aux_ld) has D's type too. Returns false, having
// queued nothing, when cuBLASLt offers no algorithm or cublasLtMatmul refuses the
// call (CUBLAS_STATUS_NOT_SUPPORTED; the plan is then dropped for good);
// the caller then computes the same with cuBLAS and kernels.
inline bool lt_matmul(const BlasContext& ctx, cudaDataType_t type, bool trans_a, bool trans_b,
                      int m, int n, int k, const void* A, int lda, const void* B, int ldb,
                      void* D, int ldd, float beta, cublasLtEpilogue_t epilogue, const void* bias,
                      const void* aux = nullptr, int aux_ld = 0) {
  const size_t elem = type == CUDA_R_32F ? 4 : 2;
  const uint32_t align_a = matrix_alignment(A, lda, elem), align_b = matrix_alignment(B, ldb, elem);
  const uint32_t align_d = matrix_alignment(D, ldd, elem);
  const uint32_t align_bias = bias != nullptr ? pow2_alignment(reinterpret_cast<uintptr_t>(bias)) : 0;
  const uint32_t align_aux = aux != nullptr ? matrix_alignment(aux, aux_ld, elem) : 0;
  // A bias vector under 16 bytes makes the GPU kernel fault (misaligned address);
  // the heuristic does not judge it, so this must. The GELU aux matrix is read and
  // written like D: the same 16 bytes for its pointer and columns (ld % 8 == 0 is
  // the documented rule, 16 bytes of bf16).
  if (bias != nullptr && align_bias < 16) return false;
  if (aux != nullptr && (align_aux < 16 || aux_ld % 8 != 0)) return false;
  const LtKey key{type, trans_a, trans_b, m, n, k, lda, ldb, ldd, epilogue,
                  align_a, align_b, align_d, align_bias, aux_ld, align_aux};
  auto plan = ctx.lt_plans.find(key);
  if (plan == ctx.lt_plans.end()) {
    LtPlan fresh;
    fresh.call = std::make_unique<LtCall>();
    lt_describe(*fresh.call, compute_type(ctx, type), type, trans_a, trans_b, m, n, k, lda, ldb, ldd, epilogue,
                aux != nullptr ? aux_ld : 0);
    // "Routines that don't dereference [the bias or aux pointer], like the heuristic,
    // depend on its value to determine expected pointer alignment" (cublasLt.h).
    lt_set_vectors(*fresh.call, bias, aux);
    const LtPlan answer = lt_query(ctx, *fresh.call, align_a, align_b, align_d);
    fresh.usable = answer.usable;
    fresh.algo = answer.algo;
    if (!fresh.usable) fresh.call.reset();  // a refusal keeps no descriptors
    plan = ctx.lt_plans.emplace(key, std::move(fresh)).first;
  }
  if (!plan->second.usable) return false;
  LtCall& call = *plan->second.call;
  lt_set_vectors(call, bias, aux);  // this call's vectors: the key holds their alignments
  const float alpha = 1.0f;
  const cublasStatus_t status = cublasLtMatmul(ctx.lt, call.op, &alpha, A, call.a, B, call.b, &beta, D, call.d, D,
                                               call.d, &plan->second.algo, ctx.lt_workspace,
                                               ctx.lt_workspace_bytes, ctx.stream);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) {  // refused at execution: nothing queued; never ask again
    plan->second.usable = false;
    plan->second.call.reset();
    return false;
  }
  CUBLAS_CHECK(status);
  return true;
}

// ---- cuBLAS and kernels -----------------------------------------------------------------------
// Column-major C = op(A) op(B) + beta C, type T, fp32 (or TF32) compute.
template <class T>
void gemm_ex(const BlasContext& ctx, bool trans_a, bool trans_b, int m, int n, int k, const T* A,
             int lda, const T* B, int ldb, float beta, T* C, int ldc) {
  const float alpha = 1.0f;
  const cudaDataType_t type = cuda_data_type<T>();
  CUBLAS_CHECK(cublasGemmEx(ctx.blas, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                            trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, A, type, lda, B,
                            type, ldb, &beta, C, type, ldc, compute_type(ctx, type),
                            CUBLAS_GEMM_DEFAULT));
}

constexpr int kMatmulBlock = 256;

template <class T>
void launch_bias_kernel(const BlasContext& ctx, bool broadcast, T* out, const T* bias, int N, int OC) {
  auto kernel = broadcast ? broadcast_bias_kernel<T> : add_bias_kernel<T>;
  LAUNCH_KERNEL(kernel, ceil_div(static_cast<size_t>(N) * OC, kMatmulBlock), kMatmulBlock, 0,
                ctx.stream, out, bias, N, OC);
}

// True when the column sums of dout[N,OC] take the packed kernel.
template <class T>
bool column_sums_pack(const T* dout, int OC) {
  return can_pack(static_cast<size_t>(OC), kPack<T>, dout);
}

// dbias[OC] += column sums of dout[N,OC] (fixed row chunks, partials in order).
template <class T>
void column_sums_into(const BlasContext& ctx, T* dbias, float* scratch, const T* dout, int N, int OC) {
  const int chunks = column_sum_chunks(N);
  const int rows_per_chunk = static_cast<int>(ceil_div(N, chunks));
  auto accumulate_kernel = accumulate_partials_kernel<T>;
  if (column_sums_pack(dout, OC)) {
    auto partials_kernel = column_sum_partials_kernel<T, kPack<T>>;
    LAUNCH_KERNEL(partials_kernel, dim3(ceil_div(OC, kSumCols * kPack<T>), chunks), kSumCols * kSumRows, 0,
                  ctx.stream, scratch, dout, N, OC, rows_per_chunk);
  } else {
    auto partials_kernel = column_sum_partials_kernel<T, 1>;
    LAUNCH_KERNEL(partials_kernel, dim3(ceil_div(OC, kSumCols), chunks), kSumCols * kSumRows, 0,
                  ctx.stream, scratch, dout, N, OC, rows_per_chunk);
  }
  LAUNCH_KERNEL(accumulate_kernel, ceil_div(OC, kMatmulBlock), kMatmulBlock, 0, ctx.stream, dbias,
                scratch, chunks, OC);
}

template <class T>
void matmul_forward(const BlasContext& ctx, T* out, const T* inp, const T* w, const T* bias,
                    int N, int C, int OC) {
  const cudaDataType_t type = cuda_data_type<T>();
  if (ctx.use_lt) {
    if (lt_matmul(ctx, type, true, false, OC, N, C, w, C, inp, C, out, OC, 0.0f,
                  bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias))
      return;
    if (bias != nullptr) {  // refused: the BIAS epilogue's arithmetic from cuBLAS, beta 1
      launch_bias_kernel<T>(ctx, true, out, bias, N, OC);
      gemm_ex<T>(ctx, true, false, OC, N, C, w, C, inp, C, 1.0f, out, OC);
      return;
    }
  }
  gemm_ex<T>(ctx, true, false, OC, N, C, w, C, inp, C, 0.0f, out, OC);
  if (bias != nullptr) launch_bias_kernel<T>(ctx, false, out, bias, N, OC);
}

// Rows [0, R) of a weight gradient whose dout columns start at `dout_cols`
// (row-major dout[N, ld], only R of its columns read): dw[R,C] += dout_cols^T inp,
// i.e. dw^T[C,R] += inp^T[C,N] (dout_cols^T)^T[N,R] -- matmul_backward's dw GEMM
// with n = R and the same leading dimension, so on the emulator every element is
// the same dot product as in the whole-table GEMM.
template <class T>
void matmul_backward_weight_rows(const BlasContext& ctx, T* dw, const T* dout_cols, const T* inp, int N, int C,
                                 int ld, int R) {
  const cudaDataType_t type = cuda_data_type<T>();
  if (!ctx.use_lt || !lt_matmul(ctx, type, false, true, C, R, N, inp, C, dout_cols, ld, dw, C, 1.0f,
                                CUBLASLT_EPILOGUE_DEFAULT, nullptr))
    gemm_ex<T>(ctx, false, true, C, R, N, inp, C, dout_cols, ld, 1.0f, dw, C);
}

// dinp^T[C,N] = w^T[C,OC] dout^T[OC,N], overwritten.
template <class T>
void matmul_backward_dinp(const BlasContext& ctx, T* dinp, const T* dout, const T* w, int N, int C, int OC) {
  if (!ctx.use_lt || !lt_matmul(ctx, cuda_data_type<T>(), false, false, C, N, OC, w, C, dout, OC, dinp, C, 0.0f,
                                CUBLASLT_EPILOGUE_DEFAULT, nullptr))
    gemm_ex<T>(ctx, false, false, C, N, OC, w, C, dout, OC, 0.0f, dinp, C);
}

// dw^T[C,OC] += inp^T[C,N] (dout^T)^T[N,OC] (dw null: dbias only) and dbias[OC] +=
// column sums of dout; in fp32 one BGRADB GEMM writes the sums to scratch[OC].
template <class T>
void matmul_backward_weights(const BlasContext& ctx, T* dw, T* dbias, float* scratch, const T* dout, const T* inp,
                             int N, int C, int OC) {
  const cudaDataType_t type = cuda_data_type<T>();
  const bool bgradb = dw != nullptr && dbias != nullptr && ctx.use_lt && ctx.lt_bias_grad && type == CUDA_R_32F;
  if (bgradb && lt_matmul(ctx, type, false, true, C, OC, N, inp, C, dout, OC, dw, C, 1.0f,
                          CUBLASLT_EPILOGUE_BGRADB, scratch)) {
    auto accumulate_kernel = accumulate_partials_kernel<T>;
    LAUNCH_KERNEL(accumulate_kernel, ceil_div(OC, kMatmulBlock), kMatmulBlock, 0, ctx.stream,
                  dbias, scratch, 1, OC);
    return;
  }
  if (dw != nullptr) matmul_backward_weight_rows<T>(ctx, dw, dout, inp, N, C, OC, OC);
  if (dbias != nullptr) column_sums_into<T>(ctx, dbias, scratch, dout, N, OC);
}

// scratch: matmul_backward_scratch_floats(N, OC) floats (used only with dbias)
template <class T>
void matmul_backward(const BlasContext& ctx, T* dinp, T* dw, T* dbias, float* scratch,
                     const T* dout, const T* inp, const T* w, int N, int C, int OC) {
  matmul_backward_dinp<T>(ctx, dinp, dout, w, N, C, OC);
  matmul_backward_weights<T>(ctx, dw, dbias, scratch, dout, inp, N, C, OC);
}

// The fc layer and its GELU: pre[N,OC] = inp @ w^T + bias, out = gelu(pre). With
// cuBLASLt one GEMM writes both (GELU_AUX_BIAS: pre is the aux matrix, ld OC, and
// GELU is taken of the unrounded fp32 value); else the GEMM and the GELU kernel.
template <class T>
void matmul_gelu_forward(const BlasContext& ctx, T* out, T* pre, const T* inp, const T* w, const T* bias,
                         int N, int C, int OC) {
  const cublasLtEpilogue_t epilogue = bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  if (ctx.use_lt && ctx.lt_gelu &&
      lt_matmul(ctx, cuda_data_type<T>(), true, false, OC, N, C, w, C, inp, C, out, OC, 0.0f, epilogue, bias, pre,
                OC))
    return;
  matmul_forward<T>(ctx, pre, inp, w, bias, N, C, OC);
  gelu_forward<T>(out, pre, static_cast<size_t>(N) * OC, ctx.stream);
}

// matmul_backward of the layer after a GELU: dinp = (dout @ w) * gelu'(gelu_inp),
// gelu_inp [N,C] the GELU's input. With cuBLASLt the DGELU epilogue applies gelu'
// to the fp32 product (aux = gelu_inp, ld C); else the GEMM, then the GELU
// backward kernel in place.
template <class T>
void matmul_gelu_backward(const BlasContext& ctx, T* dinp, T* dw, T* dbias, float* scratch, const T* dout,
                          const T* inp, const T* w, const T* gelu_inp, int N, int C, int OC) {
  if (!ctx.use_lt || !ctx.lt_gelu ||
      !lt_matmul(ctx, cuda_data_type<T>(), false, false, C, N, OC, w, C, dout, OC, dinp, C, 0.0f,
                 CUBLASLT_EPILOGUE_DGELU, nullptr, gelu_inp, C)) {
    matmul_backward_dinp<T>(ctx, dinp, dout, w, N, C, OC);
    gelu_backward<T>(dinp, gelu_inp, dinp, static_cast<size_t>(N) * C, ctx.stream);
  }
  matmul_backward_weights<T>(ctx, dw, dbias, scratch, dout, inp, N, C, OC);
}

}  // namespace kern
}  // namespace gpt2

#endif  // BACKEND_CUDA_MATMUL_CUH
