// Op cases of attention (backend.h): attention_forward and attention_backward
// against a naive fp64 reference (the full probability matrix), with and without
// attention-probability dropout (the reference draws Z itself from
// util/philox.h, so every backend must keep exactly these elements).
// Tolerances as cases.cpp explains: worst cases over any sgemm summation order
// (forward), an allowance (backward).
#include <algorithm>
#include <cmath>

#include "test/backend/case_util.h"

namespace gpt2 {
namespace optest {

namespace {

// Naive fp64 attention: the full probability matrix, no tricks; z() is the
// dropout factor of backend.h's Z (1 without dropout).
struct AttentionRef {
  int B, T, C, NH;
  const Vec& qkv;
  DropoutMask drop;
  double z(int b, int h, int t, int j) const {
    if (drop.p == 0.0f) return 1.0;
    return drop.keep_attention(drop.token0 + uint64_t(b) * T, T, h, t, j) ? double(drop.keep_scale()) : 0.0;
  }
  double q(int b, int t, int h, int d) const { return qkv[(size_t(b) * T + t) * 3 * C + h * (C / NH) + d]; }
  double k(int b, int t, int h, int d) const { return qkv[(size_t(b) * T + t) * 3 * C + C + h * (C / NH) + d]; }
  double v(int b, int t, int h, int d) const { return qkv[(size_t(b) * T + t) * 3 * C + 2 * C + h * (C / NH) + d]; }
  // probs[t][j] for one (b, h), j <= t
  std::vector<DVec> probs(int b, int h) const {
    const int hs = C / NH;
    const double sc = 1.0 / std::sqrt(double(hs));
    std::vector<DVec> P(T, DVec(T, 0.0));
    for (int t = 0; t < T; t++) {
      double mx = -INFINITY;
      for (int j = 0; j <= t; j++) {
        double s = 0;
        for (int d = 0; d < hs; d++) s += q(b, t, h, d) * k(b, j, h, d);
        P[t][j] = s * sc;
        mx = std::max(mx, P[t][j]);
      }
      double sum = 0;
      for (int j = 0; j <= t; j++) sum += (P[t][j] = std::exp(P[t][j] - mx));
      for (int j = 0; j <= t; j++) P[t][j] /= sum;
    }
    return P;
  }
};

double attention_pairs(int B, int T, int NH) { return double(B) * NH * T * (T + 1) / 2.0; }

// An attention-probability dropout mask of rate p (p == 0: none) for the cases.
DropoutMask attention_mask(float p, uint64_t token0) {
  DropoutMask m;
  m.seed = 0xa77e5eedULL;
  m.step = 11;
  m.stream = DropoutMask::stream_of(2, DropoutMask::kAttentionProbs);
  m.token0 = token0;
  m.p = p;
  return m;
}
std::string attention_params(int B, int T, int C, int NH, const DropoutMask& m) {
  if (m.p == 0.0f) return join({{"B", B}, {"T", T}, {"C", C}, {"NH", NH}});
  return join({{"B", B}, {"T", T}, {"C", C}, {"NH", NH}, {"drop_x1000", long(m.p * 1000)}, {"token0", long(m.token0)}});
}

class AttentionForward : public OpCase {
 public:
  AttentionForward(Rng& rng, int B, int T, int C, int NH, double scale = 1.0, float p = 0.0f, uint64_t token0 = 0)
      : B_(B), T_(T), C_(C), NH_(NH), drop_(attention_mask(p, token0)) {
    inputs = {{"qkv", randn(rng, size_t(B) * T * 3 * C, scale)}};
    outputs = {{"out", Vec(size_t(B) * T * C), true}};
  }
  std::string op() const override { return "attention_forward"; }
  std::string params() const override { return attention_params(B_, T_, C_, NH_, drop_); }
  void prepare(Ctx& c) override {
    saved_ = c.temp(c.be.attention_saved_numel(B_, T_, NH_), BufferRole::kActivations);
  }
  void run(Ctx& c) override { c.be.attention_forward({.out = c.out[0], .saved = saved_, .qkv = c.in[0], .B = B_,
                                                      .T = T_, .C = C_, .NH = NH_, .drop = drop_}); }
  std::vector<DVec> reference() const override {
    AttentionRef r{B_, T_, C_, NH_, inputs[0].data, drop_};
    const int hs = C_ / NH_;
    DVec out(size_t(B_) * T_ * C_, 0.0);
    for (int b = 0; b < B_; b++)
      for (int h = 0; h < NH_; h++) {
        auto P = r.probs(b, h);
        for (int t = 0; t < T_; t++)
          for (int d = 0; d < hs; d++) {
            double acc = 0;
            for (int j = 0; j <= t; j++) acc += P[t][j] * r.z(b, h, t, j) * r.v(b, j, h, d);
            out[(size_t(b) * T_ + t) * C_ + h * hs + d] = acc;
          }
      }
    return {out};
  }
  // magnitude() is the worst-case bound (any GEMM summation order) in units of u = 2^-24.
  Tolerance tolerance(size_t) const override { return {1e-30, 0x1p-24}; }
  // Score s_j = fl(1/sqrt(hs)) * (q.k_j) in fp32: abs error e_j <= gamma(hs+3) sc sum|q k_j|
  // (hs products, 1/sqrt, the alpha multiply). p_j = vexp(s_j - max): relative error
  // eps_j <= e_j + u|s_j - max| (the subtraction) + 4u (vexp's 2 ulp); the common max
  // cancels. out = (sum_j p_j v_j) / sum_j p_j, each a sum of <= T terms (gamma(T)), times
  // 1/sum (2u). With P the exact probabilities, to first order (x1.01 for the rest):
  //   |out - ref| <= sum_j P_j eps_j (|v_j| + |ref|) + gamma(T) sum_j P_j |v_j| + (gamma(T) + 2u) |ref|.
  // With dropout P_j is P_j z_j in the sums over v_j (z the factor of its key) and p_j
  // z_j one more rounding (u in eps_j); the row sum |ref| terms keep P_j (they are P's).
  std::vector<double> magnitude(size_t) const override {
    AttentionRef r{B_, T_, C_, NH_, inputs[0].data, drop_};
    const int hs = C_ / NH_;
    const double u = 0x1p-24, sc = 1.0 / std::sqrt(double(hs)), gT = gamma32(T_);
    const DVec ref = reference()[0];
    DVec bound(ref.size());
    for (int b = 0; b < B_; b++)
      for (int h = 0; h < NH_; h++) {
        auto P = r.probs(b, h);
        for (int t = 0; t < T_; t++) {
          DVec s(t + 1, 0.0), eps(t + 1, 0.0);  // scores, then the relative errors of p
          for (int j = 0; j <= t; j++)
            for (int d = 0; d < hs; d++) {
              s[j] += sc * r.q(b, t, h, d) * r.k(b, j, h, d);
              eps[j] += gamma32(hs + 3) * sc * std::fabs(r.q(b, t, h, d) * r.k(b, j, h, d));
            }
          const double mx = *std::max_element(s.begin(), s.end());
          for (int j = 0; j <= t; j++) eps[j] = std::expm1(eps[j] + u * (mx - s[j]) + (drop_.p > 0 ? 5 : 4) * u);
          for (int d = 0; d < hs; d++) {
            const size_t i = (size_t(b) * T_ + t) * C_ + h * hs + d;
            double e = 0, pv = 0;
            for (int j = 0; j <= t; j++) {
              const double v = std::fabs(r.v(b, j, h, d)), z = r.z(b, h, t, j);
              e += P[t][j] * eps[j] * (z * v + std::fabs(ref[i]));
              pv += P[t][j] * z * v;
            }
            bound[i] = 1.01 * (e + gT * pv + (gT + 2 * u) * std::fabs(ref[i])) / u;
          }
        }
      }
    return bound;
  }
  double flops() const override { return 4.0 * attention_pairs(B_, T_, NH_) * (C_ / NH_); }
  double bytes() const override { return (4.0 * B_ * T_ * C_ + double(B_) * NH_ * T_) * 4; }

 private:
  int B_, T_, C_, NH_;
  DropoutMask drop_;
  Tensor saved_;
};

class AttentionBackward : public OpCase {
 public:
  AttentionBackward(Rng& rng, int B, int T, int C, int NH, float p = 0.0f, uint64_t token0 = 0)
      : B_(B), T_(T), C_(C), NH_(NH), drop_(attention_mask(p, token0)) {
    inputs = {{"dout", randn(rng, size_t(B) * T * C)}, {"qkv", randn(rng, size_t(B) * T * 3 * C)}};
    outputs = {{"dqkv", Vec(size_t(B) * T * 3 * C), true}};
  }
  std::string op() const override { return "attention_backward"; }
  std::string params() const override { return attention_params(B_, T_, C_, NH_, drop_); }
  void prepare(Ctx& c) override {
    saved_ = c.temp(c.be.attention_saved_numel(B_, T_, NH_), BufferRole::kActivations);
    out_ = c.temp(size_t(B_) * T_ * C_, BufferRole::kActivations);
    scratch_ = c.temp(c.be.attention_scratch_numel(B_, T_, NH_), BufferRole::kScratch);
    c.be.attention_forward({.out = out_, .saved = saved_, .qkv = c.in[1], .B = B_, .T = T_, .C = C_, .NH = NH_,
                            .drop = drop_});
  }
  void run(Ctx& c) override {
    c.be.attention_backward({.dqkv = c.out[0], .scratch = scratch_, .dout = c.in[0], .out = out_, .qkv = c.in[1],
                             .saved = saved_, .B = B_, .T = T_, .C = C_, .NH = NH_, .drop = drop_});
  }
  // With dropout: dP = (dout v^T) o Z, dS = P (dP - D), dv = (P o Z)^T dout.
  std::vector<DVec> reference() const override {
    AttentionRef r{B_, T_, C_, NH_, inputs[1].data, drop_};
    const Vec& dout = inputs[0].data;
    const int hs = C_ / NH_;
    const double sc = 1.0 / std::sqrt(double(hs));
    DVec dqkv(size_t(B_) * T_ * 3 * C_, 0.0);
    auto at = [&](int b, int t, int part, int h, int d) -> double& {
      return dqkv[(size_t(b) * T_ + t) * 3 * C_ + part * C_ + h * hs + d];
    };
    for (int b = 0; b < B_; b++)
      for (int h = 0; h < NH_; h++) {
        auto P = r.probs(b, h);
        for (int t = 0; t < T_; t++) {
          const float* dt = &dout[(size_t(b) * T_ + t) * C_ + h * hs];
          DVec dp(t + 1);
          double D = 0;
          for (int j = 0; j <= t; j++) {
            double s = 0;
            for (int d = 0; d < hs; d++) s += dt[d] * r.v(b, j, h, d);
            dp[j] = s * r.z(b, h, t, j);
            D += P[t][j] * dp[j];
          }
          for (int j = 0; j <= t; j++) {
            const double ds = P[t][j] * (dp[j] - D) * sc;
            for (int d = 0; d < hs; d++) {
              at(b, t, 0, h, d) += ds * r.k(b, j, h, d);
              at(b, j, 1, h, d) += ds * r.q(b, t, h, d);
              at(b, j, 2, h, d) += P[t][j] * r.z(b, h, t, j) * dt[d];
            }
          }
        }
      }
    return {dqkv};
  }
  // Not a derived worst case (scores, exp, dP, D and three more GEMMs chained): an
  // allowance of ~sqrt(T) fp32 ulps of O(1) terms, 40x above what any of the
  // Haswell/SkylakeX/Zen sgemm kernels gives (worst 0.024 of it).
  Tolerance tolerance(size_t) const override { return {5e-6 * std::sqrt(double(T_)), 5e-6}; }
  double flops() const override { return 10.0 * attention_pairs(B_, T_, NH_) * (C_ / NH_); }
  double bytes() const override { return (7.0 * B_ * T_ * C_ + double(B_) * NH_ * T_) * 4; }

 private:
  int B_, T_, C_, NH_;
  DropoutMask drop_;
  Tensor saved_, out_, scratch_;
};

}  // namespace

bool add_attention_cases(const std::string& op, Rng& rng, std::vector<std::unique_ptr<OpCase>>& v) {
  auto add = [&](OpCase* c) { v.emplace_back(c); };
  if (op == "attention_forward") {
    add(new AttentionForward(rng, 1, 1, 4, 1));
    add(new AttentionForward(rng, 2, 5, 12, 3));
    add(new AttentionForward(rng, 1, 9, 28, 4));  // head size 7
    add(new AttentionForward(rng, 2, 17, 64, 2));
    add(new AttentionForward(rng, 1, 8, 16, 2, 30.0));  // sharp softmax: max subtraction matters
    add(new AttentionForward(rng, 2, 130, 36, 2));      // 3 row blocks, the last of 2 rows
    // attention dropout: rows and keys across 2x2 draw blocks, T not a multiple of 16, B > 1
    add(new AttentionForward(rng, 2, 21, 12, 3, 1.0, 0.2f, 40));
    add(new AttentionForward(rng, 2, 130, 36, 2, 1.0, 0.5f, (1ULL << 32) - 100));  // tokens across 2^32
  } else if (op == "attention_backward") {
    add(new AttentionBackward(rng, 1, 1, 4, 1));
    add(new AttentionBackward(rng, 2, 5, 12, 3));
    add(new AttentionBackward(rng, 1, 9, 28, 4));
    add(new AttentionBackward(rng, 2, 17, 64, 2));
    add(new AttentionBackward(rng, 2, 130, 36, 2));
    add(new AttentionBackward(rng, 2, 21, 12, 3, 0.2f, 40));
    add(new AttentionBackward(rng, 2, 130, 36, 2, 0.5f, (1ULL << 32) - 100));
  } else {
    return false;
  }
  return true;
}

void add_attention_perf_cases(Rng& rng, int B, int T, int C, int NH, std::vector<std::unique_ptr<OpCase>>& v) {
  v.emplace_back(new AttentionForward(rng, B, T, C, NH));
  v.emplace_back(new AttentionBackward(rng, B, T, C, NH));
}

}  // namespace optest
}  // namespace gpt2
