// Op cases for the harness: inputs, the backend call, an independent fp64
// reference written with plain loops (no BLAS, no code shared with
// backend/cpu/), per-op tolerances and perf accounting.
//
// Tolerances are for an fp32 backend against the fp64 truth, from the length of
// the reductions involved (|out - ref| <= atol + rtol |ref|); a formula or
// indexing bug gives errors orders of magnitude above them. Products through
// OpenBLAS sgemm (matmul, attention, the tied lm_head) sum in a per-CPU order
// (Haswell, SkylakeX, Zen kernels), so their bounds are worst cases over every
// order (gamma32, case_util.h). The other ops are the backend's own loops, whose
// order is fixed at compile time (same bits on every x86-64-v3 CPU): their bounds
// are many-sigma allowances for random-sign roundings, u = 2^-24 per operation.
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "test/backend/case_util.h"
#include "test/backend/harness.h"

namespace gpt2 {
namespace optest {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------- layernorm

class LayernormForward : public OpCase {
 public:
  LayernormForward(Rng& rng, int N, int C, bool constant_rows = false) : N_(N), C_(C), constant_(constant_rows) {
    Vec x = randn(rng, size_t(N) * C, 2.0, 3.0);  // offset mean: the two-pass variance matters
    if (constant_rows)
      for (int n = 0; n < N; n += 2)
        for (int c = 0; c < C; c++) x[size_t(n) * C + c] = 1.5f;
    inputs = {{"inp", x}, {"w", randn(rng, C, 1.0, 1.0)}, {"b", randn(rng, C)}};
    outputs = {{"out", Vec(size_t(N) * C), true},
               {"mean", Vec(N), true, BufferRole::kStats},
               {"rstd", Vec(N), true, BufferRole::kStats}};
  }
  std::string op() const override { return "layernorm_forward"; }
  std::string params() const override { return join({{"N", N_}, {"C", C_}}, constant_ ? "constant_rows" : ""); }
  void run(Ctx& c) override {
    c.be.layernorm_forward({.out = c.out[0], .mean = c.out[1], .rstd = c.out[2], .inp = c.in[0], .w = c.in[1],
                            .b = c.in[2], .N = N_, .C = C_});
  }
  std::vector<DVec> reference() const override {
    DVec mean, rstd;
    layernorm_stats(inputs[0].data, N_, C_, mean, rstd);
    DVec out(size_t(N_) * C_);
    for (int n = 0; n < N_; n++)
      for (int c = 0; c < C_; c++)
        out[size_t(n) * C_ + c] = (inputs[0].data[size_t(n) * C_ + c] - mean[n]) * rstd[n] *
                                      inputs[1].data[c] + inputs[2].data[c];
    return {out, mean, rstd};
  }
  // mean: a C-term sum in 8 or 16 simd partials of x ~ 3 +- 2, rel. error ~ sqrt(C/8) u;
  // rstd: the two-pass variance plus sqrt, a few u; out = (x - mean) rstd w + b,
  // |out| ~ |w| O(1), 4 roundings plus the stats' errors: all a few u ~ 3e-7 of
  // O(1) values, so 2e-6 (34 u) absolute and relative is > 6 sigma.
  Tolerance tolerance(size_t) const override { return {2e-6, 2e-6}; }
  double bytes() const override { return (2.0 * N_ * C_ + 2.0 * N_) * 4; }

 private:
  int N_, C_;
  bool constant_;
};

class LayernormBackward : public OpCase {
 public:
  LayernormBackward(Rng& rng, int N, int C) : N_(N), C_(C) {
    Vec x = randn(rng, size_t(N) * C, 2.0, 3.0);
    DVec mean, rstd;
    layernorm_stats(x, N, C, mean, rstd);
    // The saved statistics as an fp32 forward would have stored them.
    inputs = {{"dout", randn(rng, size_t(N) * C)}, {"inp", x}, {"w", randn(rng, C, 1.0, 1.0)},
              {"mean", Vec(mean.begin(), mean.end()), true, BufferRole::kStats},
              {"rstd", Vec(rstd.begin(), rstd.end()), true, BufferRole::kStats}};
    outputs = {{"dinp", randn(rng, size_t(N) * C), false}, {"dw", randn(rng, C), false},
               {"db", randn(rng, C), false}};
  }
  std::string op() const override { return "layernorm_backward"; }
  std::string params() const override { return join({{"N", N_}, {"C", C_}}); }
  void run(Ctx& c) override {
    c.be.layernorm_backward({.dinp = c.out[0], .dw = c.out[1], .db = c.out[2], .dout = c.in[0], .inp = c.in[1],
                             .w = c.in[2], .mean = c.in[3], .rstd = c.in[4], .N = N_, .C = C_});
  }
  std::vector<DVec> reference() const override {
    const Vec &dout = inputs[0].data, &x = inputs[1].data, &w = inputs[2].data;
    DVec dinp = to_d(outputs[0].data), dw = to_d(outputs[1].data), db = to_d(outputs[2].data);
    for (int n = 0; n < N_; n++) {
      const double m = inputs[3].data[n], s = inputs[4].data[n];
      double g_mean = 0, gn_mean = 0;
      for (int c = 0; c < C_; c++) {
        const double norm = (x[size_t(n) * C_ + c] - m) * s;
        const double g = double(w[c]) * dout[size_t(n) * C_ + c];
        g_mean += g;
        gn_mean += g * norm;
      }
      g_mean /= C_;
      gn_mean /= C_;
      for (int c = 0; c < C_; c++) {
        const double norm = (x[size_t(n) * C_ + c] - m) * s;
        const double d = dout[size_t(n) * C_ + c];
        dinp[size_t(n) * C_ + c] += s * (double(w[c]) * d - g_mean - norm * gn_mean);
        dw[c] += d * norm;
        db[c] += d;
      }
    }
    return {dinp, dw, db};
  }
  Tolerance tolerance(size_t o) const override {
    // dinp: two C-term row means (simd partials) and 5 roundings per element, terms
    // ~ rstd |w dout| <= O(3): a few u of O(3) values, 5e-6 (84 u) is > 10 sigma.
    if (o == 0) return {5e-6, 5e-6};
    // dw, db: the old value + N row terms of O(1) in fixed row blocks: the random
    // walk of N roundings of partial sums ~ sqrt(N) is ~ u N = 6e-8 N; 2e-7 N is 3.4x that.
    return {2e-7 * N_ + 1e-6, 2e-6};
  }
  double bytes() const override { return (4.0 * N_ * C_ + 2.0 * N_) * 4; }

 private:
  int N_, C_;
};

// ---------------------------------------------------------------- matmul
class MatmulForward : public OpCase {
 public:
  MatmulForward(Rng& rng, int N, int C, int OC, bool bias) : N_(N), C_(C), OC_(OC), bias_(bias) {
    inputs = {{"inp", randn(rng, size_t(N) * C)}, {"w", randn(rng, size_t(OC) * C, 1.0 / std::sqrt(C))}};
    if (bias) inputs.push_back({"bias", randn(rng, OC)});
    outputs = {{"out", Vec(size_t(N) * OC), true}};
  }
  std::string op() const override { return "matmul_forward"; }
  std::string params() const override {
    return join({{"N", N_}, {"C", C_}, {"OC", OC_}}, bias_ ? "bias" : "nobias");
  }
  void run(Ctx& c) override {
    c.be.matmul_forward({.out = c.out[0], .inp = c.in[0], .w = c.in[1], .bias = bias_ ? c.in[2] : Tensor{}, .N = N_,
                         .C = C_, .OC = OC_});
  }
  std::vector<DVec> reference() const override {
    return {linear_ref(inputs[0].data, inputs[1].data, bias_ ? &inputs[2].data : nullptr, N_, C_, OC_)};
  }
  // sgemm onto the broadcast bias: C products + the bias, any order: gamma(C+1) sum |terms|.
  Tolerance tolerance(size_t) const override { return {1e-30, gamma32(C_ + 1)}; }
  std::vector<double> magnitude(size_t) const override {
    const Vec b = bias_ ? abs_of(inputs[2].data) : Vec();
    return linear_ref(abs_of(inputs[0].data), abs_of(inputs[1].data), bias_ ? &b : nullptr, N_, C_, OC_);
  }
  double flops() const override { return 2.0 * N_ * C_ * OC_; }
  double bytes() const override { return (double(N_) * C_ + double(OC_) * C_ + double(N_) * OC_) * 4; }

 private:
  int N_, C_, OC_;
  bool bias_;
};

class MatmulBackward : public OpCase {
 public:
  MatmulBackward(Rng& rng, int N, int C, int OC, bool bias) : N_(N), C_(C), OC_(OC), bias_(bias) {
    inputs = {{"dout", randn(rng, size_t(N) * OC)}, {"inp", randn(rng, size_t(N) * C)},
              {"w", randn(rng, size_t(OC) * C, 1.0 / std::sqrt(C))}};
    outputs = {{"dinp", Vec(size_t(N) * C), true}, {"dw", randn(rng, size_t(OC) * C), false}};
    if (bias) outputs.push_back({"dbias", randn(rng, OC), false});
  }
  std::string op() const override { return "matmul_backward"; }
  std::string params() const override {
    return join({{"N", N_}, {"C", C_}, {"OC", OC_}}, bias_ ? "bias" : "nobias");
  }
  void run(Ctx& c) override {
    c.be.matmul_backward({.dinp = c.out[0], .dw = c.out[1], .dbias = bias_ ? c.out[2] : Tensor{}, .dout = c.in[0],
                          .inp = c.in[1], .w = c.in[2], .N = N_, .C = C_, .OC = OC_});
  }
  std::vector<DVec> reference() const override {
    DVec dinp, dw = to_d(outputs[1].data), db = bias_ ? to_d(outputs[2].data) : DVec();
    linear_backward_ref(inputs[0].data, inputs[1].data, inputs[2].data, N_, C_, OC_, dinp, dw, bias_ ? &db : nullptr);
    std::vector<DVec> r = {dinp, dw};
    if (bias_) r.push_back(db);
    return r;
  }
  // Worst case in any summation order: dinp sums OC products; dw and dbias add
  // N terms to their old value: gamma(OC), gamma(N+1) of sum |terms|.
  Tolerance tolerance(size_t o) const override { return {1e-30, gamma32(o == 0 ? OC_ : N_ + 1)}; }
  std::vector<double> magnitude(size_t o) const override {
    return linear_backward_terms(inputs[0].data, inputs[1].data, inputs[2].data, outputs[1].data,
                                 bias_ ? &outputs[2].data : nullptr, N_, C_, OC_)[o];
  }
  double flops() const override { return 4.0 * N_ * C_ * OC_; }
  double bytes() const override {
    return (2.0 * N_ * OC_ + double(N_) * C_ * 2 + 3.0 * OC_ * C_) * 4;
  }

 private:
  int N_, C_, OC_;
  bool bias_;
};

// ---------------------------------------------------------------- GELU
Vec gelu_inputs(Rng& rng, size_t n, bool specials) {
  Vec x = randn(rng, n, 3.0);
  if (specials && n >= 10) {
    const float sp[] = {0.0f, -0.0f, 80.0f, -80.0f, 1e4f, -1e4f, 1e-30f, -5.0f, 30.0f,
                        std::numeric_limits<float>::quiet_NaN()};
    std::copy(std::begin(sp), std::end(sp), x.begin());
  }
  return x;
}

class GeluForward : public OpCase {
 public:
  GeluForward(Rng& rng, size_t n, bool specials) : n_(n), specials_(specials) {
    inputs = {{"inp", gelu_inputs(rng, n, specials)}};
    outputs = {{"out", Vec(n), true}};
  }
  std::string op() const override { return "gelu_forward"; }
  std::string params() const override { return join({{"n", long(n_)}}, specials_ ? "specials" : ""); }
  void run(Ctx& c) override { c.be.gelu_forward({.out = c.out[0], .inp = c.in[0], .n = n_}); }
  std::vector<DVec> reference() const override {
    DVec out(n_);
    for (size_t i = 0; i < n_; i++) out[i] = gelu_ref(inputs[0].data[i]);
    return {out};
  }
  // 0.5 x (1 + tanh u): ~6 fp32 roundings plus vexp's 2 ulp (4u) in tanh, < 12 u
  // = 7e-7 relative; 1e-6 covers it. The 1 + tanh cancellation for x < 0 (tiny
  // results) is the atol: a few ulp of 1 times |x| ~ 1e-7 near the bend.
  Tolerance tolerance(size_t) const override { return {1e-7, 1e-6}; }
  double bytes() const override { return 2.0 * n_ * 4; }

 private:
  size_t n_;
  bool specials_;
};

class GeluBackward : public OpCase {
 public:
  GeluBackward(Rng& rng, size_t n, bool in_place, bool specials) : n_(n), in_place_(in_place), specials_(specials) {
    inputs = {{"inp", gelu_inputs(rng, n, specials)}, {"dout", randn(rng, n)}};
    outputs = {{"dinp", Vec(n), true}};
  }
  std::string op() const override { return "gelu_backward"; }
  std::string params() const override {
    return join({{"n", long(n_)}}, in_place_ ? (specials_ ? "in_place,specials" : "in_place") : (specials_ ? "specials" : ""));
  }
  void run(Ctx& c) override {
    if (in_place_) {  // dinp aliases dout, as the model calls it
      c.be.copy(c.out[0], c.in[1]);
      c.be.gelu_backward({.dinp = c.out[0], .inp = c.in[0], .dout = c.out[0], .n = n_});
    } else {
      c.be.gelu_backward({.dinp = c.out[0], .inp = c.in[0], .dout = c.in[1], .n = n_});
    }
  }
  std::vector<DVec> reference() const override {
    DVec out(n_);
    for (size_t i = 0; i < n_; i++) out[i] = gelu_grad_ref(inputs[0].data[i]) * inputs[1].data[i];
    return {out};
  }
  // The two terms of gelu' have opposite signs for x < 0 and cancel near
  // x = -0.75: rtol applies to the larger term.
  std::vector<double> magnitude(size_t) const override {
    std::vector<double> m(n_);
    const double s = std::sqrt(2.0 / M_PI);
    for (size_t i = 0; i < n_; i++) {
      const double x = inputs[0].data[i];
      const double sg = 0.5 * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x)));
      const double t2 = 2.0 * x * sg * (1.0 - sg) * s * (1.0 + 3 * 0.044715 * x * x);
      m[i] = (std::fabs(sg) + std::fabs(t2)) * std::fabs(inputs[1].data[i]);
    }
    return m;
  }
  // gelu' is ~10 roundings and one vexp (4u) per element, < 20 u = 1.2e-6 of the
  // larger term (magnitude); 2e-6 covers it, the atol a dout near 0.
  Tolerance tolerance(size_t) const override { return {2e-7, 2e-6}; }
  double bytes() const override { return 3.0 * n_ * 4; }

 private:
  size_t n_;
  bool in_place_, specials_;
};

// ---------------------------------------------------------------- residual
class ResidualForward : public OpCase {
 public:
  ResidualForward(Rng& rng, size_t n, bool in_place) : n_(n), in_place_(in_place) {
    Vec a = randn(rng, n), b = randn(rng, n);
    if (n >= 3) {
      a[0] = std::numeric_limits<float>::quiet_NaN();
      a[1] = std::numeric_limits<float>::infinity();
      b[2] = -std::numeric_limits<float>::infinity();
    }
    inputs = {{"a", a}, {"b", b}};
    outputs = {{"out", Vec(n), true}};
  }
  std::string op() const override { return "residual_forward"; }
  std::string params() const override { return join({{"n", long(n_)}}, in_place_ ? "in_place" : ""); }
  void run(Ctx& c) override {
    if (in_place_) {  // out aliases a
      c.be.copy(c.out[0], c.in[0]);
      c.be.residual_forward({.out = c.out[0], .a = c.out[0], .b = c.in[1], .n = n_});
    } else {
      c.be.residual_forward({.out = c.out[0], .a = c.in[0], .b = c.in[1], .n = n_});
    }
  }
  std::vector<DVec> reference() const override {
    DVec out(n_);
    for (size_t i = 0; i < n_; i++) out[i] = double(inputs[0].data[i]) + inputs[1].data[i];
    return {out};
  }
  // One correctly rounded fp32 addition: |fl(a+b) - (a+b)| <= 2^-24 |a+b| < 6e-8 |ref|.
  Tolerance tolerance(size_t) const override { return {1e-30, 6e-8}; }
  double bytes() const override { return 3.0 * n_ * 4; }

 private:
  size_t n_;
  bool in_place_;
};

// ---------------------------------------------------------------- classifier
class Classifier : public OpCase {
 public:
  enum class Kind { kNormal, kHugeLogits, kNaNRow, kIgnored };
  Classifier(Rng& rng, int N, int V, int Vp, float dloss, Kind kind = Kind::kNormal)
      : N_(N), V_(V), Vp_(Vp), dloss_(dloss), kind_(kind) {
    const double scale = kind == Kind::kHugeLogits ? 1e4 : 2.0;
    Vec logits = randn(rng, size_t(N) * Vp, scale);
    // Padded columns hold garbage the op must never read: make it loud.
    for (int n = 0; n < N; n++)
      for (int j = V; j < Vp; j++) logits[size_t(n) * Vp + j] = 1e30f;
    if (kind == Kind::kNaNRow) logits[size_t(N / 2) * Vp + V / 2] = std::numeric_limits<float>::quiet_NaN();
    std::vector<int32_t> tg(N);
    for (auto& t : tg) t = rng.below(V);
    tg[0] = V - 1;
    if (kind == Kind::kIgnored)  // SFT: every odd row is outside the loss; its logits are loud garbage
      for (int n = 1; n < N; n += 2) {
        tg[n] = kIgnoreTarget;
        for (int j = 0; j < V; j++) logits[size_t(n) * Vp + j] = 1e30f;
      }
    tokens = {tg};
    outputs = {{"logits", logits, false}, {"losses", Vec(N), true, BufferRole::kStats}};
  }
  std::string op() const override { return "classifier_forward_backward"; }
  std::string params() const override {
    std::ostringstream s;
    s << "dloss=" << dloss_;
    if (kind_ == Kind::kHugeLogits) s << ",huge_logits";
    if (kind_ == Kind::kNaNRow) s << ",nan_row";
    if (kind_ == Kind::kIgnored) s << ",ignored_rows";
    return join({{"N", N_}, {"V", V_}, {"Vp", Vp_}}, s.str().c_str());
  }
  void run(Ctx& c) override {
    c.be.classifier_forward_backward({.logits = c.out[0], .losses = c.out[1], .targets = c.tok[0], .N = N_, .V = V_,
                                      .Vp = Vp_, .dloss = dloss_});
  }
  std::vector<DVec> reference() const override {
    const Vec& l = outputs[0].data;
    DVec dl = to_d(l), losses(N_);
    for (int n = 0; n < N_; n++) {
      const float* row = &l[size_t(n) * Vp_];
      const int tgt = tokens[0][n];
      if (tgt == kIgnoreTarget) {  // loss 0; with a gradient, an all-zero row
        losses[n] = 0.0;
        if (dloss_ != 0)
          for (int j = 0; j < Vp_; j++) dl[size_t(n) * Vp_ + j] = 0.0;
        continue;
      }
      bool nan = false;
      double mx = -INFINITY;
      for (int j = 0; j < V_; j++) {
        nan |= std::isnan(row[j]);
        mx = std::max(mx, double(row[j]));
      }
      double sum = 0;
      for (int j = 0; j < V_; j++) sum += std::exp(row[j] - mx);
      losses[n] = nan ? kNaN : std::log(sum) + mx - row[tgt];
      if (dloss_ != 0) {
        for (int j = 0; j < V_; j++)
          dl[size_t(n) * Vp_ + j] = nan ? kNaN : (std::exp(row[j] - mx) / sum - (j == tgt)) * dloss_;
        for (int j = V_; j < Vp_; j++) dl[size_t(n) * Vp_ + j] = 0.0;
      }
    }
    return {dl, losses};
  }
  Tolerance tolerance(size_t o) const override {
    // dlogits = (exp(x - max) / sum - [j == tgt]) dloss: vexp's 2 ulp (4u), the
    // subtraction x - max (u |x - max|, up to ~1e4 u p for the huge logits, where p
    // is then ~e^-1e4 = 0), a V-term sum in simd partials (~sqrt(V) u random walk
    // of the sum), the divide and the multiply: < 4e-6 relative; the atol is 1.7 u
    // of dloss for the -1 at the target.
    if (o == 0) return {1e-7 * std::fabs(dloss_) + 1e-30, 4e-6};
    // loss = log(sum) + max - x_tgt: log's and the sum's relative errors (a few u)
    // become absolute; |loss| ~ 5-12 adds u per rounding relative.
    return {2e-6, 1e-6};
  }
  double bytes() const override { return 2.0 * N_ * Vp_ * 4; }

 private:
  int N_, V_, Vp_;
  float dloss_;
  Kind kind_;
};

// ---------------------------------------------------------------- optimizer
class AdamW : public OpCase {
 public:
  AdamW(Rng& rng, size_t n, int t, float wd, float grad_scale) : n_(n), t_(t), wd_(wd), gs_(grad_scale) {
    inputs = {{"grads", randn(rng, n, 0.1)}};
    Vec v = randn(rng, n, 1e-3);
    for (auto& x : v) x = x * x;  // second moments are >= 0
    outputs = {{"params", randn(rng, n, 0.05), false},
               {"m", randn(rng, n, 0.01), false, BufferRole::kOptimizer},  // fp32 on every backend
               {"v", v, false, BufferRole::kOptimizer}};
  }
  std::string op() const override { return "adamw_update"; }
  std::string params() const override {
    std::ostringstream s;
    s << "wd=" << wd_ << ",grad_scale=" << gs_;
    return join({{"n", long(n_)}, {"t", t_}}, s.str().c_str());
  }
  void run(Ctx& c) override {
    c.be.adamw_update({.params = c.out[0], .grads = c.in[0], .m = c.out[1], .v = c.out[2], .lr = kLr, .beta1 = kB1,
                       .beta2 = kB2, .eps = kEps, .weight_decay = wd_, .grad_scale = gs_, .t = t_});
  }
  std::vector<DVec> reference() const override {
    DVec p = to_d(outputs[0].data), m = to_d(outputs[1].data), v = to_d(outputs[2].data);
    const double b1 = kB1, b2 = kB2;
    for (size_t i = 0; i < n_; i++) {
      const double g = double(inputs[0].data[i]) * gs_;
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double mhat = m[i] / (1 - std::pow(b1, t_));
      const double vhat = v[i] / (1 - std::pow(b2, t_));
      p[i] -= double(kLr) * (mhat / (std::sqrt(vhat) + double(kEps)) + double(wd_) * p[i]);
    }
    return {p, m, v};
  }
  // m = b1 m + (1-b1) g cancels when the two terms have opposite signs, and the
  // step lr * mhat / sqrt(vhat) can be much larger than the final |p|: rtol
  // applies to the size of the terms (a few fp32 ulp of them).
  std::vector<double> magnitude(size_t o) const override {
    std::vector<double> mag(n_);
    const double b1 = kB1, b2 = kB2;
    for (size_t i = 0; i < n_; i++) {
      const double g = double(inputs[0].data[i]) * gs_;
      const double m_mag = std::fabs(b1 * outputs[1].data[i]) + std::fabs((1 - b1) * g);
      const double v_new = b2 * outputs[2].data[i] + (1 - b2) * g * g;
      if (o == 1) mag[i] = m_mag;
      if (o == 2) mag[i] = v_new;
      if (o == 0) {
        const double vhat = v_new / (1 - std::pow(b2, t_));
        const double step = m_mag / (1 - std::pow(b1, t_)) / (std::sqrt(vhat) + double(kEps));
        mag[i] = std::fabs(outputs[0].data[i]) + double(kLr) * (step + double(wd_) * std::fabs(outputs[0].data[i]));
      }
    }
    return mag;
  }
  // m, v: 3 roundings each of the terms' size; p: m/(sqrt(v)+eps) is ~6 roundings of
  // the step, plus the decay and the subtraction: <= ~6 u = 3.6e-7 of the magnitude.
  Tolerance tolerance(size_t) const override { return {1e-30, 4e-7}; }
  double bytes() const override { return 7.0 * n_ * 4; }

 private:
  static constexpr float kLr = 6e-4f, kB1 = 0.9f, kB2 = 0.95f, kEps = 1e-8f;
  size_t n_;
  int t_;
  float wd_, gs_;
};

// sum_squares returns a host double, checked exactly in ops_test.cpp; this case
// only times it.
class SumSquares : public OpCase {
 public:
  SumSquares(Rng& rng, size_t n) : n_(n) { inputs = {{"g", randn(rng, n)}}; }
  std::string op() const override { return "sum_squares"; }
  std::string params() const override { return join({{"n", long(n_)}}); }
  void run(Ctx& c) override { result = c.be.sum_squares(c.in[0]); }
  std::vector<DVec> reference() const override { return {}; }
  Tolerance tolerance(size_t) const override { return {0, 0}; }
  double bytes() const override { return 1.0 * n_ * 4; }
  double result = 0;

 private:
  size_t n_;
};

}  // namespace

std::vector<std::string> eval_op_names() {
  return {"encoder_forward", "encoder_backward", "tied_embedding_backward_rows", "layernorm_forward", "layernorm_backward",
          "matmul_forward", "matmul_backward", "matmul_gelu_forward", "matmul_gelu_backward",
          "attention_forward", "attention_backward",
          "gelu_forward", "gelu_backward", "residual_forward", "residual_layernorm_forward", "dropout",
          "classifier_forward_backward",
          "adamw_update"};
}

std::vector<std::unique_ptr<OpCase>> eval_cases(const std::string& op, uint64_t seed) {
  Rng rng(seed);
  std::vector<std::unique_ptr<OpCase>> v;
  auto add = [&](OpCase* c) { v.emplace_back(c); };
  if (add_embedding_cases(op, rng, v)) {
    // encoder_forward, encoder_backward, tied_embedding_backward_rows (cases_embedding.cpp)
  } else if (add_fused_cases(op, rng, v)) {
    // matmul_gelu_forward, matmul_gelu_backward, residual_layernorm_forward (cases_fused.cpp)
  } else if (add_dropout_cases(op, rng, v)) {
    // dropout (cases_dropout.cpp)
  } else if (add_attention_cases(op, rng, v)) {
    // attention_forward, attention_backward (cases_attention.cpp)
  } else if (op == "layernorm_forward") {
    add(new LayernormForward(rng, 1, 1));
    add(new LayernormForward(rng, 5, 7));
    add(new LayernormForward(rng, 33, 37));
    add(new LayernormForward(rng, 8, 768));
    add(new LayernormForward(rng, 6, 24, true));
  } else if (op == "layernorm_backward") {
    add(new LayernormBackward(rng, 1, 3));
    add(new LayernormBackward(rng, 5, 7));
    add(new LayernormBackward(rng, 33, 37));
    add(new LayernormBackward(rng, 70, 96));  // > 1 row block of the partial sums
    add(new LayernormBackward(rng, 1100, 19));  // 62 row blocks of 18 rows
  } else if (op == "matmul_forward") {
    add(new MatmulForward(rng, 1, 1, 1, true));
    add(new MatmulForward(rng, 7, 13, 5, true));
    add(new MatmulForward(rng, 7, 13, 5, false));
    add(new MatmulForward(rng, 33, 40, 67, true));
    add(new MatmulForward(rng, 64, 96, 288, true));   // above the parallel-split threshold
    add(new MatmulForward(rng, 130, 64, 35, false));  // narrow output: row split
  } else if (op == "matmul_backward") {
    add(new MatmulBackward(rng, 1, 1, 1, true));
    add(new MatmulBackward(rng, 7, 13, 5, true));
    add(new MatmulBackward(rng, 7, 13, 5, false));
    add(new MatmulBackward(rng, 33, 40, 67, true));
    add(new MatmulBackward(rng, 64, 96, 288, true));
    add(new MatmulBackward(rng, 130, 64, 35, false));
  } else if (op == "gelu_forward") {
    add(new GeluForward(rng, 1, false));
    add(new GeluForward(rng, 37, true));
    add(new GeluForward(rng, 5000, true));
  } else if (op == "gelu_backward") {
    add(new GeluBackward(rng, 1, false, false));
    add(new GeluBackward(rng, 37, false, true));
    add(new GeluBackward(rng, 5001, true, true));
  } else if (op == "residual_forward") {
    add(new ResidualForward(rng, 1, false));
    add(new ResidualForward(rng, 37, false));
    add(new ResidualForward(rng, 4099, true));
  } else if (op == "classifier_forward_backward") {
    add(new Classifier(rng, 1, 1, 1, 1.0f));  // a single class: loss 0, gradient 0
    add(new Classifier(rng, 3, 7, 7, 0.25f));
    add(new Classifier(rng, 5, 37, 48, 1.0f / 5));
    add(new Classifier(rng, 5, 37, 48, 0.0f));  // evaluation: logits untouched
    add(new Classifier(rng, 4, 1000, 1024, 0.25f, Classifier::Kind::kHugeLogits));
    add(new Classifier(rng, 4, 50, 64, 0.25f, Classifier::Kind::kNaNRow));
    add(new Classifier(rng, 5, 50, 64, 0.25f, Classifier::Kind::kIgnored));  // SFT loss mask
    add(new Classifier(rng, 5, 50, 64, 0.0f, Classifier::Kind::kIgnored));
    add(new Classifier(rng, 2, 50257, 50304, 0.5f));  // GPT-2's vocabulary
  } else if (op == "adamw_update") {
    add(new AdamW(rng, 1, 1, 0.0f, 1.0f));
    add(new AdamW(rng, 37, 1, 0.1f, 1.0f));
    add(new AdamW(rng, 1000, 10, 0.1f, 0.5f));
    add(new AdamW(rng, 4097, 1000, 0.0f, 1.0f));
  }
  return v;
}

std::vector<std::unique_ptr<OpCase>> perf_cases(uint64_t seed, const PerfShape& s) {
  const int B = s.B, T = s.T, C = 768, NH = 12, V = 50257, Vp = 50304, N = B * T;
  Rng rng(seed);
  std::vector<std::unique_ptr<OpCase>> v;
  auto add = [&](OpCase* c) { v.emplace_back(c); };
  add_embedding_perf_cases(rng, B, T, C, Vp, v);
  add(new LayernormForward(rng, N, C));
  add(new LayernormBackward(rng, N, C));
  const int shapes[][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {C, Vp}};
  for (auto& sh : shapes) add(new MatmulForward(rng, N, sh[0], sh[1], sh[1] != Vp));
  for (auto& sh : shapes) add(new MatmulBackward(rng, N, sh[0], sh[1], sh[1] != Vp));
  if (s.attention_at_bt) add_attention_perf_cases(rng, B, T, C, NH, v);
  add_attention_perf_cases(rng, 1, s.attention_T, s.attention_NH * 64, s.attention_NH, v);
  add_fused_perf_cases(rng, N, C, v);
  add(new GeluForward(rng, size_t(N) * 4 * C, false));
  add(new GeluBackward(rng, size_t(N) * 4 * C, true, false));
  add(new ResidualForward(rng, size_t(N) * C, false));
  add(new Classifier(rng, N, V, Vp, 1.0f / N));
  add(new AdamW(rng, s.elements, 10, 0.1f, 1.0f));
  add(new SumSquares(rng, s.elements));
  return v;
}

}  // namespace optest
}  // namespace gpt2
