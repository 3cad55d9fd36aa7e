// Helpers shared by the op case files (cases.cpp, cases_embedding.cpp, cases_fused.cpp).
#ifndef TEST_BACKEND_CASE_UTIL_H
#define TEST_BACKEND_CASE_UTIL_H

#include <cmath>
#include <initializer_list>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "test/backend/harness.h"

namespace gpt2 {
namespace optest {

using Vec = std::vector<float>;
using DVec = std::vector<double>;

inline Vec randn(Rng& rng, size_t n, double scale = 1.0, double offset = 0.0) {
  Vec v(n);
  for (auto& x : v) x = static_cast<float>(offset + scale * rng.normal());
  return v;
}
inline DVec to_d(const Vec& v) { return DVec(v.begin(), v.end()); }
inline Vec abs_of(const Vec& v) {
  Vec a(v.size());
  for (size_t i = 0; i < v.size(); i++) a[i] = std::fabs(v[i]);
  return a;
}

// Worst-case error of an fp32 sum of n terms (products of exact inputs count as
// terms) in ANY order, blocked, tree or fma (Higham, Accuracy and Stability,
// Thm 3.1): |fl(sum) - sum| <= gamma(n) * sum |terms|, gamma(n) = n u / (1 - n u),
// u = 2^-24. Every OpenBLAS sgemm kernel (Haswell, SkylakeX, Zen ...) is within
// it, so GEMM outputs are checked against it with magnitude = sum |terms|.
inline double gamma32(double n) {
  const double u = 0x1p-24;
  return n * u / (1 - n * u);
}

inline std::string join(std::initializer_list<std::pair<const char*, long>> kv, const char* extra = "") {
  std::ostringstream s;
  bool first = true;
  for (auto& p : kv) {
    s << (first ? "" : ",") << p.first << "=" << p.second;
    first = false;
  }
  if (*extra) s << "," << extra;
  return s.str();
}

// A linear layer in fp64: out[N,OC] = inp[N,C] w[OC,C]^T (+ bias[OC]).
inline DVec linear_ref(const Vec& inp, const Vec& w, const Vec* bias, int N, int C, int OC) {
  DVec out(size_t(N) * OC);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double acc = bias ? (*bias)[o] : 0.0;
      for (int c = 0; c < C; c++) acc += double(inp[size_t(n) * C + c]) * w[size_t(o) * C + c];
      out[size_t(n) * OC + o] = acc;
    }
  return out;
}
// Its backward: dinp = dout w (overwritten); dw += dout^T inp; dbias += column sums of dout (when given).
inline void linear_backward_ref(const Vec& dout, const Vec& inp, const Vec& w, int N, int C, int OC, DVec& dinp,
                                DVec& dw, DVec* dbias) {
  dinp.assign(size_t(N) * C, 0.0);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      double acc = 0;
      for (int o = 0; o < OC; o++) acc += double(dout[size_t(n) * OC + o]) * w[size_t(o) * C + c];
      dinp[size_t(n) * C + c] = acc;
    }
  for (int o = 0; o < OC; o++)
    for (int c = 0; c < C; c++) {
      double acc = 0;
      for (int n = 0; n < N; n++) acc += double(dout[size_t(n) * OC + o]) * inp[size_t(n) * C + c];
      dw[size_t(o) * C + c] += acc;
    }
  if (dbias)
    for (int n = 0; n < N; n++)
      for (int o = 0; o < OC; o++) (*dbias)[o] += dout[size_t(n) * OC + o];
}

// sum |terms| of each output of linear_backward_ref (dinp, dw, dbias when db0 is
// given), the old dw / dbias included: the magnitudes gamma32 applies to.
inline std::vector<DVec> linear_backward_terms(const Vec& dout, const Vec& inp, const Vec& w, const Vec& dw0,
                                               const Vec* db0, int N, int C, int OC) {
  DVec dinp, dw = to_d(abs_of(dw0)), db = db0 ? to_d(abs_of(*db0)) : DVec();
  linear_backward_ref(abs_of(dout), abs_of(inp), abs_of(w), N, C, OC, dinp, dw, db0 ? &db : nullptr);
  std::vector<DVec> r = {dinp, dw};
  if (db0) r.push_back(db);
  return r;
}

// Layernorm statistics of the rows of x[N,C] in fp64 (two-pass variance, eps 1e-5).
template <class V>
void layernorm_stats(const V& x, int N, int C, DVec& mean, DVec& rstd) {
  mean.assign(N, 0);
  rstd.assign(N, 0);
  for (int n = 0; n < N; n++) {
    double m = 0, v = 0;
    for (int c = 0; c < C; c++) m += x[size_t(n) * C + c];
    m /= C;
    for (int c = 0; c < C; c++) {
      const double d = x[size_t(n) * C + c] - m;
      v += d * d;
    }
    mean[n] = m;
    rstd[n] = 1.0 / std::sqrt(v / C + 1e-5);
  }
}

// GELU (tanh approximation) and its derivative in fp64.
inline double gelu_ref(double x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}
inline double gelu_grad_ref(double x) {
  const double s = std::sqrt(2.0 / M_PI);
  const double u = s * (x + 0.044715 * x * x * x);
  const double th = std::tanh(u);
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * s * (1.0 + 3 * 0.044715 * x * x);
}

// Fused cases (cases_fused.cpp): adds the cases of `op` to `v` when it is
// matmul_gelu_forward, matmul_gelu_backward or residual_layernorm_forward;
// returns whether it was.
bool add_fused_cases(const std::string& op, Rng& rng, std::vector<std::unique_ptr<OpCase>>& v);
// dropout (cases_dropout.cpp)
bool add_dropout_cases(const std::string& op, Rng& rng, std::vector<std::unique_ptr<OpCase>>& v);
// attention_forward, attention_backward (cases_attention.cpp); and both at one shape, for perf_cases.
bool add_attention_cases(const std::string& op, Rng& rng, std::vector<std::unique_ptr<OpCase>>& v);
void add_attention_perf_cases(Rng& rng, int B, int T, int C, int NH, std::vector<std::unique_ptr<OpCase>>& v);
// The fused ops at a GPT-2 shape (N rows, C channels), for perf_cases.
void add_fused_perf_cases(Rng& rng, int N, int C, std::vector<std::unique_ptr<OpCase>>& v);

// Embedding cases (cases_embedding.cpp): adds the cases of `op` to `v` when
// it is one of the embedding ops; returns whether it was.
bool add_embedding_cases(const std::string& op, Rng& rng, std::vector<std::unique_ptr<OpCase>>& v);
// The embedding ops at a GPT-2 shape, for perf_cases.
void add_embedding_perf_cases(Rng& rng, int B, int T, int C, int Vp, std::vector<std::unique_ptr<OpCase>>& v);

}  // namespace optest
}  // namespace gpt2

#endif  // TEST_BACKEND_CASE_UTIL_H
