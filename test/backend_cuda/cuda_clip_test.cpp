// Gradient clipping that stays on the device (backend.h: sum_squares_into,
// clip_scale, read_clip, adamw_update_clipped), on the CPU backend and the CUDA
// backend in fp32 and bf16:
//  * the sum of squares is sum_squares's fp64 value, bit for bit;
//  * the scale is clip_scale_value of it (the trainer's host arithmetic), bit
//    for bit: clipping (norm above max), not clipping, clipping off (max 0);
//  * the AdamW update with the device scale equals adamw_update with that
//    scale as a float, bit for bit, with and without master weights;
//  * a NaN gradient makes the scale NaN, and the clipped update then leaves
//    params, master and moments untouched;
//  * read_clip returns the values of the last clip_scale even with more work
//    queued behind it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "test/backend_cuda/random_data.h"

namespace gpt2 {
namespace {

struct Named {
  std::string name;
  std::function<std::unique_ptr<Backend>()> make;
  bool master;  // bf16 params keep an fp32 master copy
};

std::vector<Named> backends() {
  auto cuda = [](bool bf16) {
    CudaBackendOptions o;
    o.bf16 = bf16;
    return make_cuda_backend(0, o);
  };
  return {{"cpu", [] { return make_cpu_backend(0); }, false},
          {"cuda fp32", [=] { return cuda(false); }, false},
          {"cuda bf16", [=] { return cuda(true); }, true}};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// params, master (bf16 only), grads, m, v of n elements, and a clip state.
struct OptState {
  Backend& be;
  Tensor p, master, g, m, v, clip;
  OptState(Backend& backend, size_t n, bool with_master, const std::vector<float>& grads) : be(backend) {
    p = be.alloc(n, BufferRole::kParams);
    g = be.alloc(n, BufferRole::kGrads);
    m = be.alloc(n, BufferRole::kOptimizer);
    v = be.alloc(n, BufferRole::kOptimizer);
    if (with_master) master = be.alloc(n, BufferRole::kOptimizer);
    clip = be.alloc(2, BufferRole::kScalar64);
    const std::vector<float> p0 = randn(n, 21), m0 = randn(n, 22, 0.1f);
    std::vector<float> v0 = randn(n, 23, 0.1f);
    for (float& x : v0) x = x * x;
    be.upload(p, p0.data());
    if (with_master) be.upload(master, p0.data());
    be.upload(g, grads.data());
    be.upload(m, m0.data());
    be.upload(v, v0.data());
  }
  ~OptState() {
    for (Tensor t : {p, master, g, m, v, clip}) be.free(t);
  }
  std::vector<float> get(Tensor t) {
    std::vector<float> host(t.numel);
    if (t.numel) be.download(host.data(), t);
    return host;
  }
  std::vector<std::vector<float>> all() { return {get(p), get(master), get(m), get(v)}; }
};

constexpr float kLr = 1e-2f, kB1 = 0.9f, kB2 = 0.95f, kEps = 1e-8f, kWd = 0.1f;

TEST(DeviceClip, NormAndScaleAreTheHostArithmeticBitwise) {
  const size_t n = 3001;
  const std::vector<float> grads = randn(n, 7, 0.06f);  // norm ~ 3.3
  for (const Named& b : backends()) {
    auto be = b.make();
    for (float max_norm : {1.0f, 10.0f, 0.0f}) {
      OptState s(*be, n, b.master, grads);
      be->sum_squares_into(s.clip, s.g);
      be->clip_scale(s.clip, max_norm);
      double got[2];
      be->read_clip(got, s.clip);
      const double sum = be->sum_squares(s.g);
      EXPECT_TRUE(same_bits(got[0], sum)) << b.name << ": " << got[0] << " vs " << sum;
      EXPECT_TRUE(same_bits(got[1], clip_scale_value(sum, max_norm))) << b.name << " max " << max_norm;
      EXPECT_EQ(got[1] == 1.0, max_norm != 1.0f) << b.name << " max " << max_norm << ": scale " << got[1];
    }
  }
}

TEST(DeviceClip, ClippedUpdateEqualsTheFloatScaleBitwise) {
  const size_t n = 3001;
  const std::vector<float> grads = randn(n, 8, 0.06f);
  for (const Named& b : backends()) {
    auto be = b.make();
    OptState with_clip(*be, n, b.master, grads), with_float(*be, n, b.master, grads);
    be->sum_squares_into(with_clip.clip, with_clip.g);
    be->clip_scale(with_clip.clip, 1.0f);
    double state[2];
    be->read_clip(state, with_clip.clip);
    ASSERT_LT(state[1], 1.0) << b.name << ": the case must clip";
    for (int t = 1; t <= 2; t++) {
      be->adamw_update_clipped({.params = with_clip.p, .master = with_clip.master, .grads = with_clip.g,
                                .m = with_clip.m, .v = with_clip.v, .lr = kLr, .beta1 = kB1, .beta2 = kB2, .eps = kEps,
                                .weight_decay = kWd, .t = t}, with_clip.clip);
      be->adamw_update({.params = with_float.p, .master = with_float.master, .grads = with_float.g, .m = with_float.m,
                        .v = with_float.v, .lr = kLr, .beta1 = kB1, .beta2 = kB2, .eps = kEps, .weight_decay = kWd,
                        .grad_scale = static_cast<float>(state[1]), .t = t});
    }
    const auto got = with_clip.all(), want = with_float.all();
    for (size_t k = 0; k < got.size(); k++) EXPECT_TRUE(same_bits(got[k], want[k])) << b.name << " array " << k;
  }
}

TEST(DeviceClip, NonFiniteGradientSkipsTheUpdate) {
  const size_t n = 1000;
  std::vector<float> grads = randn(n, 9);
  grads[417] = std::numeric_limits<float>::quiet_NaN();
  for (const Named& b : backends()) {
    auto be = b.make();
    OptState s(*be, n, b.master, grads);
    const auto before = s.all();
    be->sum_squares_into(s.clip, s.g);
    be->clip_scale(s.clip, 1.0f);
    be->adamw_update_clipped({.params = s.p, .master = s.master, .grads = s.g, .m = s.m, .v = s.v, .lr = kLr,
                              .beta1 = kB1, .beta2 = kB2, .eps = kEps, .weight_decay = kWd, .t = 1}, s.clip);
    double state[2];
    be->read_clip(state, s.clip);
    EXPECT_TRUE(std::isnan(state[0]) && std::isnan(state[1])) << b.name;
    const auto after = s.all();
    for (size_t k = 0; k < after.size(); k++) EXPECT_TRUE(same_bits(before[k], after[k])) << b.name << " array " << k;
  }
}

// Work queued after clip_scale (here: the gradient doubled, g = g + g, and a
// new sum of squares into the same state) does not change what read_clip
// returns: the CUDA backend copied the values behind the clip_scale kernel.
// (The CPU backend runs each call to its end: nothing is queued behind.)
TEST(DeviceClip, ReadClipReturnsTheLastClipScale) {
  const size_t n = 500;
  for (const Named& b : backends()) {
    if (b.name == "cpu") continue;
    auto be = b.make();
    const std::vector<float> grads = randn(n, 10);
    OptState s(*be, n, b.master, grads);
    be->sum_squares_into(s.clip, s.g);
    be->clip_scale(s.clip, 1.0f);
    be->residual_forward({.out = s.g, .a = s.g, .b = s.g, .n = n});  // exact doubling
    be->sum_squares_into(s.clip, s.g);
    double got[2];
    be->read_clip(got, s.clip);
    be->upload(s.g, grads.data());  // the original gradient again
    EXPECT_TRUE(same_bits(got[0], be->sum_squares(s.g))) << b.name;
  }
}

}  // namespace
}  // namespace gpt2
