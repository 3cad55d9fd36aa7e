// The CUDA backend's ops, executed by the emulator, against the CPU backend
// and the fp64 references of the op harness (test/backend/harness.h, linked,
// not copied): for every op and every case of eval_cases() (odd sizes, C not a
// multiple of 4/8/32, T = 1, V < Vp, several heads, NaN/Inf inputs) the CUDA
// backend runs under each emulator run order, with guard canaries around every
// buffer, NaN poison in "=" outputs, and a bit-for-bit check that inputs are
// unchanged. Tolerances are the harness's per-op ones (fp32 vs the fp64 truth;
// twice that vs the CPU backend's output), documented in docs/kernels.md.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "emu/control.h"
#include "backend/cuda/cuda_backend.h"
#include "test/backend/harness.h"

namespace gpt2 {
namespace {

using emu::RunOrder;
using optest::CaseResult;

const char* order_name(RunOrder o) {
  return o == RunOrder::kForward ? "forward" : o == RunOrder::kReverse ? "reverse" : "random";
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs every case of `op` on the CPU backend and on `cuda` under the three run
// orders. Unless the op uses atomics, the three CUDA results must be the same
// bits: a result that depends on the order is a race.
void check_op(const std::string& op, Backend& cuda, bool deterministic) {
  auto cpu = make_cpu_backend(0);
  auto cases = optest::eval_cases(op, 20260522);
  ASSERT_FALSE(cases.empty()) << op;
  for (auto& c : cases) {
    const CaseResult ref = optest::eval_case(*c, *cpu, nullptr);
    ASSERT_TRUE(ref.ok) << "cpu " << op << " " << c->params() << "\n" << ref.detail;
    std::vector<std::vector<float>> first;
    for (RunOrder order : {RunOrder::kForward, RunOrder::kReverse, RunOrder::kRandom}) {
      emu::ScopedRunOrder scoped(order, 7);
      const CaseResult res = optest::eval_case(*c, cuda, &ref);
      EXPECT_TRUE(res.ok) << "cuda " << op << " " << c->params() << " order=" << order_name(order)
                          << " worst=" << res.worst << "\n" << res.detail;
      if (first.empty()) {
        first = res.outputs;
      } else if (deterministic) {
        ASSERT_EQ(first.size(), res.outputs.size());
        for (size_t o = 0; o < first.size(); o++)
          EXPECT_TRUE(same_bits(first[o], res.outputs[o]))
              << op << " " << c->params() << ": output " << o << " differs under run order "
              << order_name(order);
      }
    }
  }
}

class CudaOps : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaOps, MatchesCpuAndFp64ReferenceUnderEveryRunOrder) {
  auto cuda = make_cuda_backend(0);
  // The embedding scatters add with fp32 atomics: their order follows the run order.
  const bool atomics = GetParam() == "encoder_backward" || GetParam() == "tied_embedding_backward_rows";
  check_op(GetParam(), *cuda, !atomics);
}

INSTANTIATE_TEST_SUITE_P(AllOps, CudaOps, ::testing::ValuesIn(optest::eval_op_names()),
                         [](const auto& info) { return info.param; });

// The plain cuBLAS path of the linear layers (bias and bias gradient by kernels).
TEST(CudaMatmul, CublasFallbackMatchesCpu) {
  CudaBackendOptions options;
  options.use_cublaslt = false;
  auto cuda = make_cuda_backend(0, options);
  check_op("matmul_forward", *cuda, true);
  check_op("matmul_backward", *cuda, true);
}

// cuBLASLt GEMMs with the bias gradient from the column-sum kernels (the path
// taken when a GPU's cuBLASLt has no BGRADB algorithm).
TEST(CudaMatmul, CublasLtWithKernelBiasGradMatchesCpu) {
  CudaBackendOptions options;
  options.cublaslt_bias_grad = false;
  auto cuda = make_cuda_backend(0, options);
  check_op("matmul_backward", *cuda, true);
}

std::vector<float> random_vector(size_t n, uint64_t seed) {
  optest::Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal());
  return v;
}

// sum_squares returns a host double: compared with the CPU backend's fp64 sum
// and with a long-double sum, and it must be the same bits for every run order.
TEST(CudaSumSquares, MatchesCpuAndIsDeterministic) {
  auto cpu = make_cpu_backend(0);
  auto cuda = make_cuda_backend(0);
  for (size_t n : {size_t{1}, size_t{1000}, size_t{65537}, (size_t{1} << 20) + 3}) {
    const std::vector<float> host = random_vector(n, n);
    long double exact = 0;
    for (float x : host) exact += static_cast<long double>(x) * x;
    Tensor tc = cpu->alloc(n, BufferRole::kGrads), tg = cuda->alloc(n, BufferRole::kGrads);
    cpu->upload(tc, host.data());
    cuda->upload(tg, host.data());
    const double want = cpu->sum_squares(tc);
    std::vector<double> got;
    for (RunOrder order : {RunOrder::kForward, RunOrder::kReverse, RunOrder::kRandom}) {
      emu::ScopedRunOrder scoped(order, 3);
      got.push_back(cuda->sum_squares(tg));
    }
    // fp64 accumulation of n positive terms (squares of floats are exact in fp64), any
    // order: relative error <= gamma(n) = n 2^-53 = 1.1e-16 n, inside 1e-15 n.
    const double tol = 1e-15 * static_cast<double>(n) * static_cast<double>(exact) + 1e-300;
    EXPECT_NEAR(got[0], static_cast<double>(exact), tol) << "n=" << n;
    EXPECT_NEAR(got[0], want, 2 * tol) << "n=" << n;
    EXPECT_EQ(got[0], got[1]) << "n=" << n;
    EXPECT_EQ(got[0], got[2]) << "n=" << n;
    cpu->free(tc);
    cuda->free(tg);
  }
  Tensor empty;
  EXPECT_EQ(cuda->sum_squares(empty), 0.0);
}

// AdamW with an fp32 master copy: the master gets the update and the params
// receive the same value (the bf16 path will round it).
TEST(CudaAdamW, MasterCopyGetsTheUpdate) {
  auto cpu = make_cpu_backend(0);
  auto cuda = make_cuda_backend(0);
  const size_t n = 777;
  const std::vector<float> p = random_vector(n, 1), g = random_vector(n, 2);
  std::vector<float> zeros(n, 0.0f);
  auto run = [&](Backend& be, bool with_master) {
    Tensor tp = be.alloc(n, BufferRole::kParams), tg = be.alloc(n, BufferRole::kGrads);
    Tensor tm = be.alloc(n, BufferRole::kOptimizer), tv = be.alloc(n, BufferRole::kOptimizer);
    Tensor master = with_master ? be.alloc(n, BufferRole::kOptimizer) : Tensor{};
    be.upload(tp, with_master ? zeros.data() : p.data());  // params are overwritten from master
    if (with_master) be.upload(master, p.data());
    be.upload(tg, g.data());
    be.upload(tm, zeros.data());
    be.upload(tv, zeros.data());
    for (int t = 1; t <= 3; t++) be.adamw_update({.params = tp, .master = master, .grads = tg, .m = tm, .v = tv,
                                                  .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                                  .weight_decay = 0.1f, .grad_scale = 0.5f, .t = t});
    std::vector<float> out(n), out_master(n);
    be.download(out.data(), tp);
    if (with_master) be.download(out_master.data(), master);
    for (Tensor t : {tp, tg, tm, tv, master}) be.free(t);
    return std::make_pair(out, out_master);
  };
  const auto want = run(*cpu, false).first;
  const auto got = run(*cuda, true);
  for (size_t i = 0; i < n; i++) {
    // The same expressions with the same roundings on both backends (the kernel
    // rounds every product and sum on its own): the same bits.
    EXPECT_EQ(got.first[i], want[i]) << i;
    EXPECT_EQ(got.first[i], got.second[i]) << i;
  }
}

// Documented behaviour for ids the caller failed to exclude: NaN, never an
// out-of-bounds access (the ASan build of this test checks the latter).
TEST(CudaEncoder, OutOfRangeTokenGivesNaNRow) {
  auto cuda = make_cuda_backend(0);
  const int B = 1, T = 3, C = 5, V = 4;
  Tensor out = cuda->alloc(B * T * C, BufferRole::kActivations);
  Tensor tok = cuda->alloc(B * T, BufferRole::kTokens);
  Tensor wte = cuda->alloc(V * C, BufferRole::kParams), wpe = cuda->alloc(T * C, BufferRole::kParams);
  const std::vector<float> w = random_vector(V * C, 5), p = random_vector(T * C, 6);
  cuda->upload(wte, w.data());
  cuda->upload(wpe, p.data());
  const int32_t ids[3] = {2, V, -1};
  cuda->upload_tokens(tok, ids);
  cuda->encoder_forward({.out = out, .tokens = tok, .wte = wte, .wpe = wpe, .B = B, .T = T, .C = C});
  std::vector<float> host(B * T * C);
  cuda->download(host.data(), out);
  for (int c = 0; c < C; c++) {
    EXPECT_EQ(host[c], w[2 * C + c] + p[c]);
    EXPECT_TRUE(std::isnan(host[C + c]));
    EXPECT_TRUE(std::isnan(host[2 * C + c]));
  }
  for (Tensor t : {out, tok, wte, wpe}) cuda->free(t);
}

TEST(CudaBackend, RejectsBadArguments) {
  EXPECT_THROW(make_cuda_backend(99), std::runtime_error);
  EXPECT_THROW(make_cuda_backend(-1), std::runtime_error);
  auto cuda = make_cuda_backend(0);
  EXPECT_EQ(cuda->name(), "cuda");
  EXPECT_FALSE(cuda->is_host_memory());
  Tensor small = cuda->alloc(10, BufferRole::kActivations);
  Tensor big = cuda->alloc(100, BufferRole::kActivations);
  EXPECT_THROW(cuda->layernorm_forward({.out = small, .mean = small, .rstd = small, .inp = big, .w = big, .b = big,
                                        .N = 4, .C = 5}), std::runtime_error);
  EXPECT_THROW(cuda->matmul_forward({.out = big, .inp = big, .w = big, .N = 0, .C = 5, .OC = 5}), std::runtime_error);
  EXPECT_THROW(cuda->attention_forward({.out = big, .saved = big, .qkv = big, .B = 1, .T = 2, .C = 5, .NH = 2,
                                        .drop = DropoutMask{}}), std::runtime_error);  // C % NH
  EXPECT_THROW(cuda->classifier_forward_backward({.logits = big, .losses = big, .targets = big, .N = 2, .V = 9, .Vp = 8,
                                                  .dloss = 1.0f}), std::runtime_error);
  EXPECT_THROW(cuda->adamw_update({.params = big, .grads = big, .m = big, .v = big, .lr = 1, .beta1 = 0.9f,
                                   .beta2 = 0.9f, .eps = 1e-8f, .weight_decay = 0, .grad_scale = 1, .t = 0}),
               std::runtime_error);
  EXPECT_THROW(cuda->gelu_forward({.out = big, .inp = Tensor{}, .n = 5}), std::runtime_error);     // empty input
  EXPECT_THROW(cuda->alloc(SIZE_MAX / 2, BufferRole::kScratch), std::runtime_error);  // overflow
  EXPECT_THROW(cuda->alloc(size_t{1} << 40, BufferRole::kScratch), std::runtime_error);  // 4 TiB
  Tensor wrong = big;
  wrong.elem_bytes = 2;
  EXPECT_THROW(cuda->gelu_forward({.out = big, .inp = wrong, .n = 10}), std::runtime_error);
  cuda->free(small);
  cuda->free(big);
}

}  // namespace
}  // namespace gpt2
