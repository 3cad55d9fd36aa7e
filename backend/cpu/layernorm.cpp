// LayerNorm over the C channels of each of N rows, eps 1e-5.
//
// Numerics: two-pass statistics per row (mean, then the mean of squared
// deviations), so var never suffers the E[x^2] - E[x]^2 cancellation; sums use
// `omp simd` reductions (16 independent fp32 partial sums for AVX-512), which
// is both faster and more accurate than one sequential fp32 sum. mean and rstd
// are saved in the scalar type (fp32 in the backend) for the backward.
//
// Forward traffic: a row is C*4 bytes (3 KiB at C=768) and stays in L1 across
// its three short passes, so DRAM sees read N*C + write N*C (+ 2N stats).
//
// Backward, per row with norm = (x - mean) * rstd and g = w * dout:
//   dinp += rstd * (g - mean(g) - norm * mean(g * norm))
//   dw   += dout * norm,  db += dout
// One pass computes both row means, a second applies dinp and the dw/db
// contributions; inp is re-normalised on the fly instead of saving `norm`
// (saves N*C floats per layernorm). dw/db are sums over rows: rows are cut into
// fixed blocks (count depends on N only), each block accumulates into its own
// partial dw/db, and the partials are added in block order, so the result is
// deterministic and independent of the thread count, with no atomics.
// Traffic: read dout, inp, dinp; write dinp (4*N*C) plus 2*C per block.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/ops.h"

namespace gpt2 {
namespace cpu {

namespace {
constexpr double kLayerNormEps = 1e-5;
}

template <class S>
void layernorm_forward(const Exec& ex, S* out, S* mean, S* rstd, const S* inp, const S* w,
                       const S* b, int N, int C) {
#pragma omp parallel for num_threads(ex.threads) schedule(static)
  for (int n = 0; n < N; n++) {
    const S* x = inp + static_cast<size_t>(n) * C;
    S* o = out + static_cast<size_t>(n) * C;
    S sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; c++) sum += x[c];
    const S m = sum / static_cast<S>(C);
    S sq = 0;
#pragma omp simd reduction(+ : sq)
    for (int c = 0; c < C; c++) {
      const S d = x[c] - m;
      sq += d * d;
    }
    const S var = sq / static_cast<S>(C);
    const S s = static_cast<S>(1) / std::sqrt(var + static_cast<S>(kLayerNormEps));
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

template <class S>
void layernorm_backward(const Exec& ex, S* dinp, S* dw, S* db, const S* dout, const S* inp,
                        const S* w, const S* mean, const S* rstd, int N, int C) {
  if (N <= 0 || C <= 0) return;
  // At most 64 blocks of >= 16 rows: the partials stay small (64 * 2C floats).
  const int rows_per_block = std::max(16, (N + 63) / 64);
  const int blocks = (N + rows_per_block - 1) / rows_per_block;
  std::vector<S> partial(static_cast<size_t>(blocks) * 2 * C);
#pragma omp parallel num_threads(ex.threads)
  {
#pragma omp for schedule(static)
    for (int blk = 0; blk < blocks; blk++) {
      S* pdw = partial.data() + static_cast<size_t>(blk) * 2 * C;
      S* pdb = pdw + C;
      for (int c = 0; c < C; c++) pdw[c] = pdb[c] = 0;
      const int n1 = std::min(N, (blk + 1) * rows_per_block);
      for (int n = blk * rows_per_block; n < n1; n++) {
        const S* x = inp + static_cast<size_t>(n) * C;
        const S* d = dout + static_cast<size_t>(n) * C;
        S* di = dinp + static_cast<size_t>(n) * C;
        const S m = mean[n];
        const S s = rstd[n];
        S g_sum = 0, gn_sum = 0;
#pragma omp simd reduction(+ : g_sum, gn_sum)
        for (int c = 0; c < C; c++) {
          const S norm = (x[c] - m) * s;
          const S g = w[c] * d[c];
          g_sum += g;
          gn_sum += g * norm;
        }
        const S g_mean = g_sum / static_cast<S>(C);
        const S gn_mean = gn_sum / static_cast<S>(C);
#pragma omp simd
        for (int c = 0; c < C; c++) {
          const S norm = (x[c] - m) * s;
          const S g = w[c] * d[c];
          di[c] += s * (g - g_mean - norm * gn_mean);
          pdw[c] += d[c] * norm;
          pdb[c] += d[c];
        }
      }
    }
    // implicit barrier; reduce the block partials channel-wise, in block order
#pragma omp for schedule(static)
    for (int c = 0; c < C; c++) {
      S sw = 0, sb = 0;
      for (int blk = 0; blk < blocks; blk++) {
        sw += partial[static_cast<size_t>(blk) * 2 * C + c];
        sb += partial[static_cast<size_t>(blk) * 2 * C + C + c];
      }
      dw[c] += sw;
      db[c] += sb;
    }
  }
}

template void layernorm_forward<float>(const Exec&, float*, float*, float*, const float*,
                                       const float*, const float*, int, int);
template void layernorm_forward<double>(const Exec&, double*, double*, double*, const double*,
                                        const double*, const double*, int, int);
template void layernorm_backward<float>(const Exec&, float*, float*, float*, const float*,
                                        const float*, const float*, const float*, const float*,
                                        int, int);
template void layernorm_backward<double>(const Exec&, double*, double*, double*, const double*,
                                         const double*, const double*, const double*,
                                         const double*, int, int);

}  // namespace cpu
}  // namespace gpt2
