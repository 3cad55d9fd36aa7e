// The CPU backend's layer math, written once over the scalar type S.
//
// Every op is a function template instantiated for float (what CpuBackend runs)
// and double (what test/backend/ runs for finite-difference gradient checks), so
// the code under test in double precision is the very code the trainer runs in
// fp32. Definitions live in one .cpp per layer next to this header, each with
// its numerics and memory-traffic notes; docs/backend-cpu.md summarises them.
//
// Shapes and "=" / "+=" semantics are exactly those of backend/backend.h. All
// pointers are host pointers; outputs never alias inputs unless stated.
#ifndef BACKEND_CPU_OPS_H
#define BACKEND_CPU_OPS_H

#include <cstddef>
#include <cstdint>

#include "util/philox.h"

namespace gpt2 {
namespace cpu {

// Which library runs the fp32 GEMMs (fp64 is always OpenBLAS's dgemm): oneDNN's
// sgemm where the build found it (blas.cpp; faster on the step's shapes, docs/
// backend-cpu.md), else OpenBLAS.
enum class GemmLibrary : uint8_t { kOneDnn, kOpenBlas };
bool have_onednn();  // built with oneDNN
GemmLibrary default_gemm_library();
// GPT2_CPU_GEMM=onednn|openblas, else the default; throws on another value or
// on onednn in a build without it.
GemmLibrary gemm_library_from_env();
const char* gemm_library_name(GemmLibrary lib);

// How the GEMMs use the cores (see blas.cpp for the measurements behind it).
enum class GemmThreading : uint8_t {
  kOpenMpSplit,  // the library single-threaded, the output split across our OpenMP threads
  kLibrary,      // OpenBLAS's own thread pool, called from serial code (OpenBLAS only)
};
// Execution context passed to every op: how many OpenMP threads to use.
struct Exec {
  int threads = 1;
  GemmLibrary blas = default_gemm_library();
  GemmThreading gemm = GemmThreading::kOpenMpSplit;  // oneDNN runs nothing else (blas.cpp: signals)
};

// OpenMP default thread count (omp_get_max_threads) when `threads` <= 0.
int resolve_threads(int threads);

// ---- BLAS (blas.cpp) ----------------------------------------------------------
// Row-major C[M,N] = alpha * op(A)[M,K] @ op(B)[K,N] + beta * C, op = transpose
// when the flag is set. sgemm for float, dgemm for double.
template <class S>
void gemm(const Exec& ex, bool trans_a, bool trans_b, int M, int N, int K, S alpha,
          const S* A, int lda, const S* B, int ldb, S beta, S* C, int ldc);
// The same product on the calling thread only, for use inside an op's own
// OpenMP region; call pin_blas_to_one_thread() from serial code first.
template <class S>
void gemm_serial(const Exec& ex, bool trans_a, bool trans_b, int M, int N, int K, S alpha, const S* A, int lda,
                 const S* B, int ldb, S beta, S* C, int ldc);
void pin_blas_to_one_thread();

// ---- encoder (encoder.cpp) ------------------------------------------------------
template <class S>
void encoder_forward(const Exec& ex, S* out, const int32_t* tokens, const S* wte, const S* wpe,
                     int B, int T, int C);
// dwte may be nullptr (dwpe only).
template <class S>
void encoder_backward(const Exec& ex, S* dwte, S* dwpe, const S* dout, const int32_t* tokens,
                      int B, int T, int C);
// dwte_rows[tokens[n] - v0, :] += dout[n, :] for the N rows whose token lies
// in [v0, v0 + rows): encoder_backward's dwte restricted to a vocabulary window,
// the same additions in the same order.
template <class S>
void embedding_backward_rows(const Exec& ex, S* dwte_rows, const S* dout, const int32_t* tokens,
                             long N, int C, int v0, int rows);

// ---- layernorm (layernorm.cpp) --------------------------------------------------
template <class S>
void layernorm_forward(const Exec& ex, S* out, S* mean, S* rstd, const S* inp, const S* w,
                       const S* b, int N, int C);
template <class S>
void layernorm_backward(const Exec& ex, S* dinp, S* dw, S* db, const S* dout, const S* inp,
                        const S* w, const S* mean, const S* rstd, int N, int C);

// ---- matmul (matmul.cpp) ---------------------------------------------------------
// bias / dbias / dw may be nullptr.
template <class S>
void matmul_forward(const Exec& ex, S* out, const S* inp, const S* w, const S* bias, int N, int C,
                    int OC);
template <class S>
void matmul_backward(const Exec& ex, S* dinp, S* dw, S* dbias, const S* dout, const S* inp,
                     const S* w, int N, int C, int OC);

// ---- attention (attention.cpp) ----------------------------------------------------
// saved: B*NH*T log-sum-exp values of the scaled, causally masked score rows.
size_t attention_saved_numel(int B, int T, int NH);
// scratch for the backward: two score blocks (probabilities and their
// gradient) of up to 64 x T per thread.
size_t attention_scratch_numel(const Exec& ex, int T);
template <class S>
void attention_forward(const Exec& ex, S* out, S* saved_lse, const S* qkv, int B, int T, int C,
                       int NH, const DropoutMask& drop);
template <class S>
void attention_backward(const Exec& ex, S* dqkv, S* scratch, const S* dout, const S* qkv,
                        const S* saved_lse, int B, int T, int C, int NH, const DropoutMask& drop);

// ---- GELU (gelu.cpp) ---------------------------------------------------------------
template <class S>
void gelu_forward(const Exec& ex, S* out, const S* inp, size_t n);
// dinp may alias dout.
template <class S>
void gelu_backward(const Exec& ex, S* dinp, const S* inp, const S* dout, size_t n);

// ---- residual (residual.cpp) --------------------------------------------------------
// out may alias a or b.
template <class S>
void residual_forward(const Exec& ex, S* out, const S* a, const S* b, size_t n);

// ---- dropout (dropout.cpp) ----------------------------------------------------------
// out may alias inp; Backend::dropout's formula (S = double: the same mask and scale).
template <class S>
void dropout(const Exec& ex, S* out, const S* inp, const DropoutMask& m, int N, int C);

// ---- classifier (classifier.cpp) -----------------------------------------------------
template <class S>
void classifier_forward_backward(const Exec& ex, S* logits, S* losses, const int32_t* targets,
                                 int N, int V, int Vp, S dloss);

// ---- optimizer (optimizer.cpp) -------------------------------------------------------
template <class S>
double sum_squares(const Exec& ex, const S* g, size_t n);
template <class S>
void adamw_update(const Exec& ex, S* params, const S* grads, S* m, S* v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t);
template <class S>
void scale(const Exec& ex, S* x, size_t n, S s);

}  // namespace cpu
}  // namespace gpt2

#endif  // BACKEND_CPU_OPS_H
