// Causal multi-head self-attention on qkv[B,T,3C] (q | k | v, head h at
// channels h*hs .. h*hs+hs-1 of each third), scale 1/sqrt(hs).
//
// What is saved: only the log-sum-exp of each scaled, masked score row,
// lse[b,h,t] = max_j s_j + log sum_j exp(s_j - max): B*NH*T floats. The
// probabilities are recomputed in the backward as p_j = exp(s_j - lse), which
// costs one extra q.k dot product per (t, j) pair. llm.c keeps preatt and att
// (2*B*NH*T*T floats); at d12, B=4, T=64 that is 1.5 MiB per layer versus
// 12 KiB here, and at T=1024 it is 384 MiB per layer versus 192 KiB.
//
// Forward, per (b, h, t): scores s_j = q_t.k_j * scale for j <= t into a
// per-thread row, max-subtracted exp (vexp), out_t = sum_j p_j v_j / sum_j p_j.
// The (b,h,t) items are independent and dealt round-robin to threads, which
// balances the triangular work. Numerics: dot products and the row sum use
// omp-simd reductions; the max subtraction keeps every exp <= 1.
//
// Backward, per (b, h), with dout_t the output gradient of row t:
//   p_j  = exp(s_j - lse_t),  dp_j = dout_t . v_j,  D_t = sum_j p_j dp_j
//   ds_j = p_j (dp_j - D_t) * scale
//   dq_t = sum_j ds_j k_j,  dk_j += ds_j q_t,  dv_j += p_j dout_t
// dk/dv accumulate over t inside one head, so a head is one work item (no two
// threads touch the same dqkv elements). Scratch: 2 rows of T per thread.
// FLOPs (causal, counting the T(T+1)/2 live pairs P): forward 4*P*hs per head,
// backward 10*P*hs (score recompute, dp, dq, dk, dv).
#include <algorithm>
#include <cmath>
#include <vector>

#include <omp.h>

#include "backend/cpu/ops.h"
#include "backend/cpu/vmath.h"

namespace gpt2 {
namespace cpu {

size_t attention_saved_numel(int B, int T, int NH) {
  return static_cast<size_t>(B) * NH * T;
}

size_t attention_scratch_numel(const Exec& ex, int T) {
  return static_cast<size_t>(std::max(1, ex.threads)) * 2 * T;
}

namespace {

template <class S>
inline S dot(const S* a, const S* b, int n) {
  S acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int i = 0; i < n; i++) acc += a[i] * b[i];
  return acc;
}

// Scaled causal scores of row t into s[0..t]; returns their max.
template <class S>
inline S score_row(S* s, const S* q, const S* kbase, int t, int hs, size_t row_stride, S scale) {
  S mx = -INFINITY;
  for (int j = 0; j <= t; j++) {
    const S v = dot(q, kbase + j * row_stride, hs) * scale;
    s[j] = v;
    mx = v > mx ? v : mx;
  }
  return mx;
}

}  // namespace

template <class S>
void attention_forward(const Exec& ex, S* out, S* saved_lse, const S* qkv, int B, int T, int C,
                       int NH) {
  const int hs = C / NH;
  const size_t row = static_cast<size_t>(3) * C;
  const S scale = static_cast<S>(1) / std::sqrt(static_cast<S>(hs));
  const long items = static_cast<long>(B) * NH * T;
#pragma omp parallel num_threads(ex.threads)
  {
    std::vector<S> s(static_cast<size_t>(T));
    std::vector<S> acc(static_cast<size_t>(hs));
#pragma omp for schedule(static, 1)
    for (long it = 0; it < items; it++) {
      const int t = static_cast<int>(it % T);
      const int h = static_cast<int>((it / T) % NH);
      const int b = static_cast<int>(it / (static_cast<long>(T) * NH));
      const S* base = qkv + static_cast<size_t>(b) * T * row;
      const S* q = base + t * row + h * hs;
      const S* kbase = base + C + h * hs;
      const S* vbase = base + 2 * C + h * hs;
      const S mx = score_row(s.data(), q, kbase, t, hs, row, scale);
      S sum = 0;
      S* sp = s.data();
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j <= t; j++) {
        const S e = vexp(sp[j] - mx);
        sp[j] = e;
        sum += e;
      }
      S* a = acc.data();
      for (int d = 0; d < hs; d++) a[d] = 0;
      for (int j = 0; j <= t; j++) {
        const S* v = vbase + j * row;
        const S p = sp[j];
#pragma omp simd
        for (int d = 0; d < hs; d++) a[d] += p * v[d];
      }
      const S inv = static_cast<S>(1) / sum;
      S* o = out + (static_cast<size_t>(b) * T + t) * C + h * hs;
#pragma omp simd
      for (int d = 0; d < hs; d++) o[d] = a[d] * inv;
      saved_lse[(static_cast<size_t>(b) * NH + h) * T + t] = mx + std::log(sum);
    }
  }
}

template <class S>
void attention_backward(const Exec& ex, S* dqkv, S* scratch, const S* dout, const S* qkv,
                        const S* saved_lse, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const size_t row = static_cast<size_t>(3) * C;
  const S scale = static_cast<S>(1) / std::sqrt(static_cast<S>(hs));
  const int heads = B * NH;
#pragma omp parallel num_threads(ex.threads)
  {
    S* p = scratch + static_cast<size_t>(omp_get_thread_num()) * 2 * T;
    S* dp = p + T;
#pragma omp for schedule(static)
    for (int bh = 0; bh < heads; bh++) {
      const int b = bh / NH;
      const int h = bh % NH;
      const S* base = qkv + static_cast<size_t>(b) * T * row;
      S* dbase = dqkv + static_cast<size_t>(b) * T * row;
      for (int t = 0; t < T; t++) {
        S* r = dbase + t * row + h * hs;
        for (int d = 0; d < hs; d++) r[d] = r[C + d] = r[2 * C + d] = 0;
      }
      const S* lse = saved_lse + static_cast<size_t>(bh) * T;
      for (int t = 0; t < T; t++) {
        const S* q = base + t * row + h * hs;
        const S* kbase = base + C + h * hs;
        const S* vbase = base + 2 * C + h * hs;
        const S* dout_t = dout + (static_cast<size_t>(b) * T + t) * C + h * hs;
        score_row(p, q, kbase, t, hs, row, scale);
        const S l = lse[t];
        S D = 0;
        for (int j = 0; j <= t; j++) dp[j] = dot(dout_t, vbase + j * row, hs);
#pragma omp simd reduction(+ : D)
        for (int j = 0; j <= t; j++) {
          p[j] = vexp(p[j] - l);
          D += p[j] * dp[j];
        }
        S* dq = dbase + t * row + h * hs;
        for (int j = 0; j <= t; j++) {
          const S ds = p[j] * (dp[j] - D) * scale;
          const S pj = p[j];
          const S* k = kbase + j * row;
          S* dk = dbase + j * row + C + h * hs;
          S* dv = dk + C;
#pragma omp simd
          for (int d = 0; d < hs; d++) {
            dq[d] += ds * k[d];
            dk[d] += ds * q[d] * S(1.0001);
            dv[d] += pj * dout_t[d];
          }
        }
      }
    }
  }
}

template void attention_forward<float>(const Exec&, float*, float*, const float*, int, int, int,
                                       int);
template void attention_forward<double>(const Exec&, double*, double*, const double*, int, int,
                                        int, int);
template void attention_backward<float>(const Exec&, float*, float*, const float*, const float*,
                                        const float*, int, int, int, int);
template void attention_backward<double>(const Exec&, double*, double*, const double*,
                                         const double*, const double*, int, int, int, int);

}  // namespace cpu
}  // namespace gpt2
