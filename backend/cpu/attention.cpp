// Causal multi-head self-attention on qkv[B,T,3C] (q | k | v, head h at
// channels h*hs .. h*hs+hs-1 of each third), scale 1/sqrt(hs).
//
// What is saved: only the log-sum-exp of each scaled, masked score row,
// lse[b,h,t] = max_j s_j + log sum_j exp(s_j - max): B*NH*T floats. The
// probabilities are recomputed in the backward as p = exp(s - lse), which costs
// one more Q K^T product. llm.c keeps preatt and att (2*B*NH*T*T floats); at
// d12, B=4, T=64 that is 1.5 MiB per layer versus 12 KiB here, and at B=4,
// T=1024 it is 384 MiB per layer versus 192 KiB.
//
// Work layout: one (b, h) head per work item (OpenMP over B*NH), and inside a
// head, blocks of kRowBlock query rows. Row block [r0, r1) only needs keys
// [0, r1) (causality), so the blocks skip most of the masked upper triangle
// while every product is a small single-threaded GEMM through the same BLAS
// wrapper (sgemm here, dgemm in the fp64 gradient checks):
//   forward   S = scale * Q[r0:r1] K[0:r1]^T          (rb x r1, per-thread block)
//             P = exp(S - rowmax) masked to j <= t; O[r0:r1] = P V[0:r1] / rowsum
//   backward  S again, P = exp(S - lse) masked;  dP = dO[r0:r1] V[0:r1]^T
//             D_t = sum_j P dP;  dS = P (dP - D) * scale
//             dQ[r0:r1] = dS K[0:r1];  dK[0:r1] += dS^T Q[r0:r1];  dV[0:r1] += P^T dO[r0:r1]
// Dropout (backend.h): P o Z before P V in the forward (the row sums are P's);
// in the backward dP o Z before D and dS, then P o Z for dV, Z drawn again.
// dK/dV accumulate across the row blocks of one head only, so no two threads
// touch the same dqkv elements and the result does not depend on the thread
// count. The masked entries of P and dS are exact zeros, so the part of a block
// above the diagonal contributes nothing. Numerics: softmax with max
// subtraction (every exp <= 1) via vexp, row sums in the scalar type.
// FLOPs actually executed (per head, T = kRowBlock * nb): forward 4*hs*sum(rb*r1),
// backward 10*hs*sum(rb*r1); the causal minimum is 4 (10) * hs * T(T+1)/2.
#include <algorithm>
#include <cmath>
#include <vector>

#include <omp.h>

#include "backend/cpu/ops.h"
#include "backend/cpu/vmath.h"

namespace gpt2 {
namespace cpu {

namespace {
constexpr int kRowBlock = 64;

int block_rows(int T) { return std::min(T, kRowBlock); }

// Causal softmax statistics of row t (global index) of a score block row `s`
// holding columns [0, r1): entries j > t are set to 0, entries j <= t to
// exp(s_j - shift). Returns sum_j exp(s_j - shift).
template <class S>
inline S masked_exp_row(S* s, int t, int r1, S shift) {
  S sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j <= t; j++) {
    const S e = vexp(s[j] - shift);
    s[j] = e;
    sum += e;
  }
  for (int j = t + 1; j < r1; j++) s[j] = 0;
  return sum;
}

template <class S>
inline S row_max(const S* s, int t) {
  S mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int j = 0; j <= t; j++) mx = s[j] > mx ? s[j] : mx;
  return mx;
}

// Attention-probability dropout on rows [r0, r1) of a block (row t at P +
// (t - r0) * ldp, keys j <= t): P[t][j] *= Z, with Z drawn as the seam says,
// one Philox call per 2x2 block {q, q+8} x {j, j+8} (r0 is a multiple of 16).
template <class S>
void drop_probabilities(S* P, int ldp, int r0, int r1, const DropoutMask& m, uint64_t row_token, int T, int h) {
  const uint32_t threshold = m.threshold();
  const S scale = static_cast<S>(m.keep_scale());
  for (int q = r0; q < r1; q++) {
    if (q & 8) continue;
    for (int j = 0; j <= q + 8 && j < r1; j++) {
      if (j & 8) continue;
      const Philox4 d = m.attention_draws(row_token, T, h, q, j);
      for (int w = 0; w < 4; w++) {
        const int t = q + 8 * (w >> 1), k = j + 8 * (w & 1);
        if (t < r1 && k <= t) P[static_cast<size_t>(t - r0) * ldp + k] *= d.v[w] >= threshold ? scale : S(0);
      }
    }
  }
}

}  // namespace

size_t attention_saved_numel(int B, int T, int NH) {
  return static_cast<size_t>(B) * NH * T;
}

size_t attention_scratch_numel(const Exec& ex, int T) {
  return static_cast<size_t>(std::max(1, ex.threads)) * 2 * block_rows(T) * T;
}

template <class S>
void attention_forward(const Exec& ex, S* out, S* saved_lse, const S* qkv, int B, int T, int C,
                       int NH, const DropoutMask& drop) {
  const int hs = C / NH;
  const int ld = 3 * C;
  const S scale = static_cast<S>(1) / std::sqrt(static_cast<S>(hs));
  const int heads = B * NH;
  const int rbmax = block_rows(T);
  pin_blas_to_one_thread();
#pragma omp parallel num_threads(ex.threads)
  {
    std::vector<S> block(static_cast<size_t>(rbmax) * T);
    S* P = block.data();
#pragma omp for schedule(static)
    for (int bh = 0; bh < heads; bh++) {
      const int b = bh / NH, h = bh % NH;
      const S* Q = qkv + static_cast<size_t>(b) * T * ld + h * hs;
      const S* K = Q + C;
      const S* V = Q + 2 * C;
      S* O = out + static_cast<size_t>(b) * T * C + h * hs;
      S* lse = saved_lse + static_cast<size_t>(bh) * T;
      for (int r0 = 0; r0 < T; r0 += rbmax) {
        const int r1 = std::min(T, r0 + rbmax), rb = r1 - r0;
        gemm_serial<S>(ex, false, true, rb, r1, hs, scale, Q + static_cast<size_t>(r0) * ld, ld, K,
                       ld, S(0), P, T);
        S inv_sum[kRowBlock];
        for (int i = 0; i < rb; i++) {
          const int t = r0 + i;
          S* s = P + static_cast<size_t>(i) * T;
          const S mx = row_max(s, t);
          const S sum = masked_exp_row(s, t, r1, mx);
          inv_sum[i] = static_cast<S>(1) / sum;
          lse[t] = mx + std::log(sum);
        }
        if (drop.p > 0.0f) drop_probabilities(P, T, r0, r1, drop, drop.token0 + static_cast<uint64_t>(b) * T, T, h);
        S* Ob = O + static_cast<size_t>(r0) * C;
        gemm_serial<S>(ex, false, false, rb, hs, r1, S(1), P, T, V, ld, S(0), Ob, C);
        for (int i = 0; i < rb; i++) {
          S* o = Ob + static_cast<size_t>(i) * C;
          const S f = inv_sum[i];
#pragma omp simd
          for (int d = 0; d < hs; d++) o[d] *= f;
        }
      }
    }
  }
}

template <class S>
void attention_backward(const Exec& ex, S* dqkv, S* scratch, const S* dout, const S* qkv,
                        const S* saved_lse, int B, int T, int C, int NH, const DropoutMask& drop) {
  const int hs = C / NH;
  const int ld = 3 * C;
  const S scale = static_cast<S>(1) / std::sqrt(static_cast<S>(hs));
  const int heads = B * NH;
  const int rbmax = block_rows(T);
  pin_blas_to_one_thread();
#pragma omp parallel num_threads(ex.threads)
  {
    S* P = scratch + static_cast<size_t>(omp_get_thread_num()) * 2 * rbmax * T;
    S* dP = P + static_cast<size_t>(rbmax) * T;
#pragma omp for schedule(static)
    for (int bh = 0; bh < heads; bh++) {
      const int b = bh / NH, h = bh % NH;
      const size_t base = static_cast<size_t>(b) * T * ld + h * hs;
      const S* Q = qkv + base;
      const S* K = Q + C;
      const S* V = Q + 2 * C;
      S* dQ = dqkv + base;
      S* dK = dQ + C;
      S* dV = dQ + 2 * C;
      const S* dO = dout + static_cast<size_t>(b) * T * C + h * hs;
      const S* lse = saved_lse + static_cast<size_t>(bh) * T;
      // dK and dV accumulate over the row blocks: start from zero ("=" output).
      for (int t = 0; t < T; t++) {
        S* r = dQ + static_cast<size_t>(t) * ld;
        for (int d = 0; d < hs; d++) r[C + d] = r[2 * C + d] = 0;
      }
      for (int r0 = 0; r0 < T; r0 += rbmax) {
        const int r1 = std::min(T, r0 + rbmax), rb = r1 - r0;
        const S* Qb = Q + static_cast<size_t>(r0) * ld;
        const S* dOb = dO + static_cast<size_t>(r0) * C;
        gemm_serial<S>(ex, false, true, rb, r1, hs, scale, Qb, ld, K, ld, S(0), P, T);
        gemm_serial<S>(ex, false, true, rb, r1, hs, S(1), dOb, C, V, ld, S(0), dP, T);
        const uint64_t row_token = drop.token0 + static_cast<uint64_t>(b) * T;
        for (int i = 0; i < rb; i++) masked_exp_row(P + static_cast<size_t>(i) * T, r0 + i, r1, lse[r0 + i]);
        if (drop.p > 0.0f) drop_probabilities(dP, T, r0, r1, drop, row_token, T, h);  // dP = (dO V^T) o Z
        for (int i = 0; i < rb; i++) {
          const int t = r0 + i;
          S* p = P + static_cast<size_t>(i) * T;
          S* dp = dP + static_cast<size_t>(i) * T;
          S D = 0;
#pragma omp simd reduction(+ : D)
          for (int j = 0; j <= t; j++) D += p[j] * dp[j];
          // dp becomes dS; masked entries are 0 because p is.
#pragma omp simd
          for (int j = 0; j < r1; j++) dp[j] = p[j] * (dp[j] - D) * scale;
        }
        if (drop.p > 0.0f) drop_probabilities(P, T, r0, r1, drop, row_token, T, h);  // dV = (P o Z)^T dO
        gemm_serial<S>(ex, false, false, rb, hs, r1, S(1), dP, T, K, ld, S(0),
                       dQ + static_cast<size_t>(r0) * ld, ld);
        gemm_serial<S>(ex, true, false, r1, hs, rb, S(1), dP, T, Qb, ld, S(1), dK, ld);
        gemm_serial<S>(ex, true, false, r1, hs, rb, S(1), P, T, dOb, C, S(1), dV, ld);
      }
    }
  }
}

template void attention_forward<float>(const Exec&, float*, float*, const float*, int, int, int, int,
                                       const DropoutMask&);
template void attention_forward<double>(const Exec&, double*, double*, const double*, int, int, int, int,
                                        const DropoutMask&);
template void attention_backward<float>(const Exec&, float*, float*, const float*, const float*, const float*,
                                        int, int, int, int, const DropoutMask&);
template void attention_backward<double>(const Exec&, double*, double*, const double*, const double*,
                                         const double*, int, int, int, int, const DropoutMask&);

}  // namespace cpu
}  // namespace gpt2
