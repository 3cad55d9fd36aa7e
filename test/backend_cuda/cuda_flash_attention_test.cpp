// The flash attention path of the CUDA backend (backend/cuda/flash_attention.cuh),
// executed by the emulator, on shapes the op harness does not cover: T = 1,
// T = 17, 65, 128, 130, 200 (tile edges: a partial last tile, exactly two
// tiles, two tiles plus two rows, four tiles), NH = 1..4, B = 1..3, head size 64 (the packed,
// 128-bit path) and 10, 12, 32, 40 (zero-padded to 64), a sharp softmax whose
// running max moves between key tiles, and operands at a 4-byte offset (the
// scalar loads with hs = 64).
//   fp32 (3xTF32, --tf32 off): forward and backward against the CPU backend,
//         |cuda - cpu| <= 2 (atol + rtol |cpu|) with the op harness's attention
//         tolerances (times scale^2 for the sharp cases: see the test);
//   tf32 (--tf32 on): the same with tf32's unit roundoff (see the test);
//   bf16: per element against bf16ref (the exact value of the flash formula
//         with its bf16 roundings; bf16_reference.h), no other slack;
//   dropout: fp32 and bf16, flash and classic, the same checks with a mask (and
//         the same bits under two run orders); tf32 flash with tf32's allowances;
//   all: the same bits under the three emulator run orders (no atomics), every
//         element of out and dqkv written (NaN poison before the call), and the
//         same bits with 1 worker and with 4 taking blocks in descending order
//         (the backward's ordered dq sums wait across blocks).
// Also: saved/scratch sizes of each path, kClassic still selectable, and the
// flash path refusing a head size above 64.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "emu/control.h"
#include "backend/cuda/cuda_backend.h"
#include "test/backend/harness.h"
#include "test/backend_cuda/bf16_reference.h"

namespace gpt2 {
namespace {

using emu::RunOrder;

struct Shape {
  int B, T, C, NH;
  double scale;  // of the random qkv (large: sharp softmax)
  bool offset;   // operands 1 element into their allocation (no 16-byte alignment)
  std::string str() const {
    return "B=" + std::to_string(B) + ",T=" + std::to_string(T) + ",C=" + std::to_string(C) +
           ",NH=" + std::to_string(NH) + (scale != 1.0 ? ",scale=" + std::to_string(scale) : "") +
           (offset ? ",offset" : "");
  }
};

const Shape kShapes[] = {
    {1, 1, 64, 1, 1.0, false},   {3, 1, 20, 2, 1.0, false},    {2, 17, 128, 2, 1.0, false},
    {1, 17, 40, 1, 1.0, false},  {3, 65, 256, 4, 1.0, false},  {2, 65, 48, 4, 1.0, false},
    {1, 128, 192, 3, 1.0, false}, {2, 128, 96, 3, 1.0, false}, {1, 130, 64, 1, 1.0, false},
    {1, 130, 64, 1, 4.0, false}, {2, 33, 128, 2, 1.0, true},   {1, 70, 36, 3, 3.0, true},
    {1, 200, 128, 2, 1.0, false},  // 4 key tiles, the last of 8 rows
};

std::vector<float> randn(optest::Rng& rng, size_t n, double scale) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

std::unique_ptr<Backend> make(bool bf16, CudaAttention kind = CudaAttention::kFlash, bool tf32 = false) {
  CudaBackendOptions o;
  o.bf16 = bf16;
  o.attention = kind;
  o.tf32 = tf32;
  return make_cuda_backend(0, o);
}

// Device tensors of one attention call, optionally 1 element into their allocation.
struct Call {
  Backend& be;
  std::vector<Tensor> owned;
  Tensor qkv, out, saved, dout, dqkv, scratch;
  Tensor take(size_t n, BufferRole role, bool offset) {
    Tensor t = be.alloc(n + (offset ? 1 : 0), role);
    owned.push_back(t);
    return offset ? t.slice(1, n) : t;
  }
  Call(Backend& b, const Shape& s) : be(b) {
    const size_t n = size_t(s.B) * s.T * s.C;
    qkv = take(3 * n, BufferRole::kActivations, s.offset);
    out = take(n, BufferRole::kActivations, s.offset);
    saved = take(be.attention_saved_numel(s.B, s.T, s.NH), BufferRole::kActivations, false);
    dout = take(n, BufferRole::kActivations, s.offset);
    dqkv = take(3 * n, BufferRole::kActivations, s.offset);
    scratch = take(be.attention_scratch_numel(s.B, s.T, s.NH), BufferRole::kScratch, false);
  }
  ~Call() {
    for (Tensor t : owned) be.free(t);
  }
  // Runs forward and backward on the given inputs; out and dqkv start as NaN.
  void run(const Shape& s, const std::vector<float>& q, const std::vector<float>& dy, std::vector<float>* o,
           std::vector<float>* dq, const DropoutMask& drop = DropoutMask{}) {
    be.upload(qkv, q.data());
    be.upload(dout, dy.data());
    const std::vector<float> nan_out(out.numel, std::numeric_limits<float>::quiet_NaN());
    const std::vector<float> nan_dqkv(dqkv.numel, std::numeric_limits<float>::quiet_NaN());
    be.upload(out, nan_out.data());
    be.upload(dqkv, nan_dqkv.data());
    be.attention_forward({.out = out, .saved = saved, .qkv = qkv, .B = s.B, .T = s.T, .C = s.C, .NH = s.NH,
                          .drop = drop});
    be.attention_backward({.dqkv = dqkv, .scratch = scratch, .dout = dout, .out = out, .qkv = qkv, .saved = saved,
                           .B = s.B, .T = s.T, .C = s.C, .NH = s.NH, .drop = drop});
    o->resize(out.numel);
    dq->resize(dqkv.numel);
    be.download(o->data(), out);
    be.download(dq->data(), dqkv);
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Worst |got - want| / (2 (atol + rtol |want|)); > 1 fails. NaN counts as a failure.
double worst_ratio(const std::vector<float>& got, const std::vector<float>& want, double atol, double rtol,
                   size_t* where) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const double r = std::fabs(double(got[i]) - want[i]) / (2 * (atol + rtol * std::fabs(want[i])));
    if (!(r <= worst)) worst = std::isnan(r) ? INFINITY : r, *where = i;
  }
  return worst;
}

TEST(CudaFlashAttention, Fp32MatchesCpuBackendUnderEveryRunOrder) {
  auto cpu = make_cpu_backend(0);
  auto cuda = make(false);
  optest::Rng rng(20261123);
  for (const Shape& s : kShapes) {
    const size_t n = size_t(s.B) * s.T * s.C;
    const std::vector<float> qkv = randn(rng, 3 * n, s.scale), dy = randn(rng, n, 1.0);
    std::vector<float> want_out, want_dq;
    {
      Shape plain = s;
      plain.offset = false;
      Call c(*cpu, plain);
      c.run(plain, qkv, dy, &want_out, &want_dq);
    }
    std::vector<float> first_out, first_dq;
    for (RunOrder order : {RunOrder::kForward, RunOrder::kReverse, RunOrder::kRandom}) {
      emu::ScopedRunOrder scoped(order, 11);
      Call c(*cuda, s);
      std::vector<float> out, dq;
      c.run(s, qkv, dy, &out, &dq);
      // Scores grow with scale^2, and an fp32 score's absolute error (u |s|) becomes a
      // relative error of exp(s - m): allowances for scale 1 (2e-6 ~ 34 u forward,
      // 5e-6 sqrt(T) backward, as cases.cpp's attention_backward) times scale^2.
      // Not worst cases (the CPU side is OpenBLAS sgemm, per-CPU order; flash
      // rescales per tile; the CUDA side is 3xTF32): the sharpest case (scale 4)
      // uses 0.69 of its allowance, each side ~0.35 of it against an fp64
      // reference; the scale-1 cases <= 0.35.
      // The kernels' base-2 exponents keep this count: fmaf(s, c, -m) rounds once, as
      // s - m did, and c = scale log2(e) rounded once replaces the product s * scale
      // (u |s| either way); m's own rounding is common to P and the alphas and cancels
      // in out. The backward adds the lse's conversions, (m + log2 l) ln 2 and then
      // lse log2(e): about 5 u |lse|, with |lse| <= max |s| + log T, so still
      // u |s|-sized and growing with scale^2.
      const double k = s.scale * s.scale;
      size_t at = 0;
      const double wf = worst_ratio(out, want_out, 2e-6 * k, 2e-6 * k, &at);
      EXPECT_LE(wf, 1.0) << s.str() << " out[" << at << "] " << out[at] << " vs cpu " << want_out[at];
      const double wb = worst_ratio(dq, want_dq, 5e-6 * k * std::sqrt(double(s.T)), 5e-6 * k, &at);
      EXPECT_LE(wb, 1.0) << s.str() << " dqkv[" << at << "] " << dq[at] << " vs cpu " << want_dq[at];
      if (first_out.empty()) {
        first_out = out, first_dq = dq;
      } else {
        EXPECT_TRUE(same_bits(out, first_out)) << s.str() << ": out depends on the run order";
        EXPECT_TRUE(same_bits(dq, first_dq)) << s.str() << ": dqkv depends on the run order";
      }
    }
  }
}

TEST(CudaFlashAttention, Bf16MatchesFlashReferencePerElement) {
  auto cuda = make(true);
  optest::Rng rng(20261124);
  for (const Shape& s : kShapes) {
    if (s.T > 65 && s.B * s.NH > 3) continue;  // the fp64 reference is O(B NH T^2 hs); keep it quick
    const size_t n = size_t(s.B) * s.T * s.C;
    std::vector<float> qkv = randn(rng, 3 * n, s.scale), dy = randn(rng, n, 1.0);
    for (auto& x : qkv) x = bf16ref::round_bf16(x);  // what the device holds
    for (auto& x : dy) x = bf16ref::round_bf16(x);
    std::vector<bf16ref::Output> ref_out, ref_dq;
    ref_out = bf16ref::attention_forward(qkv, s.B, s.T, s.C, s.NH, DropoutMask{});
    std::vector<float> first_out, first_dq;
    for (RunOrder order : {RunOrder::kForward, RunOrder::kReverse, RunOrder::kRandom}) {
      emu::ScopedRunOrder scoped(order, 5);
      Call c(*cuda, s);
      std::vector<float> out, dq;
      c.run(s, qkv, dy, &out, &dq);
      // the backward's reference takes the out it was given (D = rowsum(dy out))
      if (ref_dq.empty()) ref_dq = bf16ref::attention_backward(dy, out, qkv, s.B, s.T, s.C, s.NH, DropoutMask{});
      std::string problems;
      EXPECT_EQ(bf16ref::compare(out, ref_out[0], s.str() + " out", &problems).failures, 0u) << problems;
      EXPECT_EQ(bf16ref::compare(dq, ref_dq[0], s.str() + " dqkv", &problems).failures, 0u) << problems;
      if (first_out.empty()) {
        first_out = out, first_dq = dq;
      } else {
        EXPECT_TRUE(same_bits(out, first_out)) << s.str() << ": out depends on the run order";
        EXPECT_TRUE(same_bits(dq, first_dq)) << s.str() << ": dqkv depends on the run order";
      }
    }
  }
}

// The backward adds each query tile's dq parts in a fixed order, a key block
// waiting for its turn on a counter: with the 4 key blocks of a head running at
// once on 4 emulator workers, taken in descending order (key block 0, the last
// in every tile's order, starts first, so each block really waits), the same
// bits as one block at a time in the GPU's order. bf16, fp32 (3xTF32) and tf32.
void expect_same_bits_with_concurrent_blocks(bool bf16, bool tf32) {
  auto cuda = make(bf16, CudaAttention::kFlash, tf32);
  optest::Rng rng(20261127);
  const Shape s{2, 200, 128, 2, 1.0, false};  // 4 key tiles per head
  const size_t n = size_t(s.B) * s.T * s.C;
  std::vector<float> qkv = randn(rng, 3 * n, 1.0), dy = randn(rng, n, 1.0);
  if (bf16) {
    for (auto& x : qkv) x = bf16ref::round_bf16(x);
    for (auto& x : dy) x = bf16ref::round_bf16(x);
  }
  std::vector<float> out[2], dq[2];
  const int workers[2] = {1, 4};
  for (int i = 0; i < 2; i++) {
    emu::set_worker_threads(workers[i]);
    emu::set_block_dispatch(i == 0 ? emu::BlockDispatch::kAscending : emu::BlockDispatch::kDescending);
    Call c(*cuda, s);
    c.run(s, qkv, dy, &out[i], &dq[i]);
  }
  emu::set_block_dispatch(emu::BlockDispatch::kAscending);
  const char* env = std::getenv("GPT2_EMU_THREADS");
  emu::set_worker_threads(env ? std::atoi(env) : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  EXPECT_TRUE(same_bits(out[0], out[1]));
  EXPECT_TRUE(same_bits(dq[0], dq[1])) << "dqkv depends on how many blocks run at once";
  for (float x : dq[1]) ASSERT_TRUE(std::isfinite(x));
}
TEST(CudaFlashAttention, Bf16BackwardSameBitsWithConcurrentBlocks) { expect_same_bits_with_concurrent_blocks(true, false); }
TEST(CudaFlashAttention, Fp32BackwardSameBitsWithConcurrentBlocks) { expect_same_bits_with_concurrent_blocks(false, false); }
TEST(CudaFlashAttention, Tf32BackwardSameBitsWithConcurrentBlocks) { expect_same_bits_with_concurrent_blocks(false, true); }

// --tf32 on: every product's operands rounded to tf32 (10 mantissa bits, unit
// roundoff u = 2^-11; accumulation stays fp32). Against the CPU backend: |out|
// within 2 (4u + 4u |cpu|), dqkv within 2 (4u sqrt(T) + 4u |cpu|) (the backward's
// sums grow with T, as in the fp32 test); the seeded data use <= 1/4 of that.
// And not the bits of the 3xTF32 path: the switch reaches the kernels.
TEST(CudaFlashAttention, Tf32WithinTf32RoundoffOfCpuBackend) {
  auto cpu = make_cpu_backend(0);
  auto exact = make(false);
  auto tf32 = make(false, CudaAttention::kFlash, true);
  optest::Rng rng(20261128);
  const double u = std::ldexp(1.0, -11);
  for (const Shape& s : kShapes) {
    if (s.scale != 1.0) continue;  // sharp softmaxes amplify score errors by exp: the fp32 test covers them
    const size_t n = size_t(s.B) * s.T * s.C;
    const std::vector<float> qkv = randn(rng, 3 * n, s.scale), dy = randn(rng, n, 1.0);
    std::vector<float> want_out, want_dq, ex_out, ex_dq, out, dq;
    Shape plain = s;
    plain.offset = false;
    Call(*cpu, plain).run(plain, qkv, dy, &want_out, &want_dq);
    Call(*exact, s).run(s, qkv, dy, &ex_out, &ex_dq);
    Call(*tf32, s).run(s, qkv, dy, &out, &dq);
    size_t at = 0;
    const double wf = worst_ratio(out, want_out, 4 * u, 4 * u, &at);
    EXPECT_LE(wf, 1.0) << s.str() << " out[" << at << "] " << out[at] << " vs cpu " << want_out[at];
    const double wb = worst_ratio(dq, want_dq, 4 * u * std::sqrt(double(s.T)), 4 * u, &at);
    EXPECT_LE(wb, 1.0) << s.str() << " dqkv[" << at << "] " << dq[at] << " vs cpu " << want_dq[at];
    if (s.T > 1) {
      EXPECT_FALSE(same_bits(dq, ex_dq)) << s.str() << ": --tf32 on gave the 3xTF32 bits";
    }
  }
}

// ---- attention dropout (backend.h's Z; the flash kernels draw it per C fragment,
// the classic path per element): the CPU backend's mask and values, on shapes
// with partial tiles, partial 16-row draw blocks (T = 17, 70, 130), several
// heads and batch rows (the mask follows token0 + b T), tokens across 2^32.
const Shape kDropShapes[] = {
    {2, 17, 128, 2, 1.0, false}, {1, 130, 64, 1, 1.0, false}, {1, 70, 36, 3, 1.0, true}};

DropoutMask attention_drop(float p, uint64_t token0) {
  DropoutMask m;
  m.seed = 0xd809ULL << 33 | 77;
  m.step = 5;
  m.stream = DropoutMask::stream_of(4, DropoutMask::kAttentionProbs);
  m.token0 = token0;
  m.p = p;
  return m;
}

// kDropShapes with the mask on `cuda` (label: its path) against the CPU backend:
// |out - cpu| within 2 (fwd + fwd |cpu|), |dqkv - cpu| within 2 (bwd sqrt(T) + bwd |cpu|),
// the same bits under two run orders, and not the bits without dropout; with
// `other`, not other's dqkv bits either (a switch that must reach the kernels).
void expect_dropout_matches_cpu(Backend& cuda, const std::string& label, optest::Rng& rng, double fwd, double bwd,
                                Backend* other = nullptr) {
  auto cpu = make_cpu_backend(0);
  for (const Shape& s : kDropShapes) {
    const size_t n = size_t(s.B) * s.T * s.C;
    const std::vector<float> qkv = randn(rng, 3 * n, s.scale), dy = randn(rng, n, 1.0);
    const DropoutMask drop = attention_drop(0.2f, (1ULL << 32) - 40);
    Shape plain = s;
    plain.offset = false;
    std::vector<float> want_out, want_dq, out, dq, out2, dq2, undropped_out, undropped_dq;
    Call(*cpu, plain).run(plain, qkv, dy, &want_out, &want_dq, drop);
    {
      emu::ScopedRunOrder scoped(RunOrder::kForward, 3);
      Call(cuda, s).run(s, qkv, dy, &out, &dq, drop);
    }
    {
      emu::ScopedRunOrder scoped(RunOrder::kRandom, 9);
      Call(cuda, s).run(s, qkv, dy, &out2, &dq2, drop);
    }
    Call(cuda, s).run(s, qkv, dy, &undropped_out, &undropped_dq);
    const std::string name = s.str() + " " + label;
    size_t at = 0;
    EXPECT_LE(worst_ratio(out, want_out, fwd, fwd, &at), 1.0)
        << name << " out[" << at << "] " << out[at] << " vs cpu " << want_out[at];
    EXPECT_LE(worst_ratio(dq, want_dq, bwd * std::sqrt(double(s.T)), bwd, &at), 1.0)
        << name << " dqkv[" << at << "] " << dq[at] << " vs cpu " << want_dq[at];
    EXPECT_TRUE(same_bits(out, out2) && same_bits(dq, dq2)) << name << ": depends on the run order";
    if (s.T > 1) {
      EXPECT_FALSE(same_bits(out, undropped_out)) << name << ": dropout changed nothing";
    }
    if (other != nullptr && s.T > 1) {
      std::vector<float> other_out, other_dq;
      Call(*other, s).run(s, qkv, dy, &other_out, &other_dq, drop);
      EXPECT_FALSE(same_bits(dq, other_dq)) << name << ": the same dqkv bits as the other path";
    }
  }
}

// fp32 (flash 3xTF32, and classic) against the CPU backend with the fp32 test's
// allowances (the dropped P is P z, z <= 1/(1-p) = 1.25: the products keep their
// relative error), the same bits under two run orders, and not the bits without dropout.
TEST(CudaFlashAttention, Fp32DropoutMatchesCpuBackend) {
  optest::Rng rng(20261127);
  for (CudaAttention kind : {CudaAttention::kFlash, CudaAttention::kClassic}) {
    auto cuda = make(false, kind);
    expect_dropout_matches_cpu(*cuda, kind == CudaAttention::kFlash ? "flash" : "classic", rng, 2e-6, 5e-6);
  }
}

// --tf32 on with dropout: the flash kernels' Tf32Ops<false> instantiation with
// kDrop (no other test runs it). The allowances of Tf32WithinTf32RoundoffOfCpuBackend,
// unchanged: operands rounded to tf32 (10 mantissa bits, u = 2^-11) give each
// product a relative error <= 2u whatever the mask, and the dropped P is P z with
// z in {0, 1.25} (p = 0.2), one more fp32 rounding (2^-24) per element, which keeps
// the products' relative error; kDropShapes are all scale 1. The seeded data use
// <= 0.19 of the allowance (out and dqkv). Not the bits of the 3xTF32 path with the
// same mask: the switch reaches the dropout kernels.
TEST(CudaFlashAttention, Tf32DropoutWithinTf32RoundoffOfCpuBackend) {
  optest::Rng rng(20261129);
  auto tf32 = make(false, CudaAttention::kFlash, true);
  auto exact = make(false);
  const double u = std::ldexp(1.0, -11);
  expect_dropout_matches_cpu(*tf32, "flash tf32", rng, 4 * u, 4 * u, exact.get());
}

// bf16 (flash and classic) per element against bf16ref with the same mask.
TEST(CudaFlashAttention, Bf16DropoutMatchesReferencePerElement) {
  optest::Rng rng(20261128);
  for (CudaAttention kind : {CudaAttention::kFlash, CudaAttention::kClassic}) {
    auto cuda = make(true, kind);
    const auto ref_kernel = kind == CudaAttention::kFlash ? bf16ref::AttentionKernel::kFlash
                                                          : bf16ref::AttentionKernel::kClassic;
    for (const Shape& s : kDropShapes) {
      const size_t n = size_t(s.B) * s.T * s.C;
      std::vector<float> qkv = randn(rng, 3 * n, s.scale), dy = randn(rng, n, 1.0);
      for (auto& x : qkv) x = bf16ref::round_bf16(x);
      for (auto& x : dy) x = bf16ref::round_bf16(x);
      const DropoutMask drop = attention_drop(0.5f, 40);
      std::vector<float> out, dq;
      Call(*cuda, s).run(s, qkv, dy, &out, &dq, drop);
      const auto ref_out = bf16ref::attention_forward(qkv, s.B, s.T, s.C, s.NH, drop, ref_kernel);
      const auto ref_dq = bf16ref::attention_backward(dy, out, qkv, s.B, s.T, s.C, s.NH, drop, ref_kernel);
      const std::string name = s.str() + (kind == CudaAttention::kFlash ? " flash" : " classic");
      std::string problems;
      EXPECT_EQ(bf16ref::compare(out, ref_out[0], name + " out", &problems).failures, 0u) << problems;
      EXPECT_EQ(bf16ref::compare(dq, ref_dq[0], name + " dqkv", &problems).failures, 0u) << problems;
    }
  }
}

TEST(CudaFlashAttention, SavedAndScratchSizes) {
  const int B = 3, T = 17, NH = 4;
  const size_t rows = size_t(B) * NH * T;
  EXPECT_EQ(make(false)->attention_saved_numel(B, T, NH), rows);          // fp32 lse
  EXPECT_EQ(make(true)->attention_saved_numel(B, T, NH), 2 * rows);       // the same bytes in bf16 elements
  // fp32 words for both: D, the dq accumulator (per head: query tiles of 64 rows x 64), a turn counter per head and tile
  const size_t heads = size_t(B) * NH, tiles = (T + 63) / 64;
  EXPECT_EQ(make(false)->attention_scratch_numel(B, T, NH), rows + heads * tiles * 64 * 64 + heads * tiles);
  EXPECT_EQ(make(true)->attention_scratch_numel(B, T, NH), rows + heads * tiles * 64 * 64 + heads * tiles);
  EXPECT_EQ(make(false, CudaAttention::kClassic)->attention_saved_numel(B, T, NH), rows * T);  // P
  EXPECT_EQ(make(true, CudaAttention::kClassic)->attention_saved_numel(B, T, NH), rows * T);
}

// Head size 72: flash refuses it by name; the classic path (selected by option) runs it.
TEST(CudaFlashAttention, LargeHeadSizeNeedsClassic) {
  const Shape s{2, 9, 144, 2, 1.0, false};
  optest::Rng rng(7);
  const size_t n = size_t(s.B) * s.T * s.C;
  const std::vector<float> qkv = randn(rng, 3 * n, 1.0), dy = randn(rng, n, 1.0);
  {
    auto flash = make(false);
    Call c(*flash, s);
    std::vector<float> out, dq;
    try {
      c.run(s, qkv, dy, &out, &dq);
      ADD_FAILURE() << "flash attention accepted head size 72";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("head size <= 64"), std::string::npos) << e.what();
    }
  }
  auto cpu = make_cpu_backend(0);
  auto classic = make(false, CudaAttention::kClassic);
  std::vector<float> want_out, want_dq, out, dq;
  Call(*cpu, s).run(s, qkv, dy, &want_out, &want_dq);
  Call(*classic, s).run(s, qkv, dy, &out, &dq);
  size_t at = 0;
  EXPECT_LE(worst_ratio(out, want_out, 2e-6, 2e-6, &at), 1.0) << at;
  EXPECT_LE(worst_ratio(dq, want_dq, 5e-6 * std::sqrt(double(s.T)), 5e-6, &at), 1.0) << at;
}

}  // namespace
}  // namespace gpt2
