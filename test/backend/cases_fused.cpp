// Op cases of the fused entries (backend.h): matmul_gelu_forward and
// matmul_gelu_backward (the fc layer with its GELU, the fcproj backward with
// the GELU gradient) and residual_layernorm_forward (the residual add with the
// layernorm of its sum). The fp64 references are the unfused ops'. Shapes
// cover both CUDA paths: cuBLASLt's GELU epilogues (the GELU matrix's leading
// dimension a multiple of 8) and the kernels' fallback (5 or 13 columns).
//
// Tolerances: the product's worst case (cases.cpp, MatmulForward / MatmulBackward:
// gamma(k) of sum |terms|) carried through GELU, whose slope is at most 1.13,
// plus GELU's own error relative to the same magnitude (>= |pre|). cuBLASLt does
// not document its GELU: on a GPU the epilogue may use the hardware tanh
// (tanh.approx.f32, relative error up to 2^-10.987), which moves 0.5 x (1 + tanh u)
// by up to 0.5 |x| 2^-11 and the slope 0.5 (1 + t) + 0.5 x (1 - t^2) u' by up to
// (0.5 + |x| u') 2^-11: hence kEpilogueGelu (2^-12 and 2^-11 of the magnitudes
// below), not std::tanh's few ulps. A
// GELU of the form 0.5 x (1 + tanh u), as an epilogue may compute it, cancels
// in 1 + tanh u for x < 0 (and in 1 - tanh^2 u for the slope): its error is a
// few ulps of |x| (of |x| u'(x) for the slope), not of the result, so rtol
// applies to those magnitudes. Below x ~ -4.5 that allowance exceeds |gelu(x)|
// itself, so a GELU flushing the far tail to 0 would pass here; the
// gelu_forward cases (relative to the result) guard the tail of our kernel.
#include <algorithm>
#include <cmath>

#include "test/backend/case_util.h"

namespace gpt2 {
namespace optest {

namespace {

constexpr double kGeluSlope = 1.13;  // max |gelu'| (at x ~ 1.5)
// GELU's own error in an epilogue with a hardware tanh (2^-11 relative), forward and slope.
constexpr double kEpilogueGelu = 0x1p-12, kEpilogueGeluSlope = 0x1p-11;
double gelu_du(double x) { return std::sqrt(2.0 / M_PI) * (1.0 + 3 * 0.044715 * x * x); }

class MatmulGeluForward : public OpCase {
 public:
  MatmulGeluForward(Rng& rng, int N, int C, int OC, bool bias) : N_(N), C_(C), OC_(OC), bias_(bias) {
    // pre-activations ~ N(0, 4): both GELU tails and the bend at 0
    inputs = {{"inp", randn(rng, size_t(N) * C)}, {"w", randn(rng, size_t(OC) * C, 2.0 / std::sqrt(C))}};
    if (bias) inputs.push_back({"bias", randn(rng, OC)});
    outputs = {{"out", Vec(size_t(N) * OC), true}, {"pre", Vec(size_t(N) * OC), true}};
  }
  std::string op() const override { return "matmul_gelu_forward"; }
  std::string params() const override { return join({{"N", N_}, {"C", C_}, {"OC", OC_}}, bias_ ? "bias" : "nobias"); }
  void run(Ctx& c) override {
    c.be.matmul_gelu_forward({.out = c.out[0], .pre = c.out[1], .inp = c.in[0], .w = c.in[1],
                              .bias = bias_ ? c.in[2] : Tensor{}, .N = N_, .C = C_, .OC = OC_});
  }
  std::vector<DVec> reference() const override {
    const DVec pre = linear_ref(inputs[0].data, inputs[1].data, bias_ ? &inputs[2].data : nullptr, N_, C_, OC_);
    DVec out(pre.size());
    for (size_t i = 0; i < pre.size(); i++) out[i] = gelu_ref(pre[i]);
    return {out, pre};
  }
  // pre: C products + bias in any order; out: that error times the slope, plus GELU's.
  Tolerance tolerance(size_t o) const override {
    return o == 0 ? Tolerance{1e-30, gamma32(C_ + 1) + kEpilogueGelu} : Tolerance{1e-30, gamma32(C_ + 1)};
  }
  std::vector<double> magnitude(size_t o) const override {
    const Vec b = bias_ ? abs_of(inputs[2].data) : Vec();
    DVec m = linear_ref(abs_of(inputs[0].data), abs_of(inputs[1].data), bias_ ? &b : nullptr, N_, C_, OC_);
    if (o == 0)
      for (auto& x : m) x *= kGeluSlope;
    return m;
  }
  double flops() const override { return 2.0 * N_ * C_ * OC_; }
  double bytes() const override { return (double(N_) * C_ + double(OC_) * C_ + 2.0 * N_ * OC_) * 4; }

 private:
  int N_, C_, OC_;
  bool bias_;
};

class MatmulGeluBackward : public OpCase {
 public:
  MatmulGeluBackward(Rng& rng, int N, int C, int OC, bool bias) : N_(N), C_(C), OC_(OC), bias_(bias) {
    inputs = {{"dout", randn(rng, size_t(N) * OC)}, {"inp", randn(rng, size_t(N) * C)},
              {"w", randn(rng, size_t(OC) * C, 1.0 / std::sqrt(C))}, {"gelu_inp", randn(rng, size_t(N) * C, 2.0)}};
    outputs = {{"dinp", Vec(size_t(N) * C), true}, {"dw", randn(rng, size_t(OC) * C), false}};
    if (bias) outputs.push_back({"dbias", randn(rng, OC), false});
  }
  std::string op() const override { return "matmul_gelu_backward"; }
  std::string params() const override { return join({{"N", N_}, {"C", C_}, {"OC", OC_}}, bias_ ? "bias" : "nobias"); }
  void run(Ctx& c) override {
    c.be.matmul_gelu_backward({.dinp = c.out[0], .dw = c.out[1], .dbias = bias_ ? c.out[2] : Tensor{}, .dout = c.in[0],
                               .inp = c.in[1], .w = c.in[2], .gelu_inp = c.in[3], .N = N_, .C = C_, .OC = OC_});
  }
  std::vector<DVec> reference() const override {
    DVec dinp, dw = to_d(outputs[1].data), db = bias_ ? to_d(outputs[2].data) : DVec();
    linear_backward_ref(inputs[0].data, inputs[1].data, inputs[2].data, N_, C_, OC_, dinp, dw, bias_ ? &db : nullptr);
    for (size_t i = 0; i < dinp.size(); i++) dinp[i] *= gelu_grad_ref(inputs[3].data[i]);
    std::vector<DVec> r = {dinp, dw};
    if (bias_) r.push_back(db);
    return r;
  }
  // dinp: the product a = dout w (gamma(OC) of its sum |terms|) times gelu'
  // (<= 1.13), plus the slope's own error relative to |a| (|gelu'| + |x| u'(x), the
  // slope's cancelling terms, >= 0.5 + |x| u'); dw, dbias: N terms onto the old value, gamma(N+1).
  Tolerance tolerance(size_t o) const override {
    return o == 0 ? Tolerance{1e-30, gamma32(OC_) + kEpilogueGeluSlope} : Tolerance{1e-30, gamma32(N_ + 1)};
  }
  std::vector<double> magnitude(size_t o) const override {
    std::vector<DVec> m = linear_backward_terms(inputs[0].data, inputs[1].data, inputs[2].data, outputs[1].data,
                                                bias_ ? &outputs[2].data : nullptr, N_, C_, OC_);
    if (o == 0)
      for (size_t i = 0; i < m[0].size(); i++) {
        const double x = inputs[3].data[i];
        m[0][i] *= kGeluSlope + std::fabs(x) * gelu_du(x);
      }
    return m[o];
  }
  double flops() const override { return 4.0 * N_ * C_ * OC_; }
  double bytes() const override { return (2.0 * N_ * OC_ + double(N_) * C_ * 3 + 3.0 * OC_ * C_) * 4; }

 private:
  int N_, C_, OC_;
  bool bias_;
};

class ResidualLayernormForward : public OpCase {
 public:
  ResidualLayernormForward(Rng& rng, int N, int C, bool in_place) : N_(N), C_(C), in_place_(in_place) {
    inputs = {{"a", randn(rng, size_t(N) * C, 2.0, 3.0)}, {"b", randn(rng, size_t(N) * C)},
              {"w", randn(rng, C, 1.0, 1.0)}, {"bias", randn(rng, C)}};
    outputs = {{"residual", Vec(size_t(N) * C), true}, {"out", Vec(size_t(N) * C), true},
               {"mean", Vec(N), true, BufferRole::kStats}, {"rstd", Vec(N), true, BufferRole::kStats}};
  }
  std::string op() const override { return "residual_layernorm_forward"; }
  std::string params() const override { return join({{"N", N_}, {"C", C_}}, in_place_ ? "in_place" : ""); }
  void run(Ctx& c) override {
    Tensor a = c.in[0];
    if (in_place_) {  // residual aliases a
      c.be.copy(c.out[0], c.in[0]);
      a = c.out[0];
    }
    c.be.residual_layernorm_forward({.residual = c.out[0], .out = c.out[1], .mean = c.out[2], .rstd = c.out[3], .a = a,
                                     .b = c.in[1], .w = c.in[2], .bias = c.in[3], .N = N_, .C = C_});
  }
  std::vector<DVec> reference() const override {
    const Vec &a = inputs[0].data, &b = inputs[1].data, &w = inputs[2].data, &bias = inputs[3].data;
    DVec sum(a.size()), out(a.size()), mean, rstd;
    for (size_t i = 0; i < a.size(); i++) sum[i] = double(a[i]) + b[i];
    layernorm_stats(sum, N_, C_, mean, rstd);
    for (int n = 0; n < N_; n++)
      for (int c = 0; c < C_; c++)
        out[size_t(n) * C_ + c] = (sum[size_t(n) * C_ + c] - mean[n]) * rstd[n] * w[c] + bias[c];
    return {sum, out, mean, rstd};
  }
  // The sum: one fp32 rounding. The layernorm: LayernormForward's, on the rounded sum
  // (rstd ~ 1/3 scales that rounding down).
  Tolerance tolerance(size_t o) const override { return o == 0 ? Tolerance{0, 1e-7} : Tolerance{2e-6, 2e-6}; }
  double bytes() const override { return (4.0 * N_ * C_ + 2.0 * N_) * 4; }

 private:
  int N_, C_;
  bool in_place_;
};

}  // namespace

bool add_fused_cases(const std::string& op, Rng& rng, std::vector<std::unique_ptr<OpCase>>& v) {
  auto add = [&](OpCase* c) { v.emplace_back(c); };
  if (op == "matmul_gelu_forward") {
    add(new MatmulGeluForward(rng, 1, 1, 1, true));
    add(new MatmulGeluForward(rng, 7, 13, 5, true));     // ld 5: the kernels' path
    add(new MatmulGeluForward(rng, 33, 40, 64, false));  // GELU_AUX
    add(new MatmulGeluForward(rng, 64, 96, 288, true));  // GELU_AUX_BIAS
    return true;
  }
  if (op == "matmul_gelu_backward") {
    add(new MatmulGeluBackward(rng, 1, 1, 1, true));
    add(new MatmulGeluBackward(rng, 7, 13, 5, true));    // ld 13: the kernels' path
    add(new MatmulGeluBackward(rng, 33, 64, 40, false)); // DGELU
    add(new MatmulGeluBackward(rng, 64, 288, 96, true));
    return true;
  }
  if (op == "residual_layernorm_forward") {
    add(new ResidualLayernormForward(rng, 1, 1, false));
    add(new ResidualLayernormForward(rng, 5, 7, true));      // scalar kernel
    add(new ResidualLayernormForward(rng, 33, 40, false));   // packed
    add(new ResidualLayernormForward(rng, 8, 768, true));
    return true;
  }
  return false;
}

void add_fused_perf_cases(Rng& rng, int N, int C, std::vector<std::unique_ptr<OpCase>>& v) {
  v.emplace_back(new MatmulGeluForward(rng, N, C, 4 * C, true));
  v.emplace_back(new MatmulGeluBackward(rng, N, 4 * C, C, true));
  v.emplace_back(new ResidualLayernormForward(rng, N, C, false));
}

}  // namespace optest
}  // namespace gpt2
