// Op cases of dropout (backend.h): inverted dropout whose mask the reference
// draws itself from util/philox.h (a pure function of seed, step, stream,
// token and column), so every backend must keep exactly these elements; one
// fp32 product each. A NaN in the input stays NaN (x * 0).
#include <limits>

#include "test/backend/case_util.h"

namespace gpt2 {
namespace optest {

namespace {

class Dropout : public OpCase {
 public:
  Dropout(Rng& rng, int N, int C, float p, uint64_t token0, bool in_place) : N_(N), C_(C), in_place_(in_place) {
    mask_.seed = 0x5eed0000ULL + static_cast<uint64_t>(N) * 131 + C;
    mask_.step = 7;
    mask_.stream = DropoutMask::stream_of(3, DropoutMask::kMlpProj);
    mask_.token0 = token0;
    mask_.p = p;
    Vec x = randn(rng, size_t(N) * C);
    if (x.size() >= 3) x[1] = std::numeric_limits<float>::quiet_NaN();
    inputs = {{"inp", x}};
    outputs = {{"out", Vec(x.size()), true}};
  }
  std::string op() const override { return "dropout"; }
  std::string params() const override {
    return join({{"N", N_}, {"C", C_}, {"p_x1000", long(mask_.p * 1000)}, {"token0", long(mask_.token0)}},
                in_place_ ? "in_place" : "");
  }
  void run(Ctx& c) override {
    if (in_place_) {
      c.be.copy(c.out[0], c.in[0]);
      c.be.dropout({.out = c.out[0], .inp = c.out[0], .m = mask_, .N = N_, .C = C_});
    } else {
      c.be.dropout({.out = c.out[0], .inp = c.in[0], .m = mask_, .N = N_, .C = C_});
    }
  }
  std::vector<DVec> reference() const override {
    DVec out(size_t(N_) * C_);
    const double scale = mask_.keep_scale();
    for (int r = 0; r < N_; r++)
      for (int col = 0; col < C_; col++) {
        const size_t i = size_t(r) * C_ + col;
        out[i] = double(inputs[0].data[i]) * (mask_.keep(mask_.token0 + r, col) ? scale : 0.0);
      }
    return {out};
  }
  // One correctly rounded fp32 multiply: within 2^-24 |ref| < 6e-8 |ref|.
  Tolerance tolerance(size_t) const override { return {1e-30, 6e-8}; }
  double bytes() const override { return 2.0 * N_ * C_ * 4; }

 private:
  int N_, C_;
  bool in_place_;
  DropoutMask mask_;
};

}  // namespace

bool add_dropout_cases(const std::string& op, Rng& rng, std::vector<std::unique_ptr<OpCase>>& v) {
  if (op != "dropout") return false;
  auto add = [&](OpCase* c) { v.emplace_back(c); };
  add(new Dropout(rng, 1, 1, 0.1f, 0, false));
  add(new Dropout(rng, 7, 13, 0.1f, 5, false));  // partial groups of 4 columns
  add(new Dropout(rng, 33, 64, 0.5f, 1000, true));
  add(new Dropout(rng, 9, 37, 0.0f, 3, false));                 // p = 0: the identity
  add(new Dropout(rng, 4, 768, 0.1f, (1ULL << 32) - 2, false));  // tokens across 2^32
  return true;
}

}  // namespace optest
}  // namespace gpt2
