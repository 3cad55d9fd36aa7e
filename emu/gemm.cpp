// The emulator's fp32 GEMM core: every output element is one fused multiply-add
// chain over k in ascending order,
//   s = 0;  for p = 0..k-1: s = fma(a[i][p], b[p][j], s);   c[i][j] = alpha * s
// so its bits are a function of the element's inputs alone: not of the CPU (an
// FMA is exactly rounded on every ISA, and no kernel is picked at run time as
// OpenBLAS does: its Haswell, SkylakeX and Zen sgemm kernels sum in different
// orders), not of the matrix shape or blocking (a row of a 32-row product equals
// the same row of a 48-row one), not of thread counts. A GPU's cuBLAS orders its
// sums differently again, so only error bounds carry over to hardware; what this
// buys is emulated CUDA results that are the same on every machine that runs the
// tests.
//
// Speed: tiles of 4 rows x 32 columns keep their accumulators in 16 AVX2
// registers; about half of single-threaded OpenBLAS sgemm, which the emulator's
// small GEMMs do not notice beside the emulated kernels.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "emu/blas_internal.h"

namespace gpt2 {
namespace emu {

namespace {

constexpr int kTileRows = 4, kTileCols = 32;

// A full tile: c (kTileRows x kTileCols, row stride n) from a (row stride k) and b (row stride n).
void full_tile(const float* a, const float* b, float* c, int64_t n, int64_t k, float alpha) {
  float acc[kTileRows][kTileCols] = {};
  for (int64_t p = 0; p < k; ++p) {
    const float* b_row = b + p * n;
    for (int r = 0; r < kTileRows; ++r) {
      const float a_rp = a[r * k + p];
      for (int j = 0; j < kTileCols; ++j) acc[r][j] = std::fma(a_rp, b_row[j], acc[r][j]);
    }
  }
  for (int r = 0; r < kTileRows; ++r)
    for (int j = 0; j < kTileCols; ++j) c[r * n + j] = alpha * acc[r][j];
}

// A partial tile at the matrix's edge: the same chain per element, one at a time.
void edge_tile(const float* a, const float* b, float* c, int64_t n, int64_t k, float alpha, int rows, int cols) {
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < cols; ++j) {
      float s = 0.0f;
      for (int64_t p = 0; p < k; ++p) s = std::fma(a[r * k + p], b[p * n + j], s);
      c[r * n + j] = alpha * s;
    }
}

}  // namespace

void fixed_order_sgemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b, float* c) {
  // Column panels outermost: a panel of b (k x 32 floats) is reused by every row tile.
  for (int64_t j0 = 0; j0 < n; j0 += kTileCols) {
    const int cols = static_cast<int>(std::min<int64_t>(kTileCols, n - j0));
    for (int64_t i0 = 0; i0 < m; i0 += kTileRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kTileRows, m - i0));
      if (rows == kTileRows && cols == kTileCols)
        full_tile(a + i0 * k, b + j0, c + i0 * n + j0, n, k, alpha);
      else
        edge_tile(a + i0 * k, b + j0, c + i0 * n + j0, n, k, alpha, rows, cols);
    }
  }
}

}  // namespace emu
}  // namespace gpt2
