// Linear layer: out[N,OC] = inp[N,C] @ w[OC,C]^T + bias, weights in nn.Linear
// layout, all three products through one GEMM call each (blas.cpp).
//
// Forward: the bias is broadcast into `out` first and the GEMM accumulates onto
// it (beta = 1): one extra write pass of N*OC instead of a separate
// read-modify-write pass after the GEMM.
// Backward:
//   dinp[N,C]  = dout[N,OC] @ w[OC,C]          (beta 0: overwritten)
//   dw[OC,C]  += dout^T[OC,N] @ inp[N,C]       (beta 1: accumulates)
//   dbias[OC] += column sums of dout
// The column sums are split across threads by column slabs and walk rows in
// order (vectorised along the row), so they are deterministic and need no
// partial buffers; traffic: one read of dout (N*OC).
// FLOPs: forward 2*N*C*OC, backward 4*N*C*OC.
#include <algorithm>

#include <omp.h>

#include "backend/cpu/ops.h"

namespace gpt2 {
namespace cpu {

template <class S>
void matmul_forward(const Exec& ex, S* out, const S* inp, const S* w, const S* bias, int N, int C,
                    int OC) {
  S beta = 0;
  if (bias != nullptr) {
#pragma omp parallel for num_threads(ex.threads) schedule(static)
    for (int n = 0; n < N; n++) {
      S* o = out + static_cast<size_t>(n) * OC;
#pragma omp simd
      for (int j = 0; j < OC; j++) o[j] = bias[j];
    }
    beta = 1;
  }
  gemm<S>(ex, false, true, N, OC, C, S(1), inp, C, w, C, beta, out, OC);
}

template <class S>
void matmul_backward(const Exec& ex, S* dinp, S* dw, S* dbias, const S* dout, const S* inp,
                     const S* w, int N, int C, int OC) {
  gemm<S>(ex, false, false, N, C, OC, S(1), dout, OC, w, C, S(0), dinp, C);
  if (dw != nullptr) gemm<S>(ex, true, false, OC, C, N, S(1), dout, OC, inp, C, S(1), dw, C);
  if (dbias != nullptr) {
    const int chunks = (OC + 15) / 16;
#pragma omp parallel num_threads(ex.threads)
    {
      const int nt = omp_get_num_threads();
      const int id = omp_get_thread_num();
      const int per = (chunks + nt - 1) / nt;
      const int j0 = std::min(OC, id * per * 16);
      const int j1 = std::min(OC, (id + 1) * per * 16);
      for (int n = 0; n < N; n++) {
        const S* d = dout + static_cast<size_t>(n) * OC;
#pragma omp simd
        for (int j = j0; j < j1; j++) dbias[j] += d[j];
      }
    }
  }
}

template void matmul_forward<float>(const Exec&, float*, const float*, const float*, const float*,
                                    int, int, int);
template void matmul_forward<double>(const Exec&, double*, const double*, const double*,
                                     const double*, int, int, int);
template void matmul_backward<float>(const Exec&, float*, float*, float*, const float*,
                                     const float*, const float*, int, int, int);
template void matmul_backward<double>(const Exec&, double*, double*, double*, const double*,
                                      const double*, const double*, int, int, int);

}  // namespace cpu
}  // namespace gpt2
