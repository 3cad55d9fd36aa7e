// One GEMM entry for both scalar types, over OpenBLAS's CBLAS.
//
// Threading. Debian 12's libopenblas0 is the *pthread* variant (0.3.21,
// DYNAMIC_ARCH; openblas_get_parallel() == 1), not the OpenMP one. Its worker
// threads and our OpenMP team are two pools competing for the same 2 cores:
// after a threaded sgemm the OpenBLAS workers keep spinning on sched_yield
// while our next elementwise loop runs, and libgomp's idle team spins while
// OpenBLAS works. kOpenMpSplit avoids the second pool: OpenBLAS is pinned to one
// thread and each OpenMP thread calls it on its own slab of the output (column
// slabs, multiples of 16 wide, so each call still gets full-width microkernel
// tiles; row slabs only when the output is too narrow). One pool, no spinning
// against ourselves, and the split is fixed by the shape and thread count, so
// results do not depend on scheduling. kOpenBlas (OpenBLAS's own pool) is kept
// selectable for comparison: dev/cpu/bench_gemm measures both
// (docs/backend-cpu.md has the numbers).
//
// The wrapper must be called from serial code (it opens its own parallel
// region). Splitting the output never splits the K reduction: each output
// element is still one OpenBLAS dot product over K.
#include <cblas.h>

#include <algorithm>
#include <omp.h>

#include "backend/cpu/ops.h"

// Declared by OpenBLAS's cblas.h; repeated so that a cblas.h from another
// provider (the alternatives system may point it elsewhere) still compiles.
extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
}

namespace gpt2 {
namespace cpu {

int resolve_threads(int threads) { return threads > 0 ? threads : omp_get_max_threads(); }

namespace {

void call_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
               const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void call_gemm(bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda,
               const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// Below this many multiply-adds one thread is faster than waking the team.
constexpr double kMinParallelMacs = 2.0e5;

}  // namespace

template <class S>
void gemm(const Exec& ex, bool trans_a, bool trans_b, int M, int N, int K, S alpha, const S* A,
          int lda, const S* B, int ldb, S beta, S* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  const int threads = std::max(1, ex.threads);
  if (ex.gemm == GemmThreading::kOpenBlas) {
    if (openblas_get_num_threads() != threads) openblas_set_num_threads(threads);
    call_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
  const double macs = static_cast<double>(M) * N * std::max(K, 1);
  if (threads == 1 || macs < kMinParallelMacs) {
    call_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  // Column slabs when each thread still gets >= 64 columns, else row slabs.
  const bool split_cols = N >= 64 * threads || N >= M;
  const int extent = split_cols ? N : M;
  const int per = ((extent + threads - 1) / threads + 15) / 16 * 16;
#pragma omp parallel num_threads(threads)
  {
    const int id = omp_get_thread_num();
    const int lo = std::min(extent, id * per);
    const int hi = std::min(extent, lo + per);
    if (hi > lo) {
      if (split_cols) {
        // op(B)[:, lo:hi]: columns of B, or rows of B when it is transposed.
        const S* b = trans_b ? B + static_cast<size_t>(lo) * ldb : B + lo;
        call_gemm(trans_a, trans_b, M, hi - lo, K, alpha, A, lda, b, ldb, beta, C + lo, ldc);
      } else {
        const S* a = trans_a ? A + lo : A + static_cast<size_t>(lo) * lda;
        call_gemm(trans_a, trans_b, hi - lo, N, K, alpha, a, lda, B, ldb, beta,
                  C + static_cast<size_t>(lo) * ldc, ldc);
      }
    }
  }
}

template <class S>
void gemm_serial(bool trans_a, bool trans_b, int M, int N, int K, S alpha, const S* A, int lda,
                 const S* B, int ldb, S beta, S* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  call_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void pin_blas_to_one_thread() {
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

template void gemm_serial<float>(bool, bool, int, int, int, float, const float*, int,
                                 const float*, int, float, float*, int);
template void gemm_serial<double>(bool, bool, int, int, int, double, const double*, int,
                                  const double*, int, double, double*, int);
template void gemm<float>(const Exec&, bool, bool, int, int, int, float, const float*, int,
                          const float*, int, float, float*, int);
template void gemm<double>(const Exec&, bool, bool, int, int, int, double, const double*, int,
                           const double*, int, double, double*, int);

}  // namespace cpu
}  // namespace gpt2
