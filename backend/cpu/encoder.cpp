// Token + position embedding.
//
// Forward: one pass, out row = wte row + wpe row; rows are independent, so
// OpenMP splits the B*T rows. Traffic: read 2*N*C, write N*C.
//
// Backward: dwte rows are scattered by token id and the same id can occur many
// times in a batch, so splitting rows across threads would race. Instead each
// thread owns a fixed slice of the C channels and walks all N rows in order:
// no atomics, no per-thread copies of the 50304 x C table, and every element
// is accumulated in row order, so the result is bitwise independent of the
// thread count. Traffic: read N*C of dout, read-modify-write the touched rows
// of dwte and T rows of dwpe.
#include <algorithm>

#include <omp.h>

#include "backend/cpu/ops.h"

namespace gpt2 {
namespace cpu {

template <class S>
void encoder_forward(const Exec& ex, S* out, const int32_t* tokens, const S* wte, const S* wpe,
                     int B, int T, int C) {
  const long N = static_cast<long>(B) * T;
#pragma omp parallel for num_threads(ex.threads) schedule(static)
  for (long n = 0; n < N; n++) {
    const int t = static_cast<int>(n % T);
    const S* te = wte + static_cast<size_t>(tokens[n]) * C;
    const S* pe = wpe + static_cast<size_t>(t) * C;
    S* o = out + static_cast<size_t>(n) * C;
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = te[c] + pe[c];
  }
}

namespace {
// Runs body(c0, c1) on each OpenMP thread's slice of the C channels, slices in
// multiples of 16 (a cache line of floats) so threads stay off each other's lines.
template <class F>
void for_channel_slices(const Exec& ex, int C, F body) {
  const int chunks = (C + 15) / 16;
#pragma omp parallel num_threads(ex.threads)
  {
    const int nt = omp_get_num_threads();
    const int id = omp_get_thread_num();
    const int per = (chunks + nt - 1) / nt;
    const int c0 = std::min(C, id * per * 16);
    const int c1 = std::min(C, (id + 1) * per * 16);
    if (c1 > c0) body(c0, c1);
  }
}
}  // namespace

template <class S>
void encoder_backward(const Exec& ex, S* dwte, S* dwpe, const S* dout, const int32_t* tokens,
                      int B, int T, int C) {
  const long N = static_cast<long>(B) * T;
  for_channel_slices(ex, C, [&](int c0, int c1) {
    for (long n = 0; n < N; n++) {
      const int t = static_cast<int>(n % T);
      const S* d = dout + static_cast<size_t>(n) * C;
      S* pe = dwpe + static_cast<size_t>(t) * C;
#pragma omp simd
      for (int c = c0; c < c1; c++) pe[c] += d[c];
      if (dwte == nullptr) continue;
      S* te = dwte + static_cast<size_t>(tokens[n]) * C;
#pragma omp simd
      for (int c = c0; c < c1; c++) te[c] += d[c];
    }
  });
}

template <class S>
void embedding_backward_rows(const Exec& ex, S* dwte_rows, const S* dout, const int32_t* tokens,
                             long N, int C, int v0, int rows) {
  for_channel_slices(ex, C, [&](int c0, int c1) {
    for (long n = 0; n < N; n++) {
      const long r = static_cast<long>(tokens[n]) - v0;
      if (r < 0 || r >= rows) continue;
      const S* d = dout + static_cast<size_t>(n) * C;
      S* te = dwte_rows + static_cast<size_t>(r) * C;
#pragma omp simd
      for (int c = c0; c < c1; c++) te[c] += d[c];
    }
  });
}

template void encoder_forward<float>(const Exec&, float*, const int32_t*, const float*,
                                     const float*, int, int, int);
template void encoder_forward<double>(const Exec&, double*, const int32_t*, const double*,
                                      const double*, int, int, int);
template void encoder_backward<float>(const Exec&, float*, float*, const float*, const int32_t*,
                                      int, int, int);
template void encoder_backward<double>(const Exec&, double*, double*, const double*,
                                       const int32_t*, int, int, int);
template void embedding_backward_rows<float>(const Exec&, float*, const float*, const int32_t*, long,
                                             int, int, int);
template void embedding_backward_rows<double>(const Exec&, double*, const double*, const int32_t*,
                                              long, int, int, int);

}  // namespace cpu
}  // namespace gpt2
