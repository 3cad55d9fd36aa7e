// The 128-bit packed kernels (backend/cuda/pack128.cuh: P elements per access) and the
// cached cuBLASLt plans (backend/cuda/matmul.cuh).
//  * Elementwise ops (gelu fwd/bwd, residual, scale, AdamW, encoder forward) on
//    16-byte-aligned views of a size that is a multiple of the pack take the packed
//    kernel; the same data in views one element off take the scalar one. Both
//    compute the same per-element formula, so the outputs must be the same bits,
//    fp32 and bf16. (The harness's cases run the packed paths too: its views sit
//    16 elements into their buffers.)
//  * The fused residual + layernorm forward gives the two ops' bits.
//  * Layernorm: packed vs scalar differ only in the order of fp32 partial sums:
//    both within the harness's tolerances of the CPU backend, and a C above the
//    shared-memory limit of the single-pass backward (accumulators in scratch).
//  * cuBLASLt: a second call of the same problem creates no descriptor and asks
//    the heuristic nothing (emulator counters), and a new bias pointer is used.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <cstdlib>
#include <string>
#include <vector>

#include "emu/control.h"
#include "backend/cuda/cuda_backend.h"
#include "test/backend_cuda/random_data.h"

// emu/cublaslt.cpp's test-only counters; weak, so that the GPU build (real
// cuBLASLt, no counters) links and the test skips there.
namespace gpt2 {
namespace emu {
struct CublasLtCounts {
  uint64_t heuristic, matmul_descs, layouts, preferences, matmuls;
};
__attribute__((weak)) CublasLtCounts cublaslt_counts();
}  // namespace emu
}  // namespace gpt2

namespace gpt2 {
namespace {

// Device arrays of one backend; `offset` elements into their allocation
// (1: misaligned for 128-bit access, which forces the scalar kernels).
class Arrays {
 public:
  Arrays(Backend& be, size_t offset) : be_(be), offset_(offset) {}
  ~Arrays() {
    for (auto& t : owned_) be_.free(t);
  }
  Tensor add(const std::vector<float>& host, BufferRole role = BufferRole::kActivations) {
    Tensor full = be_.alloc(host.size() + offset_, role);
    owned_.push_back(full);
    Tensor view = full.slice(offset_, host.size());
    be_.upload(view, host.data());
    return view;
  }
  Backend& be() { return be_; }
  std::vector<float> get(Tensor t) {
    std::vector<float> v(t.numel);
    be_.download(v.data(), t);
    return v;
  }

 private:
  Backend& be_;
  size_t offset_;
  std::vector<Tensor> owned_;
};

std::vector<float> abs_of(std::vector<float> v) {
  for (auto& x : v) x = std::fabs(x);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::unique_ptr<Backend> cuda(bool bf16) {
  CudaBackendOptions options;
  options.bf16 = bf16;
  return make_cuda_backend(0, options);
}

// op(arrays) returns the outputs; run aligned (packed) and one element off (scalar).
using Op = std::function<std::vector<Tensor>(Arrays&)>;
void expect_packed_equals_scalar(const std::string& name, const Op& op) {
  for (bool bf16 : {false, true}) {
    auto be = cuda(bf16);
    std::vector<std::vector<float>> results[2];
    for (size_t offset : {0, 1}) {
      Arrays arrays(*be, offset);
      for (Tensor t : op(arrays)) results[offset].push_back(arrays.get(t));
    }
    ASSERT_EQ(results[0].size(), results[1].size());
    for (size_t o = 0; o < results[0].size(); o++)
      EXPECT_TRUE(same_bits(results[0][o], results[1][o]))
          << name << (bf16 ? " bf16" : " fp32") << ": output " << o << " differs";
  }
}

constexpr size_t kN = 8 * 131;  // a multiple of both packs (4 floats, 8 bf16)

TEST(CudaPacked, ElementwiseKernelsGiveTheScalarBits) {
  const auto x = randn(kN, 1, 3.0f), y = randn(kN, 2), z = randn(kN, 3, 0.01f);
  expect_packed_equals_scalar("gelu_forward", [&](Arrays& a) {
    Tensor out = a.add(y), in = a.add(x);
    a.be().gelu_forward({.out = out, .inp = in, .n = kN});
    return std::vector<Tensor>{out};
  });
  expect_packed_equals_scalar("gelu_backward", [&](Arrays& a) {
    Tensor dinp = a.add(z), in = a.add(x), dout = a.add(y);
    a.be().gelu_backward({.dinp = dinp, .inp = in, .dout = dout, .n = kN});
    a.be().gelu_backward({.dinp = dout, .inp = in, .dout = dout, .n = kN});  // in place
    return std::vector<Tensor>{dinp, dout};
  });
  expect_packed_equals_scalar("residual_forward", [&](Arrays& a) {
    Tensor out = a.add(z), p = a.add(x), q = a.add(y);
    a.be().residual_forward({.out = out, .a = p, .b = q, .n = kN});
    a.be().residual_forward({.out = p, .a = p, .b = q, .n = kN});  // in place
    return std::vector<Tensor>{out, p, q};
  });
  expect_packed_equals_scalar("adamw_update", [&](Arrays& a) {
    Tensor p = a.add(x, BufferRole::kParams), g = a.add(y, BufferRole::kGrads);
    Tensor m = a.add(z, BufferRole::kOptimizer), v = a.add(abs_of(randn(kN, 4, 0.1f)), BufferRole::kOptimizer);
    Tensor master = a.add(x, BufferRole::kOptimizer);
    a.be().adamw_update({.params = p, .grads = g, .m = m, .v = v, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f,
                         .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 0.5f, .t = 3});
    a.be().adamw_update({.params = p, .master = master, .grads = g, .m = m, .v = v, .lr = 1e-3f, .beta1 = 0.9f,
                         .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 0.5f, .t = 4});
    return std::vector<Tensor>{p, m, v, master};
  });
  const int B = 2, T = 5, C = 48, V = 11;
  expect_packed_equals_scalar("encoder_forward", [&](Arrays& a) {
    Tensor out = a.add(randn(size_t(B) * T * C, 5), BufferRole::kActivations);
    Tensor wte = a.add(randn(size_t(V) * C, 6), BufferRole::kParams);
    Tensor wpe = a.add(randn(size_t(T) * C, 7), BufferRole::kParams);
    const std::vector<int32_t> ids = {0, 3, 10, 3, 7, 1, 2, 10, 0, 5};
    Tensor tokens = a.be().alloc(ids.size(), BufferRole::kTokens);
    a.be().upload_tokens(tokens, ids.data());
    a.be().encoder_forward({.out = out, .tokens = tokens, .wte = wte, .wpe = wpe, .B = B, .T = T, .C = C});
    a.be().synchronize();
    a.be().free(tokens);
    return std::vector<Tensor>{out};
  });
}

// Layernorm on `be` (fp32) with views `offset` elements off; outputs downloaded.
std::vector<std::vector<float>> layernorm_run(Backend& be, size_t offset, int N, int C) {
  Arrays a(be, offset);
  Tensor inp = a.add(randn(size_t(N) * C, 11, 2.0f)), w = a.add(randn(C, 12)), b = a.add(randn(C, 13));
  Tensor out = a.add(std::vector<float>(size_t(N) * C)), mean = a.add(std::vector<float>(N), BufferRole::kStats);
  Tensor rstd = a.add(std::vector<float>(N), BufferRole::kStats);
  be.layernorm_forward({.out = out, .mean = mean, .rstd = rstd, .inp = inp, .w = w, .b = b, .N = N, .C = C});
  Tensor dinp = a.add(randn(size_t(N) * C, 14)), dw = a.add(randn(C, 15)), db = a.add(randn(C, 16));
  Tensor dout = a.add(randn(size_t(N) * C, 17));
  be.layernorm_backward({.dinp = dinp, .dw = dw, .db = db, .dout = dout, .inp = inp, .w = w, .mean = mean, .rstd = rstd,
                         .N = N, .C = C});
  return {a.get(out), a.get(mean), a.get(rstd), a.get(dinp), a.get(dw), a.get(db)};
}

// The harness's layernorm tolerances (test/backend/cases.cpp), here against the
// CPU backend: out 2e-6, dinp 5e-6, dw/db 2e-7 N + 1e-6 (abs and rel, doubled).
void expect_layernorm_close(const std::vector<std::vector<float>>& got,
                            const std::vector<std::vector<float>>& cpu, int N, const std::string& what) {
  const double tol[6] = {2e-6, 2e-6, 2e-6, 5e-6, 2e-7 * N + 1e-6, 2e-7 * N + 1e-6};
  for (size_t o = 0; o < 6; o++) {
    int bad = 0;
    for (size_t i = 0; i < cpu[o].size(); i++) {
      const double ref = cpu[o][i], d = std::fabs(double(got[o][i]) - ref);
      if (!(d <= 2 * tol[o] * (1 + std::fabs(ref)))) bad++;
    }
    EXPECT_EQ(bad, 0) << what << ": output " << o;
  }
}

TEST(CudaPacked, LayernormPackedScalarAndLargeC) {
  auto cpu = make_cpu_backend(0);
  auto be = cuda(false);
  struct Shape { int N, C; };
  // 768: packed (aligned) and scalar (offset 1); 5200: above the single-pass
  // backward's shared-memory limit, accumulators in scratch; 1100 rows: 34 blocks.
  for (Shape s : {Shape{40, 768}, Shape{3, 5200}, Shape{1100, 24}}) {
    const auto ref = layernorm_run(*cpu, 0, s.N, s.C);
    for (size_t offset : {0, 1}) {
      std::vector<std::vector<float>> first;
      for (emu::RunOrder order : {emu::RunOrder::kForward, emu::RunOrder::kRandom}) {
        emu::ScopedRunOrder scoped(order, 3);
        const auto got = layernorm_run(*be, offset, s.N, s.C);
        const std::string what = "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) +
                                 " offset=" + std::to_string(offset);
        expect_layernorm_close(got, ref, s.N, what);
        if (first.empty()) first = got;
        for (size_t o = 0; o < got.size(); o++)
          EXPECT_TRUE(same_bits(first[o], got[o])) << what << ": output " << o << " depends on the run order";
      }
    }
  }
}

// residual_layernorm_forward is residual_forward + layernorm_forward to the bit,
// fp32 and bf16, packed (aligned) and scalar (one element off), also with the sum
// written over `a`.
TEST(CudaPacked, ResidualLayernormGivesTheTwoOpsBits) {
  const int N = 21, C = 768;
  const size_t n = size_t(N) * C;
  for (bool bf16 : {false, true}) {
    auto be = cuda(bf16);
    for (size_t offset : {0, 1}) {
      for (bool in_place : {false, true}) {
        Arrays x(*be, offset);
        const std::vector<float> a_host = randn(n, 31, 2.0f), b_host = randn(n, 32);
        Tensor a = x.add(a_host), b = x.add(b_host), w = x.add(randn(C, 33)), bias = x.add(randn(C, 34));
        Tensor sum = in_place ? a : x.add(std::vector<float>(n)), out = x.add(std::vector<float>(n));
        const std::vector<float> rows(N);
        Tensor mean = x.add(rows, BufferRole::kStats), rstd = x.add(rows, BufferRole::kStats);
        be->residual_layernorm_forward({.residual = sum, .out = out, .mean = mean, .rstd = rstd, .a = a, .b = b, .w = w,
                                        .bias = bias, .N = N, .C = C});
        const std::vector<std::vector<float>> fused = {x.get(sum), x.get(out), x.get(mean), x.get(rstd)};
        Tensor a2 = x.add(a_host), sum2 = x.add(std::vector<float>(n)), out2 = x.add(std::vector<float>(n));
        Tensor mean2 = x.add(rows, BufferRole::kStats), rstd2 = x.add(rows, BufferRole::kStats);
        be->residual_forward({.out = sum2, .a = a2, .b = b, .n = n});
        be->layernorm_forward({.out = out2, .mean = mean2, .rstd = rstd2, .inp = sum2, .w = w, .b = bias, .N = N,
                               .C = C});
        const std::vector<std::vector<float>> two = {x.get(sum2), x.get(out2), x.get(mean2), x.get(rstd2)};
        for (size_t o = 0; o < fused.size(); o++)
          EXPECT_TRUE(same_bits(fused[o], two[o])) << (bf16 ? "bf16" : "fp32") << " offset " << offset
                                                    << (in_place ? " in place" : "") << ": output " << o;
      }
    }
  }
}

// ---- cuBLASLt plan cache ----
TEST(CudaLtCache, SecondCallReusesDescriptorsAndHeuristic) {
  if (emu::cublaslt_counts == nullptr) GTEST_SKIP() << "no emulator counters (real cuBLASLt)";
  for (bool bf16 : {false, true}) {
    auto be = cuda(bf16);
    auto cpu = make_cpu_backend(0);
    const int N = 16, C = 32, OC = 48;
    const auto x = randn(size_t(N) * C, 21), w = randn(size_t(OC) * C, 22), b1 = randn(OC, 23), b2 = randn(OC, 24);
    Arrays a(*be, 0), h(*cpu, 0);
    Tensor inp = a.add(x), wt = a.add(w, BufferRole::kParams), bias1 = a.add(b1, BufferRole::kParams);
    Tensor bias2 = a.add(b2, BufferRole::kParams), out = a.add(std::vector<float>(size_t(N) * OC));
    const uint64_t matmuls0 = emu::cublaslt_counts().matmuls;
    be->matmul_forward({.out = out, .inp = inp, .w = wt, .bias = bias1, .N = N, .C = C, .OC = OC});  // builds the plan
    const emu::CublasLtCounts before = emu::cublaslt_counts();
    if (before.matmuls == matmuls0) GTEST_SKIP() << "cuBLASLt refuses (GPT2_EMU_CUBLASLT)";
    be->matmul_forward({.out = out, .inp = inp, .w = wt, .bias = bias2, .N = N, .C = C,
                        .OC = OC});  // same problem, another bias
    const emu::CublasLtCounts after = emu::cublaslt_counts();
    EXPECT_EQ(after.heuristic, before.heuristic);
    EXPECT_EQ(after.matmul_descs, before.matmul_descs);
    EXPECT_EQ(after.layouts, before.layouts);
    EXPECT_EQ(after.preferences, before.preferences);
    EXPECT_EQ(after.matmuls, before.matmuls + 1);  // it did run on cuBLASLt
    // ... with the second bias: compare with the CPU backend (bf16: inputs rounded alike)
    const std::vector<float> xs = a.get(inp), ws = a.get(wt), bs = a.get(bias2);
    Tensor hin = h.add(xs), hw = h.add(ws), hb = h.add(bs);
    Tensor hout = h.add(std::vector<float>(size_t(N) * OC));
    cpu->matmul_forward({.out = hout, .inp = hin, .w = hw, .bias = hb, .N = N, .C = C, .OC = OC});
    const auto got = a.get(out), ref = h.get(hout);
    // Each side is within gamma(C+1) = (C+1) 2^-24 of sum |terms| of the truth, in any
    // summation order (the CPU's is OpenBLAS's per-CPU kernel), so 2 gamma apart; bf16
    // rounds the device's fp32 result once more (<= 2^-9 relative, doubled for ties).
    for (int n = 0; n < N; n++)
      for (int o = 0; o < OC; o++) {
        double mag = std::fabs(bs[o]);
        for (int c = 0; c < C; c++) mag += std::fabs(double(xs[size_t(n) * C + c]) * ws[size_t(o) * C + c]);
        const size_t i = size_t(n) * OC + o;
        ASSERT_NEAR(got[i], ref[i], (bf16 ? std::ldexp(std::fabs(ref[i]), -8) : 0.0) + 2 * (C + 1) * 0x1p-24 * mag)
            << i;
      }
    // A new shape asks the heuristic once more.
    be->matmul_forward({.out = out.slice(0, size_t(N / 2) * OC), .inp = inp.slice(0, size_t(N / 2) * C), .w = wt,
                        .bias = bias1, .N = N / 2, .C = C, .OC = OC});
    EXPECT_EQ(emu::cublaslt_counts().heuristic, after.heuristic + 1);
  }
}

// Sets an environment variable for a scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) previous_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_, previous_.c_str(), 1);
    else unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string previous_;
  bool had_ = false;
};

// A bias 16 bytes past a 256-byte boundary (enough for the kernel, less than the
// heuristic assumes for a pointer it has not seen): the backend sets the bias
// pointer before the heuristic, so cublasLtMatmul runs the BIAS epilogue on every
// call. And when cublasLtMatmul itself refuses (NOT_SUPPORTED at execution), the
// call falls back to cuBLAS + kernels with the same result, and the plan is not
// tried again.
TEST(CudaLtCache, BiasAlignmentIsSeenByTheHeuristicAndMatmulRefusalFallsBack) {
  if (emu::cublaslt_counts == nullptr) GTEST_SKIP() << "no emulator counters (real cuBLASLt)";
  for (bool bf16 : {false, true}) {
    const int N = 16, C = 32, OC = 48;
    const auto x = randn(size_t(N) * C, 31), w = randn(size_t(OC) * C, 32), b = randn(OC, 33);
    std::vector<std::vector<float>> results;
    for (const char* mode : {"strict", "matmul_not_supported"}) {
      ScopedEnv scoped("GPT2_EMU_CUBLASLT", mode);  // the emulator's switch; the GPU build links no emulator
      auto be = cuda(bf16);
      Arrays a(*be, 0), shifted(*be, 16 / (bf16 ? 2 : 4));
      Tensor inp = a.add(x), wt = a.add(w, BufferRole::kParams), out = a.add(std::vector<float>(size_t(N) * OC));
      Tensor bias = shifted.add(b, BufferRole::kParams);
      ASSERT_EQ(reinterpret_cast<uintptr_t>(bias.ptr) % 32, 16u);
      const uint64_t before = emu::cublaslt_counts().matmuls;
      be->matmul_forward({.out = out, .inp = inp, .w = wt, .bias = bias, .N = N, .C = C, .OC = OC});
      be->matmul_forward({.out = out, .inp = inp, .w = wt, .bias = bias, .N = N, .C = C, .OC = OC});
      const uint64_t calls = emu::cublaslt_counts().matmuls - before;
      if (std::string(mode) == "strict") EXPECT_EQ(calls, 2u) << "the BIAS epilogue ran both times";
      else EXPECT_EQ(calls, 1u) << "refused once, then the fallback without asking again";
      results.push_back(a.get(out));
    }
    // The fallback is the BIAS epilogue's arithmetic (bias first, the GEMM adds with beta 1): the same bits here.
    EXPECT_EQ(results[0], results[1]) << (bf16 ? "bf16" : "fp32");
  }
}

}  // namespace
}  // namespace gpt2
