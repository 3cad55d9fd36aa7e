// See bf16_reference.h. Every reference follows the kernel in backend/cuda/*.cuh
// (file named per op): the same formula, the same bf16 rounding points, fp64
// arithmetic. The deltas are written next to the formula they bound; `sum_err`
// is the gamma_n bound of an n-term fp32 sum or dot product of bf16 inputs
// (products of two bf16 are exact in fp32), `op_err` k roundings of a value.
#include "test/backend_cuda/bf16_reference.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

#include "backend/backend.h"  // kIgnoreTarget
#include "test/backend/case_util.h"  // gelu_grad_ref
#include "util/bf16.h"

namespace gpt2 {
namespace bf16ref {

namespace {

using Vec = std::vector<float>;
using DVec = std::vector<double>;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double sum_err(double n, double magnitude) { return kSlack * (n + 2) * kU * magnitude; }
double op_err(double k, double magnitude) { return kSlack * k * kU * magnitude; }

Output make(const std::string& name, size_t n) { return Output{name, DVec(n, 0.0), DVec(n, 0.0)}; }

// The bf16 value a kernel stores for an fp32 value within d of x: returns the
// reference's choice round(x) and sets *width to how far the kernel's choice
// can be from it (0 unless [x - d, x + d] straddles a rounding boundary).
double rounded(double x, double d, double* width) {
  const double r = round_bf16(x);
  *width = std::max(r - round_bf16(x - d), round_bf16(x + d) - r);
  return r;
}

// The attention scale exactly as the kernel computes it (fp32).
double attention_scale(int hs) { return static_cast<double>(1.0f / sqrtf(static_cast<float>(hs))); }

// Softmax of one causal row t (j <= t) from the scores' exact values s and
// fp32 error bounds ds: exact p and a bound dp on the kernel's fp32 p
// (backend/cuda/attention.cuh causal_softmax_kernel: max, expf(s - mx), sum of t+1
// terms, one reciprocal, one product).
void softmax_row(const DVec& s, const DVec& ds, int t, DVec& p, DVec& dp) {
  double mx = -INFINITY, ds_max = 0, sum = 0;
  for (int j = 0; j <= t; j++) mx = std::max(mx, s[j]), ds_max = std::max(ds_max, ds[j]);
  for (int j = 0; j <= t; j++) sum += (p[j] = std::exp(s[j] - mx));
  for (int j = 0; j <= t; j++) {
    p[j] /= sum;
    // relative: own score error, the shift of the normaliser, s - mx, expf (2 ulp), sum, 1/x, product
    const double rel = ds[j] + ds_max + op_err(std::fabs(s[j] - mx) + (t + 1) + 6, 1.0);
    dp[j] = p[j] * std::expm1(rel);
  }
}

struct Heads {  // qkv[B,T,3C] viewed per head
  const Vec& qkv;
  int T, C, hs;
  double q(int b, int t, int h, int d) const { return qkv[(size_t(b) * T + t) * 3 * C + h * hs + d]; }
  double k(int b, int t, int h, int d) const { return qkv[(size_t(b) * T + t) * 3 * C + C + h * hs + d]; }
  double v(int b, int t, int h, int d) const { return qkv[(size_t(b) * T + t) * 3 * C + 2 * C + h * hs + d]; }
};

// Scores of query t against keys j <= t, with their fp32 error (a GEMM of hs
// terms with alpha = scale).
void scores_row(const Heads& H, int b, int h, int t, double scale, DVec& s, DVec& ds) {
  for (int j = 0; j <= t; j++) {
    double acc = 0, mag = 0;
    for (int d = 0; d < H.hs; d++) {
      const double x = H.q(b, t, h, d) * H.k(b, j, h, d);
      acc += x;
      mag += std::fabs(x);
    }
    s[j] = scale * acc;
    ds[j] = sum_err(H.hs + 1, scale * mag);
  }
}

}  // namespace

float round_bf16(float x) { return bf16_bits_to_float(float_to_bf16_bits(x)); }
double round_bf16(double x) { return round_bf16(static_cast<float>(x)); }

double ulp_bf16(double x) {
  x = std::fabs(x);
  if (!(x >= 0x1p-126)) return 0x1p-133;  // subnormal (and NaN)
  int e;
  std::frexp(x, &e);  // x = m 2^e, m in [0.5, 1)
  return std::ldexp(1.0, e - 8);
}

double ulp_fp32(double x) {
  x = std::fabs(x);
  if (!(x >= 0x1p-126)) return 0x1p-149;
  int e;
  std::frexp(x, &e);
  return std::ldexp(1.0, e - 24);
}

namespace {
double stored(double x, bool fp32) { return fp32 ? double(static_cast<float>(x)) : round_bf16(x); }
double ulp_of(double x, bool fp32) { return fp32 ? ulp_fp32(x) : ulp_bf16(x); }
}  // namespace

// ---- encoder (backend/cuda/encoder.cuh) ------------------------------------------------------------
std::vector<Output> encoder_forward(const std::vector<int32_t>& tokens, const Vec& wte, const Vec& wpe, int B,
                                    int T, int C) {
  const int V = static_cast<int>(wte.size() / C);
  Output out = make("out", size_t(B) * T * C);
  for (int bt = 0; bt < B * T; bt++) {
    const int tok = tokens[bt], t = bt % T;
    for (int c = 0; c < C; c++) {
      const size_t i = size_t(bt) * C + c;
      if (tok < 0 || tok >= V) {
        out.value[i] = kNaN;
        continue;
      }
      out.value[i] = double(wte[size_t(tok) * C + c]) + wpe[size_t(t) * C + c];
      out.delta[i] = op_err(1, std::fabs(out.value[i]));  // one fp32 addition
    }
  }
  return {out};
}

std::vector<Output> encoder_backward(const Vec& dwte_old, const Vec& dwpe_old, const Vec& dout,
                                     const std::vector<int32_t>& tokens, int B, int T, int C) {
  const int V = static_cast<int>(dwte_old.size() / C);
  Output dwte = make("dwte", dwte_old.size()), dwpe = make("dwpe", dwpe_old.size());
  DVec wte_mag(dwte_old.size()), wpe_mag(dwpe_old.size());
  for (size_t i = 0; i < dwte_old.size(); i++) dwte.value[i] = dwte_old[i], wte_mag[i] = std::fabs(dwte_old[i]);
  for (size_t i = 0; i < dwpe_old.size(); i++) dwpe.value[i] = dwpe_old[i], wpe_mag[i] = std::fabs(dwpe_old[i]);
  std::vector<int> count(V, 0);
  for (int bt = 0; bt < B * T; bt++) {
    const int tok = tokens[bt], t = bt % T;
    const bool valid = tok >= 0 && tok < V;
    if (valid) count[tok]++;
    for (int c = 0; c < C; c++) {
      const double d = dout[size_t(bt) * C + c];
      if (valid) dwte.value[size_t(tok) * C + c] += d, wte_mag[size_t(tok) * C + c] += std::fabs(d);
      dwpe.value[size_t(t) * C + c] += d, wpe_mag[size_t(t) * C + c] += std::fabs(d);
    }
  }
  // fp32 shadow: old + one atomicAdd per occurrence, any order; dwpe: B-term sum + old
  for (size_t i = 0; i < dwte_old.size(); i++) dwte.delta[i] = sum_err(count[i / C] + 1, wte_mag[i]);
  for (size_t i = 0; i < dwpe_old.size(); i++) dwpe.delta[i] = sum_err(B + 1, wpe_mag[i]);
  return {dwte, dwpe};
}

// ---- layernorm (backend/cuda/layernorm.cuh) -------------------------------------------------------
std::vector<Output> layernorm_forward(const Vec& inp, const Vec& w, const Vec& b, int N, int C) {
  const double eps = 1e-5f;  // kLayernormEps, an fp32 constant
  Output out = make("out", size_t(N) * C), mean = make("mean", N), rstd = make("rstd", N);
  mean.fp32 = rstd.fp32 = true;  // kStats
  for (int n = 0; n < N; n++) {
    const float* x = &inp[size_t(n) * C];
    double sum = 0, sum_abs = 0;
    for (int c = 0; c < C; c++) sum += x[c], sum_abs += std::fabs(x[c]);
    const double mu = sum / C;
    const double dmu = sum_err(C, sum_abs) / C + op_err(1, std::fabs(mu));  // sum, then / C
    double vs = 0;
    for (int c = 0; c < C; c++) vs += (x[c] - mu) * (x[c] - mu);
    // The kernel squares x - m with its own m: sum (x - m)^2 = vs + C (m - mu)^2, each
    // term with 2 roundings, summed over C.
    const double dvs = C * dmu * dmu + sum_err(C + 2, vs + C * dmu * dmu);
    const double a = vs / C + eps, s = 1.0 / std::sqrt(a);
    // a: dvs / C and 2 roundings; 1/sqrt(a): half of a's relative error plus 2 roundings
    const double ds = s * (0.5 * (dvs / C / a + op_err(2, 1.0)) + op_err(2, 1.0));
    mean.value[n] = mu, mean.delta[n] = dmu;
    rstd.value[n] = s, rstd.delta[n] = ds;
    for (int c = 0; c < C; c++) {
      const size_t i = size_t(n) * C + c;
      const double xhat = (x[c] - mu) * s;
      out.value[i] = xhat * w[c] + b[c];
      // (x - m) s w + b: the errors of m and s, and 4 roundings
      out.delta[i] = std::fabs(w[c]) * (dmu * s + std::fabs(x[c] - mu) * ds) +
                     op_err(4, std::fabs(xhat * w[c]) + std::fabs(b[c]));
    }
  }
  return {out, mean, rstd};
}

std::vector<Output> layernorm_backward(const Vec& dinp_old, const Vec& dw_old, const Vec& db_old, const Vec& dout,
                                       const Vec& inp, const Vec& w, const Vec& mean, const Vec& rstd, int N,
                                       int C) {
  Output dinp = make("dinp", size_t(N) * C), dw = make("dw", C), db = make("db", C);
  DVec dw_mag(C), db_mag(C);
  for (int c = 0; c < C; c++) {
    dw.value[c] = dw_old[c], dw_mag[c] = std::fabs(dw_old[c]);
    db.value[c] = db_old[c], db_mag[c] = std::fabs(db_old[c]);
  }
  DVec xhat(C);
  for (int n = 0; n < N; n++) {
    const size_t base = size_t(n) * C;
    const double m = mean[n], s = rstd[n];  // the stored bf16 statistics, as the kernel reads them
    double g_sum = 0, g_abs = 0, gx_sum = 0, gx_abs = 0;
    for (int c = 0; c < C; c++) {
      xhat[c] = (inp[base + c] - m) * s;
      const double g = double(w[c]) * dout[base + c];  // exact in fp32
      g_sum += g, g_abs += std::fabs(g);
      gx_sum += g * xhat[c], gx_abs += std::fabs(g * xhat[c]);
    }
    const double g_mean = g_sum / C, gx_mean = gx_sum / C;
    const double d_g_mean = sum_err(C, g_abs) / C + op_err(1, std::fabs(g_mean));
    // xhat carries 2 roundings (x - m, * s), g * xhat one more
    const double d_gx_mean = (sum_err(C, gx_abs) + op_err(3, gx_abs)) / C + op_err(1, std::fabs(gx_mean));
    for (int c = 0; c < C; c++) {
      const size_t i = base + c;
      const double g = double(w[c]) * dout[i];
      const double term = (g - g_mean - xhat[c] * gx_mean) * s;
      const double d_term = s * (d_g_mean + std::fabs(xhat[c]) * d_gx_mean) +
                            op_err(6, s * (std::fabs(g) + std::fabs(g_mean) + std::fabs(xhat[c] * gx_mean)));
      dinp.value[i] = dinp_old[i] + term;
      dinp.delta[i] = d_term + op_err(1, std::fabs(dinp_old[i]) + std::fabs(term));
      const double d = dout[i];
      dw.value[c] += d * xhat[c], dw_mag[c] += std::fabs(d * xhat[c]);
      db.value[c] += d, db_mag[c] += std::fabs(d);
    }
  }
  // Column sums (single-pass kernel): each warp sums its rows in order, a block its
  // W <= 8 warps, then the G <= 512 block partials (G <= N / 32) in order, then the old
  // value: at most N / (G W) + W + G + 1 <= N + 64 additions per term for every N, so the
  // old chunked bound still holds; each dw term has 3 roundings ((x - m), * rstd, * dout).
  for (int c = 0; c < C; c++) {
    dw.delta[c] = sum_err(N + 64 + 3, dw_mag[c]);
    db.delta[c] = sum_err(N + 64, db_mag[c]);
  }
  return {dinp, dw, db};
}

// ---- matmul (backend/cuda/matmul.cuh) ----------------------------------------------------------------
std::vector<Output> matmul_forward(const Vec& inp, const Vec& w, const Vec* bias, int N, int C, int OC,
                                   bool separate_bias) {
  Output out = make("out", size_t(N) * OC);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double acc = 0, mag = 0;
      for (int c = 0; c < C; c++) {
        const double x = double(inp[size_t(n) * C + c]) * w[size_t(o) * C + c];
        acc += x, mag += std::fabs(x);
      }
      const size_t i = size_t(n) * OC + o;
      if (bias == nullptr) {
        out.value[i] = acc, out.delta[i] = sum_err(C, mag);
      } else if (!separate_bias) {  // cuBLASLt BIAS epilogue: added to the fp32 accumulator
        out.value[i] = acc + (*bias)[o];
        out.delta[i] = sum_err(C + 1, mag + std::fabs((*bias)[o]));
      } else {  // cuBLAS: the product is stored in bf16, add_bias_kernel adds in fp32 and rounds again
        double width;
        const double stored = rounded(acc, sum_err(C, mag), &width);
        out.value[i] = stored + (*bias)[o];
        out.delta[i] = width + op_err(1, std::fabs(out.value[i]));
      }
    }
  return {out};
}

std::vector<Output> matmul_backward(const Vec& dw_old, const Vec* dbias_old, const Vec& dout, const Vec& inp,
                                    const Vec& w, int N, int C, int OC) {
  Output dinp = make("dinp", size_t(N) * C), dw = make("dw", size_t(OC) * C);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      double acc = 0, mag = 0;
      for (int o = 0; o < OC; o++) {
        const double x = double(dout[size_t(n) * OC + o]) * w[size_t(o) * C + c];
        acc += x, mag += std::fabs(x);
      }
      dinp.value[size_t(n) * C + c] = acc, dinp.delta[size_t(n) * C + c] = sum_err(OC, mag);
    }
  for (int o = 0; o < OC; o++)
    for (int c = 0; c < C; c++) {
      const size_t i = size_t(o) * C + c;
      double acc = dw_old[i], mag = std::fabs(dw_old[i]);  // beta = 1: the old value joins the fp32 sum
      for (int n = 0; n < N; n++) {
        const double x = double(dout[size_t(n) * OC + o]) * inp[size_t(n) * C + c];
        acc += x, mag += std::fabs(x);
      }
      dw.value[i] = acc, dw.delta[i] = sum_err(N + 1, mag);
    }
  std::vector<Output> r = {dinp, dw};
  if (dbias_old != nullptr) {
    Output db = make("dbias", OC);
    for (int o = 0; o < OC; o++) {
      double acc = (*dbias_old)[o], mag = std::fabs(acc);
      for (int n = 0; n < N; n++) acc += dout[size_t(n) * OC + o], mag += std::fabs(dout[size_t(n) * OC + o]);
      // BGRADB epilogue, or <= 64 row-chunk partials summed in order; then + old
      db.value[o] = acc, db.delta[o] = sum_err(N + 64 + 1, mag);
    }
    r.push_back(db);
  }
  return r;
}

// ---- attention ------------------------------------------------------------------------------------
// Three kernels: the classic path (backend/cuda/attention.cuh), the flash path
// (backend/cuda/flash_attention.cuh, the backend's default) and cuDNN's fused
// attention as the emulator runs its graph (emu/cudnn_graph.cpp). The caller names
// the one the backend under test runs.
namespace {

// Attention dropout's factor of (b, h, t, j): backend.h's Z (1 without dropout).
double dropout_factor(const DropoutMask& m, int b, int T, int h, int t, int j) {
  if (m.p == 0.0f) return 1.0;
  return m.keep_attention(m.token0 + uint64_t(b) * T, T, h, t, j) ? double(m.keep_scale()) : 0.0;
}

// classic: backend/cuda/attention.cuh, bf16 instantiation
// forward: fp32 scores -> softmax -> P stored in bf16 -> y = P v (fp32 GEMM) stored in bf16.
// Dropout: the GEMM reads bf16(p z) (the fp32 p times z, rounded once more) instead of P.
std::vector<Output> classic_attention_forward(const Vec& qkv, int B, int T, int C, int NH, const DropoutMask& drop) {
  const int hs = C / NH;
  const double scale = attention_scale(hs);
  const Heads H{qkv, T, C, hs};
  Output out = make("out", size_t(B) * T * C);
  DVec s(T), ds(T), p(T), dp(T), P(T), width(T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        scores_row(H, b, h, t, scale, s, ds);
        softmax_row(s, ds, t, p, dp);
        for (int j = 0; j <= t; j++) {
          const double z = dropout_factor(drop, b, T, h, t, j);
          P[j] = rounded(z * p[j], z * dp[j] + (z != 1.0 ? op_err(1, z * p[j]) : 0.0), &width[j]);
        }
        for (int d = 0; d < hs; d++) {
          double acc = 0, mag = 0, amb = 0;
          for (int j = 0; j <= t; j++) {
            const double v = H.v(b, j, h, d);
            acc += P[j] * v, mag += std::fabs(P[j] * v), amb += width[j] * std::fabs(v);
          }
          const size_t i = (size_t(b) * T + t) * C + h * hs + d;
          out.value[i] = acc;
          out.delta[i] = amb + sum_err(T, mag);  // the GEMM runs over all T keys (zeros above t)
        }
      }
  return {out};
}

// backward: dP = dy v^T (fp32); P recomputed in fp32; dS = P (dP - sum P dP) scale
// stored in bf16; dq = dS k, dk = dS^T q (fp32 GEMMs of bf16 dS) and dv = P^T dy (fp32
// P), each stored in bf16. Dropout: dP o z (one fp32 multiply) before D and dS, and
// dv from the fp32 P o z.
std::vector<Output> classic_attention_backward(const Vec& dout, const Vec& qkv, int B, int T, int C, int NH,
                                               const DropoutMask& drop) {
  const int hs = C / NH;
  const double scale = attention_scale(hs);
  const Heads H{qkv, T, C, hs};
  Output dqkv = make("dqkv", size_t(B) * T * 3 * C);
  auto dy = [&](int b, int t, int h, int d) -> double { return dout[(size_t(b) * T + t) * C + h * hs + d]; };
  auto at = [&](int b, int t, int part, int h, int d) { return (size_t(b) * T + t) * 3 * C + part * C + h * hs + d; };
  std::vector<DVec> p(T, DVec(T, 0.0)), dpe(T, DVec(T, 0.0)), DS(T, DVec(T, 0.0)), wds(T, DVec(T, 0.0));
  DVec s(T), ds(T), dP(T), ddP(T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      for (int t = 0; t < T; t++) {
        scores_row(H, b, h, t, scale, s, ds);
        softmax_row(s, ds, t, p[t], dpe[t]);
        double D = 0, dD = 0, D_mag = 0;
        for (int j = 0; j <= t; j++) {
          double acc = 0, mag = 0;
          for (int d = 0; d < hs; d++) {
            const double x = dy(b, t, h, d) * H.v(b, j, h, d);
            acc += x, mag += std::fabs(x);
          }
          const double z = dropout_factor(drop, b, T, h, t, j);
          dP[j] = z * acc, ddP[j] = z * sum_err(hs, mag) + (z != 1.0 ? op_err(1, z * std::fabs(acc)) : 0.0);
          D += p[t][j] * dP[j];
          D_mag += p[t][j] * std::fabs(dP[j]);
          dD += dpe[t][j] * std::fabs(dP[j]) + p[t][j] * ddP[j];
        }
        dD += sum_err(t + 2, D_mag);  // t+1 products of fp32 P and dP, summed
        for (int j = 0; j <= t; j++) {
          const double v = p[t][j] * (dP[j] - D) * scale;
          const double dv = scale * (dpe[t][j] * std::fabs(dP[j] - D) + p[t][j] * (ddP[j] + dD)) +
                            op_err(4, scale * p[t][j] * (std::fabs(dP[j]) + std::fabs(D)));
          DS[t][j] = rounded(v, dv, &wds[t][j]);
        }
        for (int j = 0; j <= t; j++) {  // dv's P: P o z in fp32
          const double z = dropout_factor(drop, b, T, h, t, j);
          if (z == 1.0) continue;
          dpe[t][j] = z * dpe[t][j] + op_err(1, z * p[t][j]);
          p[t][j] *= z;
        }
      }
      for (int d = 0; d < hs; d++)
        for (int t = 0; t < T; t++) {
          // dq[t] = sum_j<=t dS[t][j] k[j];  dk[t] = sum_j>=t dS[j][t] q[j];  dv[t] = sum_j>=t P[j][t] dy[j]
          double q_acc = 0, q_mag = 0, q_amb = 0, k_acc = 0, k_mag = 0, k_amb = 0, v_acc = 0, v_mag = 0, v_amb = 0;
          for (int j = 0; j <= t; j++) {
            const double k = H.k(b, j, h, d);
            q_acc += DS[t][j] * k, q_mag += std::fabs(DS[t][j] * k), q_amb += wds[t][j] * std::fabs(k);
          }
          for (int j = t; j < T; j++) {
            const double q = H.q(b, j, h, d), g = dy(b, j, h, d);
            k_acc += DS[j][t] * q, k_mag += std::fabs(DS[j][t] * q), k_amb += wds[j][t] * std::fabs(q);
            v_acc += p[j][t] * g, v_mag += p[j][t] * std::fabs(g), v_amb += dpe[j][t] * std::fabs(g);
          }
          dqkv.value[at(b, t, 0, h, d)] = q_acc, dqkv.delta[at(b, t, 0, h, d)] = q_amb + sum_err(T, q_mag);
          dqkv.value[at(b, t, 1, h, d)] = k_acc, dqkv.delta[at(b, t, 1, h, d)] = k_amb + sum_err(T, k_mag);
          // fp32 P times dy: one more rounding per product
          dqkv.value[at(b, t, 2, h, d)] = v_acc, dqkv.delta[at(b, t, 2, h, d)] = v_amb + sum_err(T + 1, v_mag);
        }
    }
  return {dqkv};
}


// flash: backend/cuda/flash_attention.cuh, bf16 instantiation. Keys are visited in
// tiles of 64 (flash::kTile); the forward's P~ is exp(s - running max of the
// tiles so far), rounded to bf16 before P~ v; O and l are rescaled by
// alpha = exp(m_old - m_new) per tile.
// The kernel works in base 2 (flash_tiles.cuh): an exponent is fmaf(raw score, c, -m)
// with c = scale log2(e) rounded once to fp32 and m = fp32(raw max * c), then exp2f.
// An exponent error E in log2 units is a relative error E ln 2 <= E of the result,
// so the bounds below use natural-unit magnitudes for it. cuDNN's backward runs
// the same formula in base e (expf of fp32 s * scale - lse): base2 = false.
constexpr int kFlashTile = 64;

// One causal row t as the flash forward computes it: scaled scores s (fp32
// error ds), per key p~ = exp(s - M_k) (M_k the running max after key tile k)
// with the relative error of the kernel's fp32 p~, A = exp(M_k - M) (the
// product of the later alphas), L = sum A p~ (the kernel's l), the relative
// error eA of the kernel's alpha chain and eL of its l, and dm of its maxima.
// ds: the dot product of hs terms plus one rounding of |s|. Base e that rounding
// is the product by scale; base 2 it is c's (the FFMA does not round s * c).
struct FlashRow {
  DVec s, ds, pt, rel, A;
  double M = 0, L = 0, eA = 0, eL = 0, ds_max = 0, dm = 0;
  int tiles = 0;
};

void flash_row(const Heads& H, int b, int h, int t, double scale, bool base2, FlashRow& r) {
  const int n = t + 1;
  r.s.assign(n, 0.0), r.ds.assign(n, 0.0), r.pt.assign(n, 0.0), r.rel.assign(n, 0.0), r.A.assign(n, 0.0);
  DVec s(H.T), ds(H.T);
  scores_row(H, b, h, t, scale, s, ds);
  r.tiles = t / kFlashTile + 1;
  r.ds_max = 0;
  for (int j = 0; j < n; j++) r.s[j] = s[j], r.ds[j] = ds[j], r.ds_max = std::max(r.ds_max, ds[j]);
  DVec Mk(r.tiles);
  double run = -INFINITY, M_abs = 0;
  for (int j = 0; j < n; j++) run = std::max(run, s[j]), Mk[j / kFlashTile] = run;
  for (double mk : Mk) M_abs = std::max(M_abs, std::fabs(mk));
  r.M = Mk[r.tiles - 1];
  // the kernel's maxima: the max score's error; base 2 also the rounding of raw max * c
  r.dm = r.ds_max + (base2 ? op_err(1, M_abs) : 0.0);
  // alpha chain: two maxima's errors on a ratio, plus per tile: m_old - m_new
  // (telescoping to M - M_0), the exp and the multiply of O and l. Base e counts
  // 4 per tile, as before; base 2: exp2f's 2 ulp <= 4u relative (2) and the multiply (1).
  r.eA = 2 * r.dm + op_err((r.M - Mk[0]) + (base2 ? 3 : 4) * r.tiles, 1.0);
  double max_rel = 0;
  r.L = 0;
  for (int j = 0; j < n; j++) {
    const double mk = Mk[j / kFlashTile];
    r.pt[j] = std::exp(s[j] - mk);
    // own score error, the running max's error, s - m (base 2: the FFMA's one
    // rounding), the exp (base e 3, as before; base 2 exp2f's 2 ulp, 2)
    r.rel[j] = ds[j] + r.dm + op_err(std::fabs(s[j] - mk) + (base2 ? 2 : 3), 1.0);
    r.A[j] = std::exp(mk - r.M);
    r.L += r.A[j] * r.pt[j];
    max_rel = std::max(max_rel, r.rel[j]);
  }
  r.eL = max_rel + r.eA + sum_err(n + r.tiles, 1.0);  // l: t+1 positive terms, one rescale per tile
}

// forward: out = (sum_j A P~ v) / L with P~ = bf16(p~) and L from the unrounded p~.
// Dropout: P~ = bf16(p~ z), the fp32 product rounded once more; L stays p~'s.
std::vector<Output> flash_attention_forward(const Vec& qkv, int B, int T, int C, int NH, const DropoutMask& drop) {
  const int hs = C / NH;
  const double scale = attention_scale(hs);
  const Heads H{qkv, T, C, hs};
  Output out = make("out", size_t(B) * T * C);
  FlashRow r;
  DVec P(T), width(T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        flash_row(H, b, h, t, scale, true, r);
        for (int j = 0; j <= t; j++) {
          const double z = dropout_factor(drop, b, T, h, t, j), pz = z * r.pt[j];
          P[j] = rounded(pz, pz * std::expm1(r.rel[j]) + (z != 1.0 ? op_err(1, pz) : 0.0), &width[j]);
        }
        for (int d = 0; d < hs; d++) {
          double acc = 0, mag = 0, amb = 0;
          for (int j = 0; j <= t; j++) {
            const double v = H.v(b, j, h, d), w = r.A[j] / r.L;
            acc += w * P[j] * v, mag += w * P[j] * std::fabs(v), amb += w * width[j] * std::fabs(v);
          }
          const size_t i = (size_t(b) * T + t) * C + h * hs + d;
          out.value[i] = acc;
          // P~ rounding choice; alpha chain (numerator) and l (denominator); the fp32
          // sum of t+1 products with a rescale per tile; 1/l and its product
          out.delta[i] = amb + mag * (r.eA + r.eL) + sum_err(t + 1 + r.tiles, mag) + op_err(2, mag);
        }
      }
  return {out};
}

// backward: P = exp(s - lse) recomputed in fp32 (lse = m + log l from the
// forward); D = sum_d dy out (FlashAttention-2's: the forward's bf16 out, exact
// products summed in fp32); dS = P (dP - D) rounded to bf16; dq = scale
// sum dS k, dk = scale sum dS^T q (fp32 sums of bf16 dS, the scale after the
// sum); dv = sum bf16(P)^T dy. Each stored once in bf16. Dropout: dS = P (dP z - D)
// (one more fp32 multiply) and dv's P is bf16(P z).
// scale_first (cuDNN's graph): dS = bf16(scale P (dP - D)) and the sums dq, dk take no scale after.
std::vector<Output> flash_attention_backward(const Vec& dout, const Vec& out, const Vec& qkv, int B, int T, int C,
                                            int NH, const DropoutMask& drop, bool scale_first = false) {
  const int hs = C / NH;
  const double scale = attention_scale(hs);
  const Heads H{qkv, T, C, hs};
  Output dqkv = make("dqkv", size_t(B) * T * 3 * C);
  auto dy = [&](int b, int t, int h, int d) -> double { return dout[(size_t(b) * T + t) * C + h * hs + d]; };
  auto at = [&](int b, int t, int part, int h, int d) { return (size_t(b) * T + t) * 3 * C + part * C + h * hs + d; };
  std::vector<DVec> PR(T, DVec(T, 0.0)), wp(T, DVec(T, 0.0)), DS(T, DVec(T, 0.0)), wds(T, DVec(T, 0.0));
  DVec p(T), dpe(T), dP(T), ddP(T);
  const bool base2 = !scale_first;  // cuDNN's graph: expf
  FlashRow r;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      for (int t = 0; t < T; t++) {
        flash_row(H, b, h, t, scale, base2, r);
        const double logL = std::log(r.L), lse = r.M + logL;
        // the forward's lse: its m (dm) and the log of its l (eL). Base e, m + logf l:
        // logf, the add. Base 2, (m + log2f l) ln 2: log2f (1 ulp of |log2 l|), then
        // the add, fp32 ln 2 and the product, one rounding of |lse| each.
        const double dlse = r.dm + r.eL +
                            (base2 ? op_err(1, std::fabs(logL)) + op_err(3, std::fabs(lse))
                                   : op_err(2, std::fabs(logL)) + op_err(1, std::fabs(r.M) + std::fabs(logL)));
        // P's exponent beyond the scores' and lse's errors. Base e, expf(s * scale - lse):
        // the subtraction, expf. Base 2, exp2f(fmaf(raw s, c, -fp32(lse log2 e))): lse's
        // conversion (fp32 log2 e, the product), the FFMA, exp2f.
        const double e_lse = base2 ? op_err(2, std::fabs(lse)) : 0.0;
        double D = 0, D_mag = 0;
        for (int d = 0; d < hs; d++) {
          const double x = dy(b, t, h, d) * out[(size_t(b) * T + t) * C + h * hs + d];
          D += x, D_mag += std::fabs(x);
        }
        const double dD = sum_err(hs, D_mag);
        for (int j = 0; j <= t; j++) {
          p[j] = std::exp(r.s[j] - lse);
          dpe[j] = p[j] * std::expm1(r.ds[j] + dlse + e_lse + op_err(std::fabs(r.s[j] - lse) + 2, 1.0));
          const double z = dropout_factor(drop, b, T, h, t, j), dz = z != 1.0 ? 1.0 : 0.0;  // dz: one more rounding
          PR[t][j] = rounded(z * p[j], z * dpe[j] + op_err(dz, z * p[j]), &wp[t][j]);
          double acc = 0, mag = 0;
          for (int d = 0; d < hs; d++) {
            const double x = dy(b, t, h, d) * H.v(b, j, h, d);
            acc += x, mag += std::fabs(x);
          }
          dP[j] = z * acc, ddP[j] = z * sum_err(hs, mag) + op_err(dz, z * std::fabs(acc));
        }
        for (int j = 0; j <= t; j++) {
          const double v = p[j] * (dP[j] - D);
          const double dv = dpe[j] * std::fabs(dP[j] - D) + p[j] * (ddP[j] + dD) +
                            op_err(2, p[j] * (std::fabs(dP[j]) + std::fabs(D)));
          // scale_first: scale P (dP - D) is one more fp32 multiply before the rounding
          DS[t][j] = scale_first ? rounded(scale * v, scale * dv + op_err(1, scale * std::fabs(v)), &wds[t][j])
                                 : rounded(v, dv, &wds[t][j]);
        }
      }
      const double after = scale_first ? 1.0 : scale;  // the scale multiplying dq and dk's sums
      const int after_ops = scale_first ? 0 : 1;
      for (int d = 0; d < hs; d++)
        for (int t = 0; t < T; t++) {
          double q_acc = 0, q_mag = 0, q_amb = 0, k_acc = 0, k_mag = 0, k_amb = 0, v_acc = 0, v_mag = 0, v_amb = 0;
          for (int j = 0; j <= t; j++) {
            const double k = H.k(b, j, h, d);
            q_acc += DS[t][j] * k, q_mag += std::fabs(DS[t][j] * k), q_amb += wds[t][j] * std::fabs(k);
          }
          for (int j = t; j < T; j++) {
            const double q = H.q(b, j, h, d), g = dy(b, j, h, d);
            k_acc += DS[j][t] * q, k_mag += std::fabs(DS[j][t] * q), k_amb += wds[j][t] * std::fabs(q);
            v_acc += PR[j][t] * g, v_mag += std::fabs(PR[j][t] * g), v_amb += wp[j][t] * std::fabs(g);
          }
          // the scale multiplies the fp32 sum: one more rounding
          dqkv.value[at(b, t, 0, h, d)] = after * q_acc;
          dqkv.delta[at(b, t, 0, h, d)] = after * (q_amb + sum_err(T + after_ops, q_mag));
          dqkv.value[at(b, t, 1, h, d)] = after * k_acc;
          dqkv.delta[at(b, t, 1, h, d)] = after * (k_amb + sum_err(T + after_ops, k_mag));
          dqkv.value[at(b, t, 2, h, d)] = v_acc, dqkv.delta[at(b, t, 2, h, d)] = v_amb + sum_err(T, v_mag);
        }
    }
  return {dqkv};
}

}  // namespace

// cuDNN (emulated): the forward's rounding points are classic's (fp32 softmax,
// P rounded to bf16 for P v, fp32 sums); the backward's are flash's (P from the
// fp32 statistics, D from the bf16 out, dS and P rounded to bf16 for the
// products) except that the scale multiplies dS before its rounding.
std::vector<Output> attention_forward(const Vec& qkv, int B, int T, int C, int NH, const DropoutMask& drop,
                                      AttentionKernel kernel) {
  return kernel == AttentionKernel::kFlash ? flash_attention_forward(qkv, B, T, C, NH, drop)
                                           : classic_attention_forward(qkv, B, T, C, NH, drop);
}
std::vector<Output> attention_backward(const Vec& dout, const Vec& out, const Vec& qkv, int B, int T, int C, int NH,
                                       const DropoutMask& drop, AttentionKernel kernel) {
  if (kernel == AttentionKernel::kClassic) return classic_attention_backward(dout, qkv, B, T, C, NH, drop);
  return flash_attention_backward(dout, out, qkv, B, T, C, NH, drop, kernel == AttentionKernel::kCudnn);
}

// ---- GELU (backend/cuda/gelu.cuh) -------------------------------------------------------------------
// u = sqrt(2/pi) (x + 0.044715 x^3), e = exp(-2u), s = 1/(1+e). The fp32 u has
// ~4 roundings (and the fp32 constants), so exp(-2u) is off by 8|u| u relative plus expf's 2u.
namespace {
constexpr double kS2Pi = 0.7978845608028654, kA = 0.044715;
double gelu_e_rel_err(double u) { return op_err(8 * std::fabs(u) + 2, 1.0); }
}  // namespace

std::vector<Output> gelu_forward(const Vec& inp) {
  Output out = make("out", inp.size());
  for (size_t i = 0; i < inp.size(); i++) {
    const double x = inp[i], u = kS2Pi * (x + kA * x * x * x), e = std::exp(-2 * u);
    out.value[i] = x / (1 + e);
    if (!std::isfinite(out.value[i])) continue;
    // x / (1 + e): e's error enters with weight e / (1 + e); then +1 and / (2 roundings)
    const double w = std::isinf(e) ? 1.0 : e / (1 + e);
    out.delta[i] = std::fabs(out.value[i]) * (w * gelu_e_rel_err(u) + op_err(3, 1.0));
  }
  return {out};
}

std::vector<Output> gelu_backward(const Vec& inp, const Vec& dout) {
  Output dinp = make("dinp", inp.size());
  for (size_t i = 0; i < inp.size(); i++) {
    const double x = inp[i];
    const double u = kS2Pi * (x + kA * x * x * x), du = kS2Pi * (1 + 3 * kA * x * x);
    const double e = std::exp(-2 * u), s = 1 / (1 + e), oms = 1 / (1 + 1 / e);  // the kernel's 1 - s
    const double term2 = 2 * x * du * s * oms, grad = s + term2;
    dinp.value[i] = grad * dout[i];
    if (!std::isfinite(dinp.value[i])) continue;
    const double ee = gelu_e_rel_err(u);
    // s moves by s (1 - s) ee; term2's 5 products, du and s, 1 - s each carry their errors.
    const double d_grad = s * oms * ee + op_err(2, s) + std::fabs(term2) * (ee + op_err(10, 1.0)) +
                          op_err(1, std::fabs(grad));
    dinp.delta[i] = std::fabs(dout[i]) * d_grad + op_err(1, std::fabs(dinp.value[i]));
  }
  return {dinp};
}

// ---- the fc layer with its GELU in the GEMM epilogue (backend/cuda/matmul.cuh) ---------------------
// Two admissible computations: cuBLASLt's GELU_AUX_BIAS / DGELU take GELU (gelu')
// of the fp32 product before its one rounding, with cuBLASLt's own fp32 GELU
// (the emulator's: 0.5 x (1 + tanh u), whose 1 + tanh u cancels for x < 0); the
// fallback rounds the product to bf16 first and runs the GELU kernels. The
// deltas cover both: GELU's input may be off by its fp32 error plus half a bf16
// ulp, moving GELU by at most max|gelu'| over that interval (|gelu''| <= 0.8),
// plus either implementation's own error. cuBLASLt does not document its GELU: a
// GPU's epilogue may use the hardware tanh (tanh.approx.f32, relative error up to
// 2^-10.987), which moves 0.5 x (1 + tanh u) by up to 0.5 |x| 2^-11 and the slope
// 0.5 (1 + t) + 0.5 x (1 - t^2) u' by up to (0.5 + |x| u') 2^-11.
namespace {
constexpr double kHardwareTanh = 0x1p-11;  // relative error bound of tanh.approx.f32
using optest::gelu_grad_ref;  // gelu' in fp64 (test/backend/case_util.h)
// How far GELU's input can be from x: its fp32 error d, or the bf16 rounding of a value within d.
double gelu_input_spread(double x, double d) { return d + 0.5 * ulp_bf16(std::fabs(x) + d); }
double gelu_lipschitz(double x, double r) {
  return std::max({std::fabs(gelu_grad_ref(x - r)), std::fabs(gelu_grad_ref(x)),
                   std::fabs(gelu_grad_ref(x + r))}) + 0.8 * r;
}
}  // namespace

std::vector<Output> matmul_gelu_forward(const Vec& inp, const Vec& w, const Vec* bias, int N, int C, int OC,
                                        bool separate_bias) {
  Output pre = matmul_forward(inp, w, bias, N, C, OC, separate_bias)[0];
  pre.name = "pre";
  const Output kernel_gelu = gelu_forward(Vec(pre.value.begin(), pre.value.end()))[0];
  Output out = make("out", pre.value.size());
  for (size_t i = 0; i < out.value.size(); i++) {
    const double x = pre.value[i], r = gelu_input_spread(x, pre.delta[i]);
    const double u = kS2Pi * (x + kA * x * x * x);
    out.value[i] = x / (1 + std::exp(-2 * u));
    if (!std::isfinite(out.value[i])) continue;
    // the kernel's own error at x (relative), or the tanh form's: 0.5 |x| times the hardware
    // tanh's error, plus 1 + tanh u's few ulps
    const double own = std::max(kernel_gelu.delta[i] * 1.01, 0.5 * std::fabs(x) * kHardwareTanh +
                                                                 op_err(4, std::fabs(x)) +
                                                                 op_err(4, std::fabs(out.value[i])));
    out.delta[i] = gelu_lipschitz(x, r) * r + own;
  }
  return {out, pre};
}

std::vector<Output> matmul_gelu_backward(const Vec& dw_old, const Vec* dbias_old, const Vec& dout, const Vec& inp,
                                         const Vec& w, const Vec& gelu_inp, int N, int C, int OC) {
  std::vector<Output> r = matmul_backward(dw_old, dbias_old, dout, inp, w, N, C, OC);
  Output& dinp = r[0];
  // gelu'(x) of the stored input and the kernel's error bound for it, per unit dout
  const Output kernel_grad = gelu_backward(gelu_inp, Vec(gelu_inp.size(), 1.0f))[0];
  for (size_t i = 0; i < dinp.value.size(); i++) {
    const double a = dinp.value[i], da = dinp.delta[i], x = gelu_inp[i];
    const double g = gelu_grad_ref(x), du = kS2Pi * (1 + 3 * kA * x * x);
    dinp.value[i] = a * g;
    if (!std::isfinite(dinp.value[i])) continue;
    // gelu' from the kernel's formula, or the tanh form's 0.5 x (1 - t^2) du (1 - t^2 cancels)
    // with the hardware tanh's error
    const double dg = std::max(kernel_grad.delta[i], (0.5 + std::fabs(x) * du) * kHardwareTanh +
                                                         op_err(8, 1 + std::fabs(x) * du));
    dinp.delta[i] = std::fabs(g) * gelu_input_spread(a, da) + (std::fabs(a) + da) * dg +
                    op_err(1, std::fabs(dinp.value[i]));
  }
  return r;
}

// ---- residual (backend/cuda/residual.cuh): one fp32 operation -------------------------------------
std::vector<Output> residual_forward(const Vec& a, const Vec& b) {
  Output out = make("out", a.size());
  for (size_t i = 0; i < a.size(); i++) {
    out.value[i] = double(a[i]) + b[i];
    if (std::isfinite(out.value[i])) out.delta[i] = op_err(1, std::fabs(out.value[i]));
  }
  return {out};
}

// ---- dropout (backend/cuda/dropout.cuh): one fp32 product by the keep scale or 0 ------------------
std::vector<Output> dropout(const Vec& inp, const DropoutMask& m, int N, int C) {
  Output out = make("out", size_t(N) * C);
  const double scale = m.keep_scale();
  for (int r = 0; r < N; r++)
    for (int c = 0; c < C; c++) {
      const size_t i = size_t(r) * C + c;
      out.value[i] = double(inp[i]) * (m.keep(m.token0 + r, c) ? scale : 0.0);
      if (std::isfinite(out.value[i])) out.delta[i] = op_err(1, std::fabs(out.value[i]));
    }
  return {out};
}

// ---- classifier (backend/cuda/classifier.cuh) ---------------------------------------------------------
// S = sum_j expf(l_j - m) in fp64; loss = log S + m - l_t (fp64, then fp32, stored so);
// (the kernel takes each expf relative to a thread's running max m' <= m and rescales
// its sum by exp(m' - m) in fp64: |l_j - m'| <= |l_j - m|, so the per-term bound holds)
// dlogits_j = expf(l_j - m) * fp32(dloss / S) - dloss [j == t], padded columns 0.
std::vector<Output> classifier(const Vec& logits, const std::vector<int32_t>& targets, int N, int V, int Vp,
                               float dloss) {
  Output dl = make("logits", logits.size()), losses = make("losses", N);
  losses.fp32 = true;  // kStats
  for (size_t i = 0; i < logits.size(); i++) dl.value[i] = logits[i];  // dloss == 0: untouched
  DVec p(V);
  for (int n = 0; n < N; n++) {
    const float* row = &logits[size_t(n) * Vp];
    const int tgt = targets[n];
    if (tgt == kIgnoreTarget) {  // outside the loss: exactly 0 loss, and a zero gradient row
      losses.value[n] = 0.0, losses.delta[n] = 0.0;
      if (dloss != 0.0f)
        for (int j = 0; j < Vp; j++) dl.value[size_t(n) * Vp + j] = 0.0, dl.delta[size_t(n) * Vp + j] = 0.0;
      continue;
    }
    bool nan = false;
    double mx = -INFINITY;
    for (int j = 0; j < V; j++) {
      nan |= std::isnan(row[j]);
      if (row[j] > mx) mx = row[j];
    }
    double sum = 0;
    for (int j = 0; j < V; j++) sum += (p[j] = std::exp(row[j] - mx));
    // S: each term off by l_j - m's rounding and expf's 2 ulp (fp64 sum: exact enough)
    double eps_s = 0;
    for (int j = 0; j < V; j++) eps_s += p[j] / sum * op_err(std::fabs(row[j] - mx) + 3, 1.0);
    const double loss = std::log(sum) + mx - row[tgt];
    losses.value[n] = nan ? kNaN : loss;
    losses.delta[n] = eps_s + op_err(1, std::fabs(loss));
    if (dloss == 0.0f) continue;
    for (int j = 0; j < Vp; j++) {
      const size_t i = size_t(n) * Vp + j;
      if (j >= V) {
        dl.value[i] = 0.0, dl.delta[i] = 0.0;
        continue;
      }
      const double a = p[j] / sum * dloss, g = a - (j == tgt ? double(dloss) : 0.0);
      dl.value[i] = nan ? kNaN : g;
      // expf(l - m), fp32(dloss / S), the product, the subtraction
      dl.delta[i] = std::fabs(a) * (eps_s + op_err(std::fabs(row[j] - mx) + 5, 1.0)) + op_err(1, std::fabs(g));
    }
  }
  return {dl, losses};
}

// ---- the check ---------------------------------------------------------------------------------
double check_element(double got, double value, double delta, bool fp32) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (std::isnan(value)) return std::isnan(got) ? 0.0 : kInf;
  if (std::isinf(value)) return got == value ? 0.0 : kInf;
  if (!std::isfinite(got)) return kInf;
  return std::fabs(got - value) / (delta + 0.5 * ulp_of(std::fabs(value) + delta, fp32));
}

void Stats::add(const Stats& o) {
  elements += o.elements, failures += o.failures, flips += o.flips;
  worst_ratio = std::max(worst_ratio, o.worst_ratio);
  worst_ulps = std::max(worst_ulps, o.worst_ulps);
}

Stats compare(const Vec& got, const Output& ref, const std::string& what, std::string* problems, int max_reports) {
  Stats st;
  if (got.size() != ref.value.size()) {
    st.failures = 1;
    if (problems) *problems += "  " + what + ": size mismatch\n";
    return st;
  }
  st.elements = got.size();
  int reported = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const double v = ref.value[i], ratio = check_element(got[i], v, ref.delta[i], ref.fp32);
    if (std::isfinite(v) && std::isfinite(ratio)) {
      st.worst_ratio = std::max(st.worst_ratio, ratio);
      const double r = stored(v, ref.fp32);
      if (double(got[i]) != r) st.flips++;
      st.worst_ulps = std::max(st.worst_ulps, std::fabs(got[i] - r) / ulp_of(v, ref.fp32));
    }
    if (ratio > 1.0) {
      st.failures++;
      if (problems && reported++ < max_reports) {
        std::ostringstream s;
        s.precision(9);
        s << "  " << what << "[" << i << "]: got " << got[i] << ", reference " << v
          << (ref.fp32 ? " (fp32 " : " (bf16 ") << stored(v, ref.fp32) << ", fp32 allowance " << ref.delta[i]
          << ", ulp " << ulp_of(v, ref.fp32) << "): " << ratio
          << "x the bound\n";
        *problems += s.str();
      }
    }
  }
  return st;
}

size_t old_bound_failures(const Vec& got, const Vec& want) {
  double sum2 = 0;
  size_t finite = 0;
  for (float w : want)
    if (std::isfinite(w)) sum2 += double(w) * w, finite++;
  const double rms = finite ? std::sqrt(sum2 / finite) : 0.0;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const double g = got[i], w = want[i];
    if (std::isnan(w)) bad += !std::isnan(g);
    else if (std::isinf(w)) bad += g != w;
    else bad += !std::isfinite(g) || std::fabs(g - w) > 1e-2 * std::fabs(w) + 1e-2 * rms;
  }
  return bad;
}

size_t perturb_smallest(Vec& v) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < v.size(); i++)
    if (std::isfinite(v[i]) && v[i] != 0.0f) idx.push_back(i);
  const size_t k = std::max<size_t>(1, idx.size() / 100);
  if (idx.empty()) return 0;
  std::nth_element(idx.begin(), idx.begin() + (k - 1), idx.end(),
                   [&](size_t a, size_t b) { return std::fabs(v[a]) < std::fabs(v[b]); });
  for (size_t n = 0; n < k; n++) v[idx[n]] = round_bf16(v[idx[n]] * 1.1f);
  return k;
}

}  // namespace bf16ref
}  // namespace gpt2
