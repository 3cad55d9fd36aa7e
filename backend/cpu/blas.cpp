// One GEMM entry for both scalar types: fp32 on oneDNN's sgemm when the build
// found it (else OpenBLAS's), fp64 on OpenBLAS's dgemm.
//
// Why oneDNN. Measured side by side on this 2-core AVX-512 VM (docs/backend-cpu.md,
// make bench-blas and make bench), a training step's GEMMs run 9-17% faster on
// oneDNN 2.6 than on OpenBLAS 0.3.21, the whole step 9% (quick start) to 11% (d12).
//
// Signals. oneDNN's JIT sgemm kernels up to 2026 (Debian 12 ships 2.6) point rsp
// at a heap buffer while they run (oneDNN issue 4845): a signal delivered to a
// thread inside one has its frame written into the heap, which corrupts it. The
// trainer takes SIGUSR1 and SIGTERM at any moment (preemption), so every oneDNN
// call runs with the asynchronous signals blocked on its thread; one that comes
// meanwhile goes to another thread or waits, pending, until the call returns
// (two mask changes per call: well under a microsecond against its ~0.1-10 ms).
// The calls therefore all run on threads we own: oneDNN's own threads could
// not be shielded, so it always runs one thread per call.
//
// Threading. Debian 12's libopenblas0 is the *pthread* variant (0.3.21,
// DYNAMIC_ARCH; openblas_get_parallel() == 1), not the OpenMP one. Its worker
// threads and our OpenMP team are two pools competing for the same 2 cores:
// after a threaded sgemm the OpenBLAS workers keep spinning on sched_yield
// while our next elementwise loop runs, and libgomp's idle team spins while
// OpenBLAS works. kOpenMpSplit avoids the second pool: the library runs on one
// thread and each OpenMP thread calls it on its own slab of the output (slabs
// along its longer side, multiples of 16, so each call still gets full-width
// microkernel tiles and packs only its part of the larger operand). One pool, no spinning
// against ourselves, and the split is fixed by the shape and thread count, so
// results do not depend on scheduling. kLibrary (OpenBLAS's own pool) stays
// selectable for OpenBLAS, for comparison. oneDNN runs a call serially inside
// an active parallel region and otherwise over OpenMP's default team size,
// which call_gemm sets to 1 for the call.
//
// The wrapper must be called from serial code (it opens its own parallel
// region). The split never cuts the K reduction: each output element is one
// library dot product over K.
#include <cblas.h>
#include <pthread.h>
#include <signal.h>
#if defined(GPT2_WITH_ONEDNN)
#include <oneapi/dnnl/dnnl.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <omp.h>
#include <stdexcept>
#include <string>

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

bool have_onednn() {
#if defined(GPT2_WITH_ONEDNN)
  return true;
#else
  return false;
#endif
}

GemmLibrary default_gemm_library() { return have_onednn() ? GemmLibrary::kOneDnn : GemmLibrary::kOpenBlas; }

GemmLibrary gemm_library_from_env() {
  const char* v = std::getenv("GPT2_CPU_GEMM");
  if (v == nullptr || *v == '\0') return default_gemm_library();
  const std::string name(v);
  if (name == "openblas") return GemmLibrary::kOpenBlas;
  if (name != "onednn") throw std::runtime_error("backend/cpu: GPT2_CPU_GEMM=" + name + " (expected onednn or openblas)");
  if (!have_onednn())
    throw std::runtime_error("backend/cpu: GPT2_CPU_GEMM=onednn, but this build has no oneDNN "
                             "(install libdnnl-dev or set ONEDNN_HOME, then rebuild)");
  return GemmLibrary::kOneDnn;
}

const char* gemm_library_name(GemmLibrary lib) { return lib == GemmLibrary::kOneDnn ? "oneDNN" : "OpenBLAS"; }

namespace {

// OpenMP's default team size for this task, `n` while in scope (the implicit
// task's own setting: inside a parallel region it ends with the region).
class DefaultTeamSize {
 public:
  explicit DefaultTeamSize(int n) : was_(omp_get_max_threads()) {
    if (was_ != n) omp_set_num_threads(n);
  }
  ~DefaultTeamSize() {
    if (omp_get_max_threads() != was_) omp_set_num_threads(was_);
  }
  DefaultTeamSize(const DefaultTeamSize&) = delete;
  DefaultTeamSize& operator=(const DefaultTeamSize&) = delete;

 private:
  int was_;
};

// Every asynchronous signal blocked on this thread while in scope; the
// synchronous ones (a fault the thread itself raises) stay deliverable.
class AsyncSignalsBlocked {
 public:
  AsyncSignalsBlocked() {
    sigset_t block;
    sigfillset(&block);
    for (int sync : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}) sigdelset(&block, sync);
    pthread_sigmask(SIG_BLOCK, &block, &was_);
  }
  ~AsyncSignalsBlocked() { pthread_sigmask(SIG_SETMASK, &was_, nullptr); }
  AsyncSignalsBlocked(const AsyncSignalsBlocked&) = delete;
  AsyncSignalsBlocked& operator=(const AsyncSignalsBlocked&) = delete;

 private:
  sigset_t was_;
};

// C = alpha op(A) op(B) + beta C on `threads` of the library's threads (1 inside
// an op's region; oneDNN always 1, on the calling thread).
void call_gemm(GemmLibrary lib, int threads, bool ta, bool tb, int M, int N, int K, float alpha, const float* A,
               int lda, const float* B, int ldb, float beta, float* C, int ldc) {
#if defined(GPT2_WITH_ONEDNN)
  if (lib == GemmLibrary::kOneDnn) {
    const DefaultTeamSize one_thread(1);
    const AsyncSignalsBlocked shielded;
    const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (st != dnnl_success) {  // only malformed arguments fail: a bug of ours, not a state to recover
      std::fprintf(stderr, "backend/cpu: dnnl_sgemm(%c%c, M=%d N=%d K=%d, lda=%d ldb=%d ldc=%d) failed: status %d\n",
                   ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, lda, ldb, ldc, static_cast<int>(st));
      std::abort();
    }
    return;
  }
#endif
  if (openblas_get_num_threads() != threads) openblas_set_num_threads(threads);
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void call_gemm(GemmLibrary, int threads, bool ta, bool tb, int M, int N, int K, double alpha, const double* A,
               int lda, const double* B, int ldb, double beta, double* C, int ldc) {
  if (openblas_get_num_threads() != threads) openblas_set_num_threads(threads);
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
  const double macs = static_cast<double>(M) * N * std::max(K, 1);
  if (threads == 1 || macs < kMinParallelMacs) {
    call_gemm(ex.blas, 1, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (ex.gemm == GemmThreading::kLibrary && ex.blas == GemmLibrary::kOpenBlas) {
    call_gemm(ex.blas, threads, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
  // Each thread packs the whole of the operand it shares: column slabs share
  // op(A) (M x K), row slabs op(B) (K x N). Split the longer side, so the
  // smaller operand is the one packed twice, unless its slabs would be thin.
  const bool split_cols = N >= M ? true : M < 64 * threads;
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
        call_gemm(ex.blas, 1, trans_a, trans_b, M, hi - lo, K, alpha, A, lda, b, ldb, beta, C + lo, ldc);
      } else {
        const S* a = trans_a ? A + lo : A + static_cast<size_t>(lo) * lda;
        call_gemm(ex.blas, 1, trans_a, trans_b, hi - lo, N, K, alpha, a, lda, B, ldb, beta,
                  C + static_cast<size_t>(lo) * ldc, ldc);
      }
    }
  }
}

template <class S>
void gemm_serial(const Exec& ex, bool trans_a, bool trans_b, int M, int N, int K, S alpha, const S* A, int lda,
                 const S* B, int ldb, S beta, S* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  call_gemm(ex.blas, 1, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void pin_blas_to_one_thread() {
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

template void gemm_serial<float>(const Exec&, bool, bool, int, int, int, float, const float*, int,
                                 const float*, int, float, float*, int);
template void gemm_serial<double>(const Exec&, bool, bool, int, int, int, double, const double*, int,
                                  const double*, int, double, double*, int);
template void gemm<float>(const Exec&, bool, bool, int, int, int, float, const float*, int,
                          const float*, int, float, float*, int);
template void gemm<double>(const Exec&, bool, bool, int, int, int, double, const double*, int,
                           const double*, int, double, double*, int);

}  // namespace cpu
}  // namespace gpt2
