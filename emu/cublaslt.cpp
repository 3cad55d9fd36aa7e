// cuBLASLt for the emulator, implemented against the toolkit's declarations
// (cublasLt.h) so host code runs unchanged. The arithmetic is emu/cublas.cpp's
// (fp32 GEMM core, one rounding to D's type) plus the epilogues. The compute type
// CUBLAS_COMPUTE_32F_FAST_TF32 rounds A's and B's elements to TF32 first (as
// emu/cublas.cpp); cuBLASLt has no math mode.
//
// The emulated library refuses what a GPU's cuBLASLt refuses (cublasLt.h, CUDA 13),
// so code tested here has a fallback wherever a GPU might need one:
//  * Alignment. The one emulated kernel family reads and writes every column of
//    A, B, C and D with 16-byte vectors (the least any GPU kernel family offers;
//    real GPUs may also have slower narrower ones, which this model omits). The
//    heuristic sees no A/B/C/D pointers, only CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*
//    (a promise about them; default 256): it returns CUBLAS_STATUS_SUCCESS with
//    zero results unless every promise is a multiple of 16 and every leading
//    dimension (and batch stride, when batched) is a multiple of 16 bytes.
//    cublasLtMatmul refuses with CUBLAS_STATUS_NOT_SUPPORTED a pointer less
//    aligned than its promise (what cuBLASLt returns for an under-aligned slice).
//  * Bias and aux vectors: D's type (the header's rule for non-IMMA/FP8 kernels:
//    NOT_SUPPORTED for the bias, INVALID_VALUE for the aux as documented). The
//    heuristic does not judge their pointers; at cublasLtMatmul one that is not
//    16-byte aligned faults like the GPU kernel would: CUBLAS_STATUS_EXECUTION_FAILED
//    and cudaErrorMisalignedAddress as the thread's last CUDA error.
//  * The switch of emu/control.h (set_cublaslt_mode, GPT2_EMU_CUBLASLT) makes the
//    heuristic refuse everything, in each of the ways the header allows, or
//    cublasLtMatmul refuse what the heuristic accepted (CUBLAS_STATUS_NOT_SUPPORTED).
//  * Bias and aux pointers: the heuristic takes their alignment from the values
//    the descriptor holds (null: the default 256); cublasLtMatmul refuses with
//    CUBLAS_STATUS_NOT_SUPPORTED a vector less aligned than that.
#include <cublasLt.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "emu/blas_internal.h"
#include "emu/control.h"
#include "emu/runtime_internal.h"

struct cublasLtContext {
  int unused = 0;
};

namespace gpt2 {
namespace emu {

namespace {

// ---- the refusal switch ---------------------------------------------------------------------
constexpr int kNoOverride = -1;
std::atomic<int> g_mode_override{kNoOverride};

CublasLtMode mode_from_env() {
  const char* env = std::getenv("GPT2_EMU_CUBLASLT");
  if (env == nullptr) return CublasLtMode::kStrict;
  const std::string v = env;
  if (v == "strict") return CublasLtMode::kStrict;
  if (v == "refuse") return CublasLtMode::kNoAlgorithm;
  if (v == "not_supported") return CublasLtMode::kNotSupported;
  if (v == "bad_state") return CublasLtMode::kBadState;
  if (v == "matmul_not_supported") return CublasLtMode::kMatmulNotSupported;
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    std::fprintf(stderr, "emu: ignoring GPT2_EMU_CUBLASLT=%s (expected strict|refuse|not_supported|bad_state|matmul_not_supported)\n", env);
  return CublasLtMode::kStrict;
}

// ---- descriptors, stored inside the toolkit's semi-opaque structs ---------------------------
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

// Matrices in the order of the MIN_ALIGNMENT preferences and of the algo's promises.
enum Operand { kA, kB, kC, kD, kOperands };
constexpr uint32_t kDefaultAlignment = 256;  // cublasLt.h: the preferences' default
constexpr uint64_t kVectorBytes = 16;        // the emulated kernels' access width

struct PreferenceDesc {
  uint64_t max_workspace;
  uint32_t min_alignment[kOperands];
};
static_assert(sizeof(PreferenceDesc) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "preference too large");

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

// ---- epilogues ------------------------------------------------------------------------------
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
constexpr uint32_t kBiasVector = kBias | kBGrad | kBGradA | kBGradB;  // epilogues with a bias (gradient) vector

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

cudaDataType bias_type_of(const MatmulDesc& d, const LayoutDesc& out) {
  return d.bias_type == -1 ? out.type : static_cast<cudaDataType>(d.bias_type);
}
cudaDataType aux_type_of(const MatmulDesc& d, const LayoutDesc& out) {
  return d.aux_type == -1 ? out.type : static_cast<cudaDataType>(d.aux_type);
}

// Validates a cublasLtMatmul problem; shared by the heuristic query and the matmul.
cublasStatus_t check_problem(const MatmulDesc& d, const LayoutDesc& a, const LayoutDesc& b, const LayoutDesc& c,
                             const LayoutDesc& out) {
  if (!fp32_compute(d.compute) || d.scale_type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (d.trans_c != CUBLAS_OP_N) return CUBLAS_STATUS_NOT_SUPPORTED;  // "Currently only CUBLAS_OP_N"
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
  // Bias and bias-gradient vectors have D's type (cublasLt.h, BIAS_DATA_TYPE / BIAS_POINTER;
  // the exceptions are IMMA and FP8 kernels, which are not emulated).
  if ((d.epilogue & kBiasVector) && bias_type_of(d, out) != out.type) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (d.epilogue & kAux) {
    // AUX_DATA_TYPE: "If set for an unsupported ... combination, cublasLtMatmul() will
    // return CUBLAS_INVALID_VALUE"; outside FP8 only D's type is supported.
    if (aux_type_of(d, out) != out.type) return CUBLAS_STATUS_INVALID_VALUE;
    // Documented: the GELU aux leading dimension is a multiple of 8, at least rows of D.
    if (d.aux_ld < static_cast<int64_t>(m) || d.aux_ld % 8 != 0 || d.aux_batch_stride % 8 != 0)
      return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

// ---- the alignment model --------------------------------------------------------------------
// Whether the 16-byte kernels can serve a matrix whose pointer is promised to be
// `promise`-aligned: the pointer and every column and batch start must be.
bool layout_fits(const LayoutDesc& l, uint32_t promise) {
  const int64_t elem = static_cast<int64_t>(type_bytes(l.type));
  if (promise == 0 || promise % kVectorBytes != 0) return false;
  if ((l.ld * elem) % static_cast<int64_t>(kVectorBytes) != 0) return false;
  return l.batch_count <= 1 || (l.batch_stride * elem) % static_cast<int64_t>(kVectorBytes) == 0;
}

bool layouts_fit(const LayoutDesc* const (&l)[kOperands], const uint32_t (&promise)[kOperands]) {
  for (int i = 0; i < kOperands; ++i)
    if (!layout_fits(*l[i], promise[i])) return false;
  return true;
}

bool aligned(const void* p, uint64_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The largest power of two up to kDefaultAlignment dividing p's address; a null
// pointer is taken to have the default (the heuristic cannot know better).
uint32_t pointer_alignment(const void* p) {
  uint32_t a = kDefaultAlignment;
  while (p != nullptr && a > 1 && !aligned(p, a)) a /= 2;
  return a;
}

// The algorithm handed out by the heuristic: a tag, whether it can run, the
// alignment promises it was chosen under (cublasLtMatmul holds the pointers to
// them) and the alignments of the bias and aux vectors whose pointers the
// descriptor held then ("routines that don't dereference this pointer, like
// cublasLtMatmulAlgoGetHeuristic() depend on its value to determine expected
// pointer alignment", cublasLt.h): a vector less aligned at cublasLtMatmul is
// refused as an under-aligned operand is.
constexpr uint64_t kAlgoTag = 0x47505432'4c54414cull;  // "GPT2LTAL"
struct AlgoInfo {
  bool runnable = false;
  uint32_t promise[kOperands] = {};
  uint32_t bias_align = kDefaultAlignment, aux_align = kDefaultAlignment;
};

cublasLtMatmulAlgo_t encode_algo(bool runnable, const uint32_t (&promise)[kOperands], const MatmulDesc& d) {
  cublasLtMatmulAlgo_t algo;
  std::memset(&algo, 0, sizeof algo);
  algo.data[0] = kAlgoTag;
  algo.data[1] = runnable ? 1 : 0;
  for (int i = 0; i < kOperands; ++i) algo.data[2 + i] = promise[i];
  algo.data[2 + kOperands] = pointer_alignment(d.bias);
  algo.data[3 + kOperands] = pointer_alignment(d.aux);
  return algo;
}

// False when `algo` did not come from the heuristic.
bool decode_algo(const cublasLtMatmulAlgo_t& algo, AlgoInfo* info) {
  if (algo.data[0] != kAlgoTag) return false;
  info->runnable = algo.data[1] == 1;
  for (int i = 0; i < kOperands; ++i) info->promise[i] = static_cast<uint32_t>(algo.data[2 + i]);
  info->bias_align = static_cast<uint32_t>(algo.data[2 + kOperands]);
  info->aux_align = static_cast<uint32_t>(algo.data[3 + kOperands]);
  return true;
}

// A bias or aux vector the kernel would read or write with misaligned vectors: on a
// GPU a fault (cudaErrorMisalignedAddress), here reported at once.
bool vector_misaligned(const void* p, int64_t batch_stride, cudaDataType type, int32_t batches) {
  const int64_t stride_bytes = batch_stride * static_cast<int64_t>(type_bytes(type));
  return !aligned(p, kVectorBytes) || (batches > 1 && stride_bytes % static_cast<int64_t>(kVectorBytes) != 0);
}

// The pointer checks of cublasLtMatmul.
cublasStatus_t check_pointers(const MatmulDesc& d, const LayoutDesc& out, const void* const (&ptr)[kOperands],
                              const AlgoInfo& info) {
  for (int i = 0; i < kOperands; ++i)
    if (!aligned(ptr[i], info.promise[i])) return CUBLAS_STATUS_NOT_SUPPORTED;  // broken alignment promise
  // A vector less aligned than the heuristic saw (set after the query, or changed).
  if (((d.epilogue & kBiasVector) && d.bias != nullptr && !aligned(d.bias, info.bias_align)) ||
      ((d.epilogue & kAux) && d.aux != nullptr && !aligned(d.aux, info.aux_align)))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if ((d.epilogue & kBiasVector) && d.bias == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if ((d.epilogue & kAux) && d.aux == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const bool bias_bad = (d.epilogue & kBiasVector) &&
                        vector_misaligned(d.bias, d.bias_batch_stride, bias_type_of(d, out), out.batch_count);
  const bool aux_bad = (d.epilogue & kAux) && !aligned(d.aux, kVectorBytes);
  if (bias_bad || aux_bad) {
    record_error(cudaErrorMisalignedAddress);
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

// The algorithm cublasLtMatmul runs: the heuristic's, or with algo == NULL the
// implicit query with default preferences (cublasLt documentation).
cublasStatus_t algo_for_matmul(const cublasLtMatmulAlgo_t* algo, const LayoutDesc* const (&l)[kOperands],
                               AlgoInfo* info) {
  if (cublaslt_mode() != CublasLtMode::kStrict) return CUBLAS_STATUS_NOT_SUPPORTED;  // no kernel (that runs)
  if (algo == nullptr) {
    info->runnable = true;
    std::fill(std::begin(info->promise), std::end(info->promise), kDefaultAlignment);
  } else if (!decode_algo(*algo, info)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!info->runnable || !layouts_fit(l, info->promise)) return CUBLAS_STATUS_NOT_SUPPORTED;
  return CUBLAS_STATUS_SUCCESS;
}

// ---- the computation ------------------------------------------------------------------------
struct Problem {
  const MatmulDesc& d;
  const LayoutDesc &la, &lb, &lc, &ld;
  bool ta, tb;
  int64_t m, n, k;
};

// Bias, activation or activation gradient of one batch entry's fp32 result (row-major m x n).
void apply_epilogue(const Problem& p, int64_t batch, std::vector<float>& acc) {
  const MatmulDesc& d = p.d;
  const uint32_t e = d.epilogue;
  const cudaDataType bias_type = bias_type_of(d, p.ld), aux_type = aux_type_of(d, p.ld);
  const int64_t bias_base = batch * d.bias_batch_stride, aux_base = batch * d.aux_batch_stride;
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      float& x = acc[static_cast<size_t>(i * p.n + j)];
      if (e & kBias) x += load(bias_type, d.bias, bias_base + i);
      if (e & kGelu) {
        if (e & kAux) store(aux_type, d.aux, aux_base + i + j * d.aux_ld, x);  // GELU input, for backward
        x = gelu(x);
      } else if (e & kRelu) {
        x = x > 0.0f ? x : 0.0f;
      } else if (e & kDGelu) {
        x *= gelu_grad(load(aux_type, d.aux, aux_base + i + j * d.aux_ld));
      }
    }
  }
}

// The bias-gradient outputs of one batch entry.
void bias_gradient(const Problem& p, int64_t batch, const void* A, const void* B, const std::vector<float>& acc) {
  const MatmulDesc& d = p.d;
  const uint32_t e = d.epilogue;
  const cudaDataType bias_type = bias_type_of(d, p.ld);
  const int64_t bias_base = batch * d.bias_batch_stride;
  void* out = const_cast<void*>(d.bias);
  if (e & kBGrad) {  // of the (GELU-gradient) result: sum over columns
    for (int64_t i = 0; i < p.m; ++i) {
      float sum = 0.0f;
      for (int64_t j = 0; j < p.n; ++j) sum += acc[static_cast<size_t>(i * p.n + j)];
      store(bias_type, out, bias_base + i, sum);
    }
  }
  if (e & (kBGradA | kBGradB)) {  // reductions over the GEMM's k dimension of op(A) / op(B)
    const bool from_a = (e & kBGradA) != 0;
    const LayoutDesc &la = p.la, &lb = p.lb;
    for (int64_t idx = 0; idx < (from_a ? p.m : p.n); ++idx) {
      float sum = 0.0f;
      for (int64_t kk = 0; kk < p.k; ++kk) {
        sum += from_a ? load(la.type, A, batch * la.batch_stride + (p.ta ? kk + idx * la.ld : idx + kk * la.ld))
                      : load(lb.type, B, batch * lb.batch_stride + (p.tb ? idx + kk * lb.ld : kk + idx * lb.ld));
      }
      store(bias_type, out, bias_base + idx, sum);
    }
  }
}

void run_matmul(const Problem& p, float alpha, const void* A, const void* B, float beta, const void* C, void* D) {
  Matrix a{A, p.la.type, p.la.ld, p.la.batch_stride}, b{B, p.lb.type, p.lb.ld, p.lb.batch_stride};
  Matrix c{C, p.lc.type, p.lc.ld, p.lc.batch_stride};
  const bool tf32 = p.d.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  std::vector<float> a_buf, b_buf, acc;
  for (int64_t batch = 0; batch < p.ld.batch_count; ++batch) {
    gemm_batch_tf32(tf32, p.ta, p.tb, p.m, p.n, p.k, alpha, a, b, beta, &c, batch, a_buf, b_buf, acc);
    apply_epilogue(p, batch, acc);
    const int64_t d_base = batch * p.ld.batch_stride;
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) store(p.ld.type, D, d_base + i + j * p.ld.ld, acc[static_cast<size_t>(i * p.n + j)]);
    bias_gradient(p, batch, A, B, acc);
  }
}

}  // namespace

void set_cublaslt_mode(std::optional<CublasLtMode> mode) {
  g_mode_override.store(mode ? static_cast<int>(*mode) : kNoOverride);
}

std::optional<CublasLtMode> cublaslt_mode_override() {
  const int v = g_mode_override.load();
  if (v == kNoOverride) return std::nullopt;
  return static_cast<CublasLtMode>(v);
}

CublasLtMode cublaslt_mode() { return cublaslt_mode_override().value_or(mode_from_env()); }

// Test-only call counters (process-wide, atomic), so a test can see that a caller
// reuses its descriptors and heuristic answers instead of rebuilding them per call.
// Not in control.h: a test declares the accessor itself (weak, so the same test
// source links against a GPU's cuBLASLt and skips there):
//   namespace gpt2::emu { struct CublasLtCounts { uint64_t heuristic, matmul_descs,
//   layouts, preferences, matmuls; }; CublasLtCounts cublaslt_counts(); }
struct CublasLtCounts {
  uint64_t heuristic, matmul_descs, layouts, preferences, matmuls;
};
namespace {
std::atomic<uint64_t> g_count_heuristic{0}, g_count_descs{0}, g_count_layouts{0}, g_count_prefs{0},
    g_count_matmuls{0};
}  // namespace
CublasLtCounts cublaslt_counts() {
  return CublasLtCounts{g_count_heuristic.load(), g_count_descs.load(), g_count_layouts.load(),
                        g_count_prefs.load(), g_count_matmuls.load()};
}

}  // namespace emu
}  // namespace gpt2

using namespace gpt2::emu;

extern "C" {

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

// ---- matrix layouts -------------------------------------------------------------------------
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* out, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  g_count_layouts.fetch_add(1);
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

// ---- matmul descriptors ---------------------------------------------------------------------
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* out, cublasComputeType_t compute,
                                        cudaDataType_t scale_type) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  g_count_descs.fetch_add(1);
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
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return get_value(m.bias_type, buf, size, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return get_value(m.aux, buf, size, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return get_value(m.aux_ld, buf, size, written);
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

// ---- preferences ----------------------------------------------------------------------------
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* out) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  g_count_prefs.fetch_add(1);
  auto* d = new (std::nothrow) cublasLtMatmulPreferenceOpaque_t();
  if (d == nullptr) return CUBLAS_STATUS_ALLOC_FAILED;
  *preference(d) = PreferenceDesc{0, {kDefaultAlignment, kDefaultAlignment, kDefaultAlignment, kDefaultAlignment}};
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
  PreferenceDesc& p = *preference(d);
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return set_value(p.max_workspace, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return set_value(p.min_alignment[kA], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return set_value(p.min_alignment[kB], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return set_value(p.min_alignment[kC], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return set_value(p.min_alignment[kD], buf, size);
    default:  // the others only narrow the choice among GPU kernels: accepted, no effect
      return buf == nullptr ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_SUCCESS;
  }
}

// ---- heuristic and matmul -------------------------------------------------------------------
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  g_count_heuristic.fetch_add(1);
  if (op == nullptr || Adesc == nullptr || Bdesc == nullptr || Cdesc == nullptr || Ddesc == nullptr ||
      pref == nullptr || requested <= 0 || results == nullptr || returned == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  *returned = 0;
  const LayoutDesc* const l[kOperands] = {layout(Adesc), layout(Bdesc), layout(Cdesc), layout(Ddesc)};
  cublasStatus_t s = check_problem(*matmul(op), *l[kA], *l[kB], *l[kC], *l[kD]);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  const CublasLtMode mode = cublaslt_mode();
  if (mode == CublasLtMode::kNotSupported) return CUBLAS_STATUS_NOT_SUPPORTED;
  const PreferenceDesc& p = *preference(pref);
  const bool strict = mode == CublasLtMode::kStrict || mode == CublasLtMode::kMatmulNotSupported;
  const bool fits = strict && layouts_fit(l, p.min_alignment);
  if (!fits && mode != CublasLtMode::kBadState) return CUBLAS_STATUS_SUCCESS;  // no algorithm
  std::memset(&results[0], 0, sizeof(results[0]));
  results[0].algo = encode_algo(fits, p.min_alignment, *matmul(op));
  results[0].workspaceSize = 0;  // the emulated algorithm needs no workspace
  results[0].state = fits ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
  (void)workspace, (void)workspaceSizeInBytes;
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  g_count_matmuls.fetch_add(1);
  if (op == nullptr || Adesc == nullptr || Bdesc == nullptr || Cdesc == nullptr || Ddesc == nullptr ||
      alpha == nullptr || beta == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  const MatmulDesc& d = *matmul(op);
  const LayoutDesc* const l[kOperands] = {layout(Adesc), layout(Bdesc), layout(Cdesc), layout(Ddesc)};
  cublasStatus_t s = check_problem(d, *l[kA], *l[kB], *l[kC], *l[kD]);
  AlgoInfo info;
  if (s == CUBLAS_STATUS_SUCCESS) s = algo_for_matmul(algo, l, &info);
  const void* const ptr[kOperands] = {A, B, C, D};
  if (s == CUBLAS_STATUS_SUCCESS) s = check_pointers(d, *l[kD], ptr, info);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  const bool ta = is_transposed(static_cast<cublasOperation_t>(d.trans_a));
  const bool tb = is_transposed(static_cast<cublasOperation_t>(d.trans_b));
  const int64_t m = static_cast<int64_t>(l[kD]->rows), n = static_cast<int64_t>(l[kD]->cols);
  const int64_t k = static_cast<int64_t>(ta ? l[kA]->rows : l[kA]->cols);
  const float alpha_v = *static_cast<const float*>(alpha), beta_v = *static_cast<const float*>(beta);
  // Descriptors are copied: the caller may change or destroy them once the call returns.
  auto work = [=, dd = d, la = *l[kA], lb = *l[kB], lc = *l[kC], ld = *l[kD]] {
    const Problem p{dd, la, lb, lc, ld, ta, tb, m, n, k};
    run_matmul(p, alpha_v, A, B, beta_v, C, D);
  };
  if (gpt2::emu::defers(stream)) gpt2::emu::enqueue(stream, work, "cublasLtMatmul");
  else if (gpt2::emu::drain_legacy() == cudaSuccess) work();
  else return CUBLAS_STATUS_EXECUTION_FAILED;
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
