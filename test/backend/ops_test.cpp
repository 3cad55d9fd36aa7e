// Eval mode of the op harness (one test per op: every case on every backend
// under test), exact sum_squares, memory ops, error handling and vexp accuracy.
// The backends under test are today one backend, the CPU one, at its default
// thread count and at one thread: comparing the two is a thread-count
// consistency check, and the tests are named for that. The comparison of two
// different backends (CUDA, executed by the emulator, against CPU) is
// test/backend_cuda/cuda_ops_test.cpp.
// `backend_ops_test --perf [OP] [--elements N] [--seconds S]` runs the perf
// mode (ops whose name contains OP, default all; AdamW and sum_squares over N
// elements; at least S seconds of timed runs per case) instead of the tests.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cpu/vmath.h"
#include "test/backend/harness.h"

namespace gpt2 {
namespace {

using optest::BackendUnderTest;
using optest::CaseResult;
using optest::Rng;

class OpEval : public ::testing::TestWithParam<std::string> {};

// Every case against its fp64 reference at the default thread count and at
// one thread, and the one-thread outputs against the default-thread ones.
TEST_P(OpEval, MatchesReferenceAtDefaultAndOneThread) {
  const std::string op = GetParam();
  const auto backends = optest::backends_under_test();
  // Same seed for every backend: identical inputs.
  const auto cases = optest::eval_cases(op, 42);
  ASSERT_FALSE(cases.empty()) << "no cases for " << op;
  for (const auto& c : cases) {
    CaseResult first;
    for (size_t bi = 0; bi < backends.size(); bi++) {
      auto be = backends[bi].make();
      CaseResult r = optest::eval_case(*c, *be, bi == 0 ? nullptr : &first);
      std::printf("  %s(%s) [%s]: %s, worst error %.3g of tolerance\n", c->op().c_str(),
                  c->params().c_str(), backends[bi].name.c_str(), r.ok ? "OK" : "FAIL", r.worst);
      EXPECT_TRUE(r.ok) << c->op() << "(" << c->params() << ") on " << backends[bi].name << ":\n"
                        << r.detail;
      if (bi == 0) first = std::move(r);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, OpEval, ::testing::ValuesIn(optest::eval_op_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// Every op except the GEMMs is written so that its result does not depend on
// how many threads run it (row-parallel ops, channel-sliced encoder backward,
// fixed row blocks in layernorm backward, fixed blocks in sum_squares). A
// resumed run may use another --threads value; these ops must not notice.
TEST(Determinism, NonGemmOpsBitwiseIndependentOfThreadCount) {
  for (const std::string& op : optest::eval_op_names()) {
    if (op.rfind("matmul", 0) == 0 || op == "tied_embedding_backward_rows") continue;  // GEMMs
    const auto cases = optest::eval_cases(op, 99);
    for (const auto& c : cases) {
      auto one = make_cpu_backend(1);
      auto three = make_cpu_backend(3);
      const CaseResult a = optest::eval_case(*c, *one, nullptr);
      const CaseResult b = optest::eval_case(*c, *three, nullptr);
      ASSERT_EQ(a.outputs.size(), b.outputs.size());
      for (size_t o = 0; o < a.outputs.size(); o++)
        EXPECT_EQ(std::memcmp(a.outputs[o].data(), b.outputs[o].data(),
                              a.outputs[o].size() * sizeof(float)),
                  0)
            << c->op() << "(" << c->params() << ") output " << c->outputs[o].name;
    }
  }
}

// Values k/16 with |k| <= 100: every square and every partial sum is exact in
// fp64, so any summation order must give exactly the integer-computed total.
TEST(SumSquares, ExactOnEveryBackend) {
  for (const BackendUnderTest& but : optest::backends_under_test()) {
    auto be = but.make();
    for (size_t n : {size_t{1}, size_t{1000}, size_t{(1 << 16) + 3}, size_t{300001}}) {
      std::vector<float> host(n);
      int64_t exact_256ths = 0;  // sum of k^2, in units of 1/256
      for (size_t i = 0; i < n; i++) {
        const int k = static_cast<int>((i * 7919) % 201) - 100;
        host[i] = static_cast<float>(k) / 16.0f;
        exact_256ths += static_cast<int64_t>(k) * k;
      }
      Tensor t = be->alloc(n, BufferRole::kGrads);
      be->upload(t, host.data());
      const double got = be->sum_squares(t);
      be->free(t);
      EXPECT_EQ(got, static_cast<double>(exact_256ths) / 256.0) << but.name << " n=" << n;
    }
  }
}

TEST(SumSquares, RandomMatchesLongDouble) {
  Rng rng(7);
  const size_t n = 200003;
  std::vector<float> host(n);
  long double ref = 0;
  for (auto& x : host) {
    x = static_cast<float>(rng.normal());
    ref += static_cast<long double>(x) * x;
  }
  for (const BackendUnderTest& but : optest::backends_under_test()) {
    auto be = but.make();
    Tensor t = be->alloc(n, BufferRole::kGrads);
    be->upload(t, host.data());
    const double got = be->sum_squares(t);
    be->free(t);
    // Squares of floats are exact in fp64; the sum is a fixed-order fp64 sum (no BLAS,
    // same bits on every CPU) of positive terms in chains of <= 64Ki/4 per simd lane:
    // a random walk of those roundings is ~sqrt(16Ki) 2^-53 ~ 1.4e-14 relative, so
    // 1e-12 is > 50 sigma; an fp32 accumulation would be off by ~1e-7.
    EXPECT_NEAR(got, static_cast<double>(ref), 1e-12 * static_cast<double>(ref)) << but.name;
  }
}

TEST(Memory, AllocAlignedZeroCopyRoundTrip) {
  for (const BackendUnderTest& but : optest::backends_under_test()) {
    auto be = but.make();
    const size_t n = (1 << 20) + 5;  // above the parallel-copy threshold, odd tail
    Tensor a = be->alloc(n, BufferRole::kParams);
    Tensor b = be->alloc(n, BufferRole::kParams);
    if (be->is_host_memory()) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(a.ptr) % 64, 0u) << but.name;
    }
    std::vector<float> host(n), back(n);
    for (size_t i = 0; i < n; i++) host[i] = static_cast<float>(i) * 0.25f - 7.0f;
    be->upload(a, host.data());
    be->copy(b, a);
    be->download(back.data(), b);
    EXPECT_EQ(std::memcmp(back.data(), host.data(), n * sizeof(float)), 0) << but.name;
    be->zero(b.slice(3, n - 4));
    be->download(back.data(), b);
    EXPECT_EQ(back[2], host[2]);
    EXPECT_EQ(back[n - 1], host[n - 1]);
    size_t nonzero = 0;
    for (size_t i = 3; i < n - 1; i++) nonzero += back[i] != 0.0f;
    EXPECT_EQ(nonzero, 0u) << but.name;
    be->free(a);
    be->free(b);
    Tensor empty = be->alloc(0, BufferRole::kScratch);
    EXPECT_TRUE(empty.empty());
    be->free(empty);
  }
}

TEST(Errors, BadArgumentsThrowNamingTheOp) {
  auto be = make_cpu_backend(1);
  Tensor wte = be->alloc(4 * 8, BufferRole::kParams);  // vocab 4, C 8
  Tensor wpe = be->alloc(2 * 8, BufferRole::kParams);
  Tensor out = be->alloc(2 * 8, BufferRole::kActivations);
  Tensor tok = be->alloc(2, BufferRole::kTokens);
  const int32_t bad[2] = {1, 4};
  be->upload_tokens(tok, bad);
  try {
    be->encoder_forward({.out = out, .tokens = tok, .wte = wte, .wpe = wpe, .B = 1, .T = 2, .C = 8});
    ADD_FAILURE() << "out-of-range token accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("encoder_forward"), std::string::npos) << e.what();
  }
  // Output too small for the shape.
  EXPECT_THROW(be->matmul_forward({.out = out, .inp = out, .w = wte, .N = 4, .C = 8, .OC = 4}), std::runtime_error);
  // C not divisible by NH.
  Tensor qkv = be->alloc(2 * 3 * 8, BufferRole::kActivations);
  Tensor saved = be->alloc(64, BufferRole::kActivations);
  EXPECT_THROW(be->attention_forward({.out = out, .saved = saved, .qkv = qkv, .B = 1, .T = 2, .C = 8, .NH = 3,
                                      .drop = DropoutMask{}}), std::runtime_error);
  // Target outside [0, V).
  Tensor logits = be->alloc(2 * 8, BufferRole::kActivations);
  Tensor losses = be->alloc(2, BufferRole::kStats);
  EXPECT_THROW(be->classifier_forward_backward({.logits = logits, .losses = losses, .targets = tok, .N = 2, .V = 4,
                                                .Vp = 8, .dloss = 1.0f}),
               std::runtime_error);
  for (Tensor t : {wte, wpe, out, tok, qkv, saved, logits, losses}) be->free(t);
}

// Every fp32 GEMM library this build has, split across our threads, and OpenBLAS
// on its own pool (GPT2_CPU_GEMM, GPT2_CPU_GEMM_THREADING), gives the matmuls and
// attention within the eval bounds; an unknown value, oneDNN in a build without
// it, or oneDNN on its own threads (blas.cpp: signals) is an error.
TEST(GemmChoice, EveryLibraryAndThreadingMatchesReferenceAndBadValuesThrow) {
  auto backend_under = [](const char* lib, const char* how) {
    setenv("GPT2_CPU_GEMM", lib, 1);
    setenv("GPT2_CPU_GEMM_THREADING", how, 1);
    std::unique_ptr<Backend> be;
    std::string error;
    try {
      be = make_cpu_backend(2);
    } catch (const std::runtime_error& e) {
      error = e.what();
    }
    unsetenv("GPT2_CPU_GEMM");
    unsetenv("GPT2_CPU_GEMM_THREADING");
    return std::make_pair(std::move(be), error);
  };
  EXPECT_NE(backend_under("openblas", "bogus").second.find("GPT2_CPU_GEMM_THREADING=bogus"), std::string::npos);
  EXPECT_NE(backend_under("mkl", "split").second.find("GPT2_CPU_GEMM=mkl"), std::string::npos);
  const std::string onednn_library = backend_under("onednn", "library").second;
  EXPECT_NE(onednn_library.find(cpu::have_onednn() ? "needs GPT2_CPU_GEMM=openblas" : "no oneDNN"), std::string::npos)
      << onednn_library;
  std::vector<std::pair<const char*, const char*>> choices{{"openblas", "split"}, {"openblas", "library"}};
  if (cpu::have_onednn()) choices.push_back({"onednn", "split"});
  int runs = 0;
  for (const auto& [lib, how] : choices) {
    auto [be, error] = backend_under(lib, how);
    ASSERT_TRUE(be) << lib << "/" << how << ": " << error;
    for (const char* op : {"matmul_forward", "matmul_backward", "attention_forward", "attention_backward"}) {
      for (const auto& c : optest::eval_cases(op, 5)) {
        const CaseResult r = optest::eval_case(*c, *be, nullptr);
        EXPECT_TRUE(r.ok) << lib << "/" << how << ": " << c->op() << "(" << c->params() << "):\n" << r.detail;
        runs++;
      }
    }
  }
  EXPECT_GE(runs, 8 * static_cast<int>(choices.size()));
}

// The trainer takes SIGUSR1 and SIGTERM at any moment (preemption), and Debian's
// oneDNN 2.6 JIT sgemm corrupts the heap when a signal is delivered to a thread
// inside it (blas.cpp). A second thread signals the process as fast as it can
// while GEMMs run on 2 threads through the backend's wrapper: every result must
// equal the first, bit for bit, and the process must live.
TEST(GemmChoice, SignalsDuringGemmsLeaveTheHeapAndResultsIntact) {
  struct sigaction quiet {}, old {};
  quiet.sa_handler = [](int) {};
  sigemptyset(&quiet.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &quiet, &old), 0);
  const int M = 192, N = 320, K = 256;
  std::vector<float> A(size_t(M) * K), B(size_t(K) * N);
  for (size_t i = 0; i < A.size(); i++) A[i] = float(int(i % 29) - 14) / 16.0f;
  for (size_t i = 0; i < B.size(); i++) B[i] = float(int(i % 31) - 15) / 32.0f;
  const cpu::Exec ex{2};
  std::vector<float> first(size_t(M) * N);
  cpu::gemm<float>(ex, false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, first.data(), N);
  std::atomic<bool> done{false};
  std::atomic<long> sent{0};
  std::thread shooter([&] {
    sigset_t usr1;  // this thread takes none: the signals go to the GEMM threads
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, nullptr);
    while (!done.load()) {
      kill(getpid(), SIGUSR1);
      sent++;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  });
  int calls = 0, differing = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (std::chrono::steady_clock::now() < until) {
    std::vector<float> C(size_t(M) * N, -1.0f);  // fresh heap memory each call
    cpu::gemm<float>(ex, false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C.data(), N);
    if (std::memcmp(C.data(), first.data(), C.size() * sizeof(float)) != 0) differing++;
    calls++;
  }
  done = true;
  shooter.join();
  sigaction(SIGUSR1, &old, nullptr);
  std::printf("  %d GEMMs (%s) under %ld signals\n", calls, cpu::gemm_library_name(ex.blas), sent.load());
  EXPECT_GT(sent.load(), 1000);
  EXPECT_GT(calls, 50);
  EXPECT_EQ(differing, 0);
}

// vexp(float) against fp64 exp over the range the ops use: <= 2 ulp.
TEST(Vexp, AccurateToTwoUlp) {
  double worst_ulp = 0;
  for (int i = 0; i <= 2000000; i++) {
    const float x = -87.0f + 175.0f * static_cast<float>(i) / 2000000.0f;
    const double ref = std::exp(static_cast<double>(x));
    const float got = cpu::vexp(x);
    const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(ref)) - 23);
    worst_ulp = std::max(worst_ulp, std::fabs(got - ref) / ulp);
  }
  std::printf("  vexp worst error %.3f ulp\n", worst_ulp);
  EXPECT_LE(worst_ulp, 2.0);
  EXPECT_EQ(cpu::vexp(-100.0f), 0.0f);
  EXPECT_EQ(cpu::vexp(0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(cpu::vexp(std::nanf(""))));
  EXPECT_TRUE(std::isfinite(cpu::vexp(1000.0f)));
}

}  // namespace
}  // namespace gpt2

int main(int argc, char** argv) {
  bool perf = false;
  std::string filter;
  gpt2::optest::PerfShape shape;
  double seconds = 0.3;
  for (int i = 1; i < argc; i++) {
    if (std::strcmp(argv[i], "--perf") == 0) {
      perf = true;
      if (i + 1 < argc && argv[i + 1][0] != '-') filter = argv[++i];
    } else if (perf && std::strcmp(argv[i], "--elements") == 0 && i + 1 < argc) {
      // AdamW's and sum_squares' length: the default's state fits a large L3.
      shape.elements = std::strtoull(argv[++i], nullptr, 10);
    } else if (perf && std::strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
      // Longer on a shared machine: the fastest run needs a quiet moment.
      seconds = std::strtod(argv[++i], nullptr);
    }
  }
  if (perf) {
    try {
      return gpt2::optest::run_perf(seconds, filter, shape);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
