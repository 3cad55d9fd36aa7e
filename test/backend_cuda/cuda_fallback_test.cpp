// The CUDA backend when cuBLASLt refuses. The emulated cuBLASLt enforces the
// documented rules (emu/cublaslt.cpp: 16-byte alignment promises, 16-byte bias
// vectors of D's type) and, with GPT2_EMU_CUBLASLT=refuse|not_supported|bad_state,
// refuses every call in one of the ways cublasLt.h allows. Then every linear-layer
// GEMM must take its fallback (cuBLAS plus kernels) and still match the CPU
// backend; and the fallback must do the arithmetic of the cuBLASLt epilogue it
// replaces (fp32 product + bias, rounded once), which in emulation, where both
// paths share one GEMM core, means the same bits. A bias vector under 16-byte
// alignment, which would make a GPU kernel fault, must take the fallback too.
//
// The tests steer the emulator through the environment variable only (the
// backend reads nothing itself): the same sources link into the real-GPU test
// binary, where the variable means nothing and these tests rerun the cuBLASLt path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "test/backend/harness.h"

namespace gpt2 {
namespace {

// GPT2_EMU_CUBLASLT for a scope; a backend's cuBLASLt answers are cached per
// backend, so create backends inside the scope.
class ScopedLtMode {
 public:
  explicit ScopedLtMode(const char* mode) {
    if (const char* old = std::getenv(kVar)) previous_ = old;
    setenv(kVar, mode, 1);
  }
  ~ScopedLtMode() {
    if (previous_) setenv(kVar, previous_->c_str(), 1);
    else unsetenv(kVar);
  }
  ScopedLtMode(const ScopedLtMode&) = delete;
  ScopedLtMode& operator=(const ScopedLtMode&) = delete;

 private:
  static constexpr const char* kVar = "GPT2_EMU_CUBLASLT";
  std::optional<std::string> previous_;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::unique_ptr<Backend> cuda_backend(bool bf16) {
  CudaBackendOptions options;
  options.bf16 = bf16;
  return make_cuda_backend(0, options);
}

const char* const kMatmulOps[] = {"matmul_forward", "matmul_backward"};
// With the fused GELU entries, whose epilogue and fallback differ by design (GELU of
// the product before or after its rounding, and another GELU formula).
const char* const kLinearOps[] = {"matmul_forward", "matmul_backward", "matmul_gelu_forward", "matmul_gelu_backward"};

// Every matmul case of the op harness, cuBLASLt refusing everything: the
// fallbacks against the CPU backend and the fp64 truth, at the harness's fp32
// tolerances.
class CudaLtRefused : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaLtRefused, MatmulOpsMatchCpu) {
  ScopedLtMode mode(GetParam());
  auto cpu = make_cpu_backend(0);
  auto cuda = cuda_backend(false);
  for (const char* op : kLinearOps) {
    for (auto& c : optest::eval_cases(op, 20260611)) {
      const optest::CaseResult ref = optest::eval_case(*c, *cpu, nullptr);
      ASSERT_TRUE(ref.ok) << "cpu " << op << " " << c->params() << "\n" << ref.detail;
      const optest::CaseResult res = optest::eval_case(*c, *cuda, &ref);
      EXPECT_TRUE(res.ok) << op << " " << c->params() << " worst=" << res.worst << "\n" << res.detail;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryRefusal, CudaLtRefused, ::testing::Values("refuse", "not_supported", "bad_state",
                                                                               "matmul_not_supported"),
                         [](const auto& info) { return std::string(info.param); });

// Outputs of every matmul case with cuBLASLt strict (the epilogues where the
// operands are 16-byte aligned, the fallback elsewhere) and refusing (the
// fallback everywhere).
std::vector<std::vector<std::vector<float>>> matmul_outputs(const char* op, bool bf16, const char* mode) {
  ScopedLtMode scoped(mode);
  auto cuda = cuda_backend(bf16);
  std::vector<std::vector<std::vector<float>>> out;
  for (auto& c : optest::eval_cases(op, 20260611)) {
    const optest::CaseResult res = optest::eval_case(*c, *cuda, nullptr);
    EXPECT_EQ(res.outputs.size(), c->outputs.size()) << op << " " << c->params() << " " << mode << "\n" << res.detail;
    if (!bf16) {  // bf16 outputs miss the fp32 tolerances by design: bits only
      EXPECT_TRUE(res.ok) << op << " " << c->params() << " " << mode << "\n" << res.detail;
    }
    out.push_back(res.outputs);
  }
  return out;
}

// The fallback computes what the epilogue computes, to the bit: out and dinp/dw
// in fp32 and bf16; dbias in bf16 (the column-sum kernels on both paths). fp32
// dbias comes from BGRADB (a different summation order) where cuBLASLt accepts
// it, so it is held to the harness tolerance above instead.
TEST(CudaLtFallback, GivesTheBitsOfTheCublasLtPath) {
  for (bool bf16 : {false, true}) {
    for (const char* op : kMatmulOps) {
      const auto strict = matmul_outputs(op, bf16, "strict");
      const auto refused = matmul_outputs(op, bf16, "refuse");
      ASSERT_EQ(strict.size(), refused.size());
      for (size_t c = 0; c < strict.size(); c++) {
        ASSERT_EQ(strict[c].size(), refused[c].size());
        for (size_t o = 0; o < strict[c].size(); o++) {
          if (!bf16 && o == 2) continue;  // fp32 dbias
          EXPECT_TRUE(same_bits(strict[c][o], refused[c][o]))
              << op << (bf16 ? " bf16" : " fp32") << " case " << c << " output " << o;
        }
      }
    }
  }
}

// The fused fc layer (bf16, 16-byte aligned, ld % 8 == 0): with the GELU
// epilogues (the default) GELU runs in the GEMM on the unrounded product, so its
// output differs from the GELU kernel on the stored pre-GELU values in some
// elements (one rounding fewer); with CudaBackendOptions::cublaslt_gelu off (the
// path a cuBLASLt refusal takes too: CudaLtRefused) it is exactly matmul_forward
// + gelu_forward (and matmul_backward + gelu_backward). The switch is the
// backend's own, so this holds on a GPU as in the emulator. Accuracy is the bf16
// per-element test's.
struct GeluRun {
  std::vector<float> out, pre, unfused_out, dinp, unfused_dinp;
};
GeluRun gelu_run(bool epilogue) {
  const int N = 32, C = 64, OC = 256;
  optest::Rng rng(7);
  auto random = [&](size_t n, double scale) {
    std::vector<float> v(n);
    for (float& x : v) x = static_cast<float>(scale * rng.normal());
    return v;
  };
  CudaBackendOptions options;
  options.bf16 = true;
  options.cublaslt_gelu = epilogue;
  auto cuda = make_cuda_backend(0, options);
  auto tensor = [&](const std::vector<float>& host) {
    Tensor t = cuda->alloc(host.size(), BufferRole::kActivations);
    cuda->upload(t, host.data());
    return t;
  };
  Tensor inp = tensor(random(size_t(N) * C, 1.0)), w = tensor(random(size_t(OC) * C, 0.25)),
         bias = tensor(random(OC, 1.0)), dout = tensor(random(size_t(N) * C, 1.0));
  const std::vector<float> zeros(size_t(N) * OC);
  Tensor out = tensor(zeros), pre = tensor(zeros), unfused = tensor(zeros);
  Tensor dw = tensor(std::vector<float>(size_t(C) * OC));
  GeluRun r;
  auto get = [&](Tensor t) {
    std::vector<float> host(t.numel);
    cuda->download(host.data(), t);
    return host;
  };
  cuda->matmul_gelu_forward({.out = out, .pre = pre, .inp = inp, .w = w, .bias = bias, .N = N, .C = C, .OC = OC});
  cuda->gelu_forward({.out = unfused, .inp = pre, .n = size_t(N) * OC});
  r.out = get(out), r.pre = get(pre), r.unfused_out = get(unfused);
  // fcproj's backward: [N,OC] GELU input pre, weight [C,OC], dinp [N,OC]
  cuda->matmul_gelu_backward({.dinp = out, .dw = dw, .dout = dout, .inp = unfused, .w = w, .gelu_inp = pre, .N = N,
                              .C = OC, .OC = C});
  r.dinp = get(out);
  cuda->matmul_backward({.dinp = out, .dw = dw, .dout = dout, .inp = unfused, .w = w, .N = N, .C = OC, .OC = C});
  cuda->gelu_backward({.dinp = out, .inp = pre, .dout = out, .n = size_t(N) * OC});
  r.unfused_dinp = get(out);
  for (Tensor t : {inp, w, bias, dout, out, pre, unfused, dw}) cuda->free(t);
  return r;
}

TEST(CudaLtFallback, GeluEpilogueRunsInTheGemm) {
  auto differing = [](const std::vector<float>& a, const std::vector<float>& b) {
    size_t n = 0;
    for (size_t i = 0; i < a.size(); i++) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return n;
  };
  const GeluRun strict = gelu_run(true), refused = gelu_run(false);
  // pre-GELU values: one rounding of the same product on both paths (the same bits
  // in emulation; on a GPU the two GEMM kernels may round it differently)
  size_t far = 0;
  for (size_t i = 0; i < strict.pre.size(); i++)
    far += !(std::fabs(strict.pre[i] - refused.pre[i]) <= std::ldexp(std::fabs(strict.pre[i]), -7) + 1e-30);
  EXPECT_EQ(far, 0u) << "pre-GELU values more than a bf16 rounding apart";
  EXPECT_GT(differing(strict.out, strict.unfused_out), 0u) << "the GELU epilogue did not run";
  EXPECT_GT(differing(strict.dinp, strict.unfused_dinp), 0u) << "the DGELU epilogue did not run";
  EXPECT_TRUE(same_bits(refused.out, refused.unfused_out)) << "GELU kernels: not matmul_forward + gelu_forward";
  EXPECT_TRUE(same_bits(refused.dinp, refused.unfused_dinp)) << "GELU kernels: not matmul_backward + gelu_backward";
  std::printf("bf16 GELU epilogue vs kernels on the stored pre: %zu of %zu outputs, %zu of %zu dinp differ\n",
              differing(strict.out, strict.unfused_out), strict.out.size(),
              differing(strict.dinp, strict.unfused_dinp), strict.dinp.size());
}

// A bias vector 8 bytes past an aligned address (a slice of a larger buffer):
// cuBLASLt's heuristic would accept it and the GPU kernel fault, so the backend
// must not hand it to cuBLASLt. Both biases give inp w^T + bias (fp64 reference
// on the stored values; within one bf16 rounding, or fp32 dot-product error);
// in emulation also the same bits, but on a GPU the two paths' GEMM kernels may
// round differently.
TEST(CudaLtFallback, MisalignedBiasTakesTheFallback) {
  const int N = 16, C = 32, OC = 64;
  optest::Rng rng(5);
  auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = static_cast<float>(rng.normal());
    return v;
  };
  std::vector<float> inp = random(size_t(N) * C), w = random(size_t(OC) * C), bias = random(OC);
  for (bool bf16 : {false, true}) {
    auto cuda = cuda_backend(bf16);
    const uint32_t elem = bf16 ? 2 : 4;
    Tensor t_inp = cuda->alloc(inp.size(), BufferRole::kActivations);
    Tensor t_w = cuda->alloc(w.size(), BufferRole::kParams);
    Tensor t_out = cuda->alloc(size_t(N) * OC, BufferRole::kActivations);
    Tensor bias_buffer = cuda->alloc(OC + 16, BufferRole::kParams);
    cuda->upload(t_inp, inp.data());
    cuda->upload(t_w, w.data());
    cuda->download(inp.data(), t_inp);  // the stored (bf16-rounded) values
    cuda->download(w.data(), t_w);
    for (size_t offset_bytes : {size_t{0}, size_t{8}}) {
      const Tensor t_bias = bias_buffer.slice(offset_bytes / elem, OC);
      cuda->upload(t_bias, bias.data());
      std::vector<float> stored_bias(OC), out(size_t(N) * OC);
      cuda->download(stored_bias.data(), t_bias);
      cuda->matmul_forward({.out = t_out, .inp = t_inp, .w = t_w, .bias = t_bias, .N = N, .C = C, .OC = OC});
      cuda->download(out.data(), t_out);
      for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
          double ref = stored_bias[o], mag = std::fabs(ref);
          for (int c = 0; c < C; c++) {
            const double t = double(inp[size_t(n) * C + c]) * w[size_t(o) * C + c];
            ref += t, mag += std::fabs(t);
          }
          // C products + bias in any order: gamma(C+1) of mag; bf16 adds one rounding of
          // the fp32 result (half an ulp, 2^-9, doubled for ties at a boundary).
          const double tol = (bf16 ? std::ldexp(std::fabs(ref), -8) : 0.0) + (C + 1) * 0x1p-24 * mag;
          ASSERT_NEAR(out[size_t(n) * OC + o], ref, tol)
              << (bf16 ? "bf16" : "fp32") << " bias offset " << offset_bytes << " at " << n << "," << o;
        }
    }
    for (Tensor t : {t_inp, t_w, t_out, bias_buffer}) cuda->free(t);
  }
}

}  // namespace
}  // namespace gpt2
