// Gradient mode: central finite differences in fp64 on the fp64 instantiation
// of the very op code the backend runs in fp32 (backend/cpu/ops.h templates).
// For each backward op the scalar L = sum_i r_i * forward(x)_i with fixed random
// r is differentiated numerically, (L(x+h) - L(x-h)) / 2h, and compared with
// the backward op fed dout = r (with zeroed "+=" gradients). h = 1e-5 puts the
// truncation error (~h^2) and the cancellation error (~1e-16 |L| / h) near
// 1e-10, so the tolerance below, 1e-6 relative to the component plus 1e-7 of
// the tensor's largest gradient, leaves room only for rounding: a wrong
// formula is off by O(1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "test/backend/harness.h"

namespace gpt2 {
namespace {

using optest::Rng;
using DVec = std::vector<double>;
using cpu::Exec;

Exec exec() {
  Exec ex;
  ex.threads = cpu::resolve_threads(0);
  return ex;
}

DVec randn(Rng& rng, size_t n, double scale = 1.0, double offset = 0.0) {
  DVec v(n);
  for (auto& x : v) x = offset + scale * rng.normal();
  return v;
}

double weighted_sum(const DVec& r, const DVec& out) {
  double s = 0;
  for (size_t i = 0; i < out.size(); i++) s += r[i] * out[i];
  return s;
}

struct Param {
  std::string name;
  DVec* value;
  const DVec* analytic;
};

// Checks every element (or `max_checks` spread over the tensor) of every param.
void check_gradients(const std::vector<Param>& params, const std::function<double()>& loss,
                     Rng& rng, size_t max_checks = 400) {
  const double h = 1e-5;
  for (const Param& p : params) {
    DVec& x = *p.value;
    const DVec& g = *p.analytic;
    ASSERT_EQ(x.size(), g.size()) << p.name;
    double gmax = 0;
    for (double v : g) gmax = std::max(gmax, std::fabs(v));
    std::vector<size_t> idx;
    if (x.size() <= max_checks) {
      for (size_t i = 0; i < x.size(); i++) idx.push_back(i);
    } else {
      idx.push_back(0);
      idx.push_back(x.size() - 1);
      while (idx.size() < max_checks) idx.push_back(rng.next() % x.size());
    }
    int reported = 0;
    double worst = 0;
    for (size_t i : idx) {
      const double saved = x[i];
      x[i] = saved + h;
      const double lp = loss();
      x[i] = saved - h;
      const double lm = loss();
      x[i] = saved;
      const double numeric = (lp - lm) / (2 * h);
      const double tol = 1e-6 * std::fabs(g[i]) + 1e-7 * gmax + 1e-12;
      const double err = std::fabs(numeric - g[i]);
      worst = std::max(worst, err / tol);
      if (err > tol && reported++ < 5)
        ADD_FAILURE() << p.name << "[" << i << "]: analytic " << g[i] << ", numeric " << numeric
                      << " (|diff| " << err << " > " << tol << ")";
    }
    std::printf("  grad %-8s %6zu checked, worst %.3g of tolerance\n", p.name.c_str(), idx.size(),
                worst);
  }
}

TEST(GradCheck, Encoder) {
  const Exec ex = exec();
  Rng rng(11);
  const int B = 2, T = 5, C = 7, V = 6;
  std::vector<int32_t> tok(B * T);
  for (auto& t : tok) t = rng.below(V - 1);  // row V-1 unused: its gradient must stay 0
  tok[3] = tok[7];                            // a repeated id
  DVec wte = randn(rng, V * C), wpe = randn(rng, T * C), r = randn(rng, B * T * C);
  auto loss = [&] {
    DVec out(B * T * C);
    cpu::encoder_forward<double>(ex, out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    return weighted_sum(r, out);
  };
  DVec dwte(V * C, 0.0), dwpe(T * C, 0.0);
  cpu::encoder_backward<double>(ex, dwte.data(), dwpe.data(), r.data(), tok.data(), B, T, C);
  check_gradients({{"wte", &wte, &dwte}, {"wpe", &wpe, &dwpe}}, loss, rng);
}

TEST(GradCheck, Layernorm) {
  const Exec ex = exec();
  Rng rng(12);
  for (auto [N, C] : {std::pair<int, int>{3, 7}, {20, 37}}) {
    DVec inp = randn(rng, N * C, 2.0, 1.0), w = randn(rng, C, 1.0, 1.0), b = randn(rng, C);
    DVec r = randn(rng, N * C), mean(N), rstd(N);
    auto loss = [&] {
      DVec out(N * C), m(N), s(N);
      cpu::layernorm_forward<double>(ex, out.data(), m.data(), s.data(), inp.data(), w.data(),
                                     b.data(), N, C);
      return weighted_sum(r, out);
    };
    DVec out(N * C);
    cpu::layernorm_forward<double>(ex, out.data(), mean.data(), rstd.data(), inp.data(), w.data(),
                                   b.data(), N, C);
    DVec dinp(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
    cpu::layernorm_backward<double>(ex, dinp.data(), dw.data(), db.data(), r.data(), inp.data(),
                                    w.data(), mean.data(), rstd.data(), N, C);
    check_gradients({{"inp", &inp, &dinp}, {"w", &w, &dw}, {"b", &b, &db}}, loss, rng);
  }
}

TEST(GradCheck, Matmul) {
  const Exec ex = exec();
  Rng rng(13);
  for (auto [N, C, OC] : {std::tuple<int, int, int>{5, 7, 3}, {33, 40, 67}}) {
    DVec inp = randn(rng, N * C), w = randn(rng, OC * C), bias = randn(rng, OC);
    DVec r = randn(rng, N * OC);
    auto loss = [&] {
      DVec out(N * OC);
      cpu::matmul_forward<double>(ex, out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
      return weighted_sum(r, out);
    };
    DVec dinp(N * C, 0.0), dw(OC * C, 0.0), dbias(OC, 0.0);
    cpu::matmul_backward<double>(ex, dinp.data(), dw.data(), dbias.data(), r.data(), inp.data(),
                                 w.data(), N, C, OC);
    check_gradients({{"inp", &inp, &dinp}, {"w", &w, &dw}, {"bias", &bias, &dbias}}, loss, rng);
  }
}

// Attention, and with attention dropout (a fixed mask: the loss is then a smooth
// function of qkv, and the backward must be its derivative with the same mask).
void check_attention_gradients(float drop_p, uint64_t seed) {
  const Exec ex = exec();
  Rng rng(14 + seed);
  DropoutMask drop;
  drop.seed = seed, drop.step = 3, drop.token0 = 17, drop.p = drop_p;
  drop.stream = DropoutMask::stream_of(1, DropoutMask::kAttentionProbs);
  for (auto [B, T, C, NH] : {std::tuple<int, int, int, int>{1, 1, 4, 1}, {2, 6, 12, 3},
                             {1, 9, 28, 4}, {1, 70, 8, 2}, {2, 19, 8, 2}}) {
    DVec qkv = randn(rng, B * T * 3 * C), r = randn(rng, B * T * C);
    auto loss = [&] {
      DVec out(B * T * C), lse(cpu::attention_saved_numel(B, T, NH));
      cpu::attention_forward<double>(ex, out.data(), lse.data(), qkv.data(), B, T, C, NH, drop);
      return weighted_sum(r, out);
    };
    DVec out(B * T * C), lse(cpu::attention_saved_numel(B, T, NH));
    cpu::attention_forward<double>(ex, out.data(), lse.data(), qkv.data(), B, T, C, NH, drop);
    DVec dqkv(B * T * 3 * C, 12345.0);  // "=" output: must be overwritten
    DVec scratch(cpu::attention_scratch_numel(ex, T));
    cpu::attention_backward<double>(ex, dqkv.data(), scratch.data(), r.data(), qkv.data(),
                                    lse.data(), B, T, C, NH, drop);
    check_gradients({{"qkv", &qkv, &dqkv}}, loss, rng);
  }
}

TEST(GradCheck, Attention) { check_attention_gradients(0.0f, 0); }
TEST(GradCheck, AttentionWithDropout) { check_attention_gradients(0.3f, 5); }

TEST(GradCheck, Gelu) {
  const Exec ex = exec();
  Rng rng(15);
  const size_t n = 300;
  DVec x = randn(rng, n, 3.0), r = randn(rng, n);
  auto loss = [&] {
    DVec out(n);
    cpu::gelu_forward<double>(ex, out.data(), x.data(), n);
    return weighted_sum(r, out);
  };
  DVec dx(n);
  cpu::gelu_backward<double>(ex, dx.data(), x.data(), r.data(), n);
  check_gradients({{"inp", &x, &dx}}, loss, rng);
}

TEST(GradCheck, Classifier) {
  const Exec ex = exec();
  Rng rng(16);
  for (auto [N, V, Vp] : {std::tuple<int, int, int>{3, 7, 7}, {4, 37, 48}}) {
    DVec logits = randn(rng, N * Vp, 2.0);
    std::vector<int32_t> tg(N);
    for (auto& t : tg) t = rng.below(V);
    tg[N - 1] = kIgnoreTarget;  // an ignored row: numerically and analytically zero gradient
    auto loss = [&] {  // L = sum of the row losses; dloss = 0 leaves logits intact
      DVec l = logits, losses(N);
      cpu::classifier_forward_backward<double>(ex, l.data(), losses.data(), tg.data(), N, V, Vp, 0.0);
      double s = 0;
      for (double v : losses) s += v;
      return s;
    };
    DVec dlogits = logits, losses(N);
    cpu::classifier_forward_backward<double>(ex, dlogits.data(), losses.data(), tg.data(), N, V, Vp,
                                             1.0);
    // Padded columns included: their numeric gradient is 0 and so must the written one be.
    check_gradients({{"logits", &logits, &dlogits}}, loss, rng);
  }
}

}  // namespace
}  // namespace gpt2
