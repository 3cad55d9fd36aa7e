// Op cases of the embedding ops: the token + position embedding forward and
// backward, and the tied wte/lm_head gradient over a window of vocabulary rows
// (ZeRO-2's chunks). Same rules as cases.cpp: fp64 references in plain loops.
#include <algorithm>
#include <cmath>

#include "test/backend/case_util.h"

namespace gpt2 {
namespace optest {

namespace {

// ---------------------------------------------------------------- encoder
class EncoderForward : public OpCase {
 public:
  EncoderForward(Rng& rng, int B, int T, int C, int V) : B_(B), T_(T), C_(C), V_(V) {
    inputs = {{"wte", randn(rng, size_t(V) * C)}, {"wpe", randn(rng, size_t(T) * C)}};
    std::vector<int32_t> tok(size_t(B) * T);
    for (auto& t : tok) t = rng.below(V);
    tok[0] = V - 1;  // the last row of the table
    tokens = {tok};
    outputs = {{"out", Vec(size_t(B) * T * C), true}};
  }
  std::string op() const override { return "encoder_forward"; }
  std::string params() const override { return join({{"B", B_}, {"T", T_}, {"C", C_}, {"V", V_}}); }
  void run(Ctx& c) override { c.be.encoder_forward({.out = c.out[0], .tokens = c.tok[0], .wte = c.in[0], .wpe = c.in[1],
                                                    .B = B_, .T = T_, .C = C_}); }
  std::vector<DVec> reference() const override {
    DVec out(size_t(B_) * T_ * C_);
    for (int b = 0; b < B_; b++)
      for (int t = 0; t < T_; t++)
        for (int ch = 0; ch < C_; ch++)
          out[(size_t(b) * T_ + t) * C_ + ch] =
              double(inputs[0].data[size_t(tokens[0][size_t(b) * T_ + t]) * C_ + ch]) +
              double(inputs[1].data[size_t(t) * C_ + ch]);
    return {out};
  }
  // One fp32 addition: correctly rounded, so within half an ulp of the fp64 sum.
  Tolerance tolerance(size_t) const override { return {1e-30, 6e-8}; }
  double bytes() const override { return 3.0 * B_ * T_ * C_ * 4; }

 private:
  int B_, T_, C_, V_;
};

class EncoderBackward : public OpCase {
 public:
  EncoderBackward(Rng& rng, int B, int T, int C, int V) : B_(B), T_(T), C_(C), V_(V) {
    inputs = {{"dout", randn(rng, size_t(B) * T * C)}};
    std::vector<int32_t> tok(size_t(B) * T);
    // Few distinct ids, so rows repeat and accumulate.
    for (auto& t : tok) t = rng.below(std::min(V, 5));
    tokens = {tok};
    outputs = {{"dwte", randn(rng, size_t(V) * C), false}, {"dwpe", randn(rng, size_t(T) * C), false}};
  }
  std::string op() const override { return "encoder_backward"; }
  std::string params() const override { return join({{"B", B_}, {"T", T_}, {"C", C_}, {"V", V_}}); }
  void run(Ctx& c) override {
    c.be.encoder_backward({.dwte = c.out[0], .dwpe = c.out[1], .dout = c.in[0], .tokens = c.tok[0], .B = B_, .T = T_,
                           .C = C_});
  }
  std::vector<DVec> reference() const override {
    DVec dwte = to_d(outputs[0].data), dwpe = to_d(outputs[1].data);
    for (int b = 0; b < B_; b++)
      for (int t = 0; t < T_; t++) {
        const size_t n = size_t(b) * T_ + t;
        for (int ch = 0; ch < C_; ch++) {
          const double d = inputs[0].data[n * C_ + ch];
          dwte[size_t(tokens[0][n]) * C_ + ch] += d;
          dwpe[size_t(t) * C_ + ch] += d;
        }
      }
    return {dwte, dwpe};
  }
  // The old value plus up to B*T N(0,1) terms, added in a fixed order (no BLAS):
  // the random walk of the roundings of partial sums ~ sqrt(k) is ~ u k = 6e-8 k;
  // 2e-7 B*T is 3.4x that at k = B*T, more for the rows with fewer terms.
  Tolerance tolerance(size_t) const override { return {2e-7 * B_ * T_, 1e-6}; }
  double bytes() const override { return (3.0 * B_ * T_ * C_ + 2.0 * T_ * C_) * 4; }

 private:
  int B_, T_, C_, V_;
};

// dwte_rows[r,:] += sum_n dlogits[n, v0+r] * lnf[n,:], then += dembed[n,:] for
// each n whose token is v0+r. Tokens are drawn from a few ids around the
// window's edges, so some fall inside (repeating), some outside on both sides.
class TiedEmbeddingRows : public OpCase {
 public:
  enum Parts { kBoth, kLmHeadOnly, kEmbeddingOnly };
  TiedEmbeddingRows(Rng& rng, int N, int C, int Vp, int v0, int rows, Parts parts = kBoth)
      : N_(N), C_(C), Vp_(Vp), v0_(v0), R_(rows), parts_(parts) {
    inputs = {{"dlogits", randn(rng, size_t(N) * Vp)}, {"lnf", randn(rng, size_t(N) * C)},
              {"dembed", randn(rng, size_t(N) * C)}};
    std::vector<int32_t> tok(N);
    for (auto& t : tok) t = std::min(Vp - 1, std::max(0, v0 - 2 + rng.below(std::min(rows, 5) + 4)));
    tokens = {tok};
    outputs = {{"dwte_rows", randn(rng, size_t(rows) * C), false}};
  }
  std::string op() const override { return "tied_embedding_backward_rows"; }
  std::string params() const override {
    return join({{"N", N_}, {"C", C_}, {"Vp", Vp_}, {"v0", v0_}, {"rows", R_}},
                parts_ == kBoth ? "both" : parts_ == kLmHeadOnly ? "lm_head" : "embedding");
  }
  void run(Ctx& c) override {
    const bool lm = parts_ != kEmbeddingOnly, emb = parts_ != kLmHeadOnly;
    c.be.tied_embedding_backward_rows({.dwte_rows = c.out[0], .dlogits = lm ? c.in[0] : Tensor{},
                                       .lnf = lm ? c.in[1] : Tensor{}, .dembed = emb ? c.in[2] : Tensor{},
                                       .tokens = c.tok[0], .N = N_, .C = C_, .Vp = Vp_, .v0 = v0_});
  }
  std::vector<DVec> reference() const override { return {updated(false)}; }
  // sgemm onto the old rows (N products + the old value), then the scatter's
  // additions (at most N): gamma(2N+1) of sum |terms|, in any summation order.
  Tolerance tolerance(size_t) const override { return {1e-30, gamma32(2.0 * N_ + 1)}; }
  std::vector<double> magnitude(size_t) const override { return updated(true); }
  double flops() const override { return 2.0 * N_ * C_ * R_; }
  double bytes() const override { return (double(N_) * R_ + 2.0 * N_ * C_ + 2.0 * R_ * C_) * 4; }

 private:
  // The updated rows in fp64; with `abs`, the sum of the absolute values of their terms.
  DVec updated(bool abs) const {
    const Vec dl = abs ? abs_of(inputs[0].data) : inputs[0].data, x = abs ? abs_of(inputs[1].data) : inputs[1].data,
              de = abs ? abs_of(inputs[2].data) : inputs[2].data;
    DVec dw = to_d(abs ? abs_of(outputs[0].data) : outputs[0].data);
    for (int r = 0; r < R_ && parts_ != kEmbeddingOnly; r++)
      for (int c = 0; c < C_; c++) {
        double acc = 0;
        for (int n = 0; n < N_; n++) acc += double(dl[size_t(n) * Vp_ + v0_ + r]) * x[size_t(n) * C_ + c];
        dw[size_t(r) * C_ + c] += acc;
      }
    for (int n = 0; n < N_ && parts_ != kLmHeadOnly; n++) {
      const int r = tokens[0][n] - v0_;
      if (r < 0 || r >= R_) continue;
      for (int c = 0; c < C_; c++) dw[size_t(r) * C_ + c] += de[size_t(n) * C_ + c];
    }
    return dw;
  }

  int N_, C_, Vp_, v0_, R_;
  Parts parts_;
};

}  // namespace

bool add_embedding_cases(const std::string& op, Rng& rng, std::vector<std::unique_ptr<OpCase>>& v) {
  auto add = [&](OpCase* c) { v.emplace_back(c); };
  if (op == "encoder_forward") {
    add(new EncoderForward(rng, 2, 5, 7, 11));
    add(new EncoderForward(rng, 1, 1, 16, 3));
    add(new EncoderForward(rng, 3, 17, 48, 97));
  } else if (op == "encoder_backward") {
    add(new EncoderBackward(rng, 2, 5, 7, 11));
    add(new EncoderBackward(rng, 1, 1, 16, 3));
    add(new EncoderBackward(rng, 4, 9, 37, 13));
    add(new EncoderBackward(rng, 2, 33, 200, 50));
  } else if (op == "tied_embedding_backward_rows") {
    add(new TiedEmbeddingRows(rng, 1, 1, 1, 0, 1));       // the whole 1-row table
    add(new TiedEmbeddingRows(rng, 13, 7, 20, 0, 20));    // the whole table
    add(new TiedEmbeddingRows(rng, 13, 7, 20, 6, 7));     // an inner window
    add(new TiedEmbeddingRows(rng, 40, 16, 48, 32, 16));  // the last chunk of 32-row chunks
    add(new TiedEmbeddingRows(rng, 70, 64, 192, 64, 64));
    add(new TiedEmbeddingRows(rng, 40, 16, 48, 16, 16, TiedEmbeddingRows::kLmHeadOnly));
    add(new TiedEmbeddingRows(rng, 40, 16, 48, 16, 16, TiedEmbeddingRows::kEmbeddingOnly));
  } else {
    return false;
  }
  return true;
}

void add_embedding_perf_cases(Rng& rng, int B, int T, int C, int Vp, std::vector<std::unique_ptr<OpCase>>& v) {
  v.emplace_back(new EncoderForward(rng, B, T, C, Vp));
  v.emplace_back(new EncoderBackward(rng, B, T, C, Vp));
  v.emplace_back(new TiedEmbeddingRows(rng, B * T, C, Vp, 9216, 9216));  // a d12 ZeRO-2 chunk
}

}  // namespace optest
}  // namespace gpt2
