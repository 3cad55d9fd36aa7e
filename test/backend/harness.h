// Op test harness for gpt2::Backend implementations, after ggml's
// tests/test-backend-ops.cpp: every op has a list of cases (shapes including
// odd sizes, C not a multiple of 8/16, T = 1, V < Vp), each case knows how to
// build its inputs, run the op on a backend, compute an independent reference
// (plain fp64 loops, no BLAS) and its tolerance. The harness runs each case on
// every backend in backends_under_test() with guard bytes around every buffer
// and compares:
//   eval  backend output vs the fp64 reference, and every backend after the
//         first vs the first on the same inputs (today both are the CPU
//         backend, at its default thread count and at one thread, so this is
//         a thread-count consistency check; CUDA vs CPU is compared by
//         test/backend_cuda/cuda_ops_test.cpp);
//   perf  time per op and shape, reported as GFLOP/s or GB/s (--perf).
// The gradient mode (finite differences on the fp64 instantiation of the op
// code) lives in grad_test.cpp, since it runs the templates, not a Backend.
//
// Rules checked for every buffer of every case:
//   * guard elements before and after the buffer keep their canary bits;
//   * inputs are bit-for-bit unchanged after the op;
//   * "=" outputs start as NaN poison, so an element the op forgets shows up;
//   * NaN/Inf: where the reference is finite the output must be finite and
//     within |out - ref| <= atol + rtol * |ref|; where the reference is NaN the
//     output must be NaN; where it is +-Inf the output must be the same Inf.
//     (Ops that cancel, e.g. AdamW's moment update, give rtol a per-element
//     magnitude of the terms instead of |ref|: OpCase::magnitude.)
#ifndef TEST_BACKEND_HARNESS_H
#define TEST_BACKEND_HARNESS_H

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace gpt2 {
namespace optest {

// Deterministic generator (splitmix64), independent of the standard library.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  double uniform();                    // [0, 1)
  double uniform(double lo, double hi);
  double normal();                     // N(0, 1)
  int below(int n);                    // [0, n)
 private:
  uint64_t state_;
};

// A backend the harness runs every case on. The first entry is the one the
// others are compared with: the CPU backend at its default thread count (the
// others today: the same backend at one thread).
struct BackendUnderTest {
  std::string name;
  std::function<std::unique_ptr<Backend>()> make;
};
std::vector<BackendUnderTest> backends_under_test();

struct Tolerance {
  double atol;
  double rtol;
};

// A host array of the case: its initial contents and, for outputs, whether the
// op overwrites ("=": harness fills with NaN poison) or accumulates ("+=").
struct HostArray {
  std::string name;
  std::vector<float> data;
  bool overwritten = true;  // outputs only
  BufferRole role = BufferRole::kActivations;  // kStats: fp32 on every backend
};

class Ctx;

class OpCase {
 public:
  virtual ~OpCase() = default;
  virtual std::string op() const = 0;      // e.g. "matmul_forward"
  virtual std::string params() const = 0;  // e.g. "N=7,C=13,OC=5,bias"
  // Runs before the op (untimed in perf mode), e.g. attention forward for its backward.
  virtual void prepare(Ctx& ctx) {}
  virtual void run(Ctx& ctx) = 0;
  // Expected final contents of every output, in fp64, from the host inputs.
  virtual std::vector<std::vector<double>> reference() const = 0;
  virtual Tolerance tolerance(size_t output_index) const = 0;
  // Per element, the size of the terms the output is computed from, where that
  // exceeds |ref| (cancellation): rtol then applies to max(|ref|, magnitude).
  // Empty: |ref| alone.
  virtual std::vector<double> magnitude(size_t output_index) const { return {}; }
  virtual double flops() const { return 0; }  // perf: GFLOP/s when > 0
  virtual double bytes() const = 0;           // perf: minimum DRAM traffic, GB/s

  std::vector<HostArray> inputs;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<HostArray> outputs;  // initial contents (ignored when overwritten)
};

// What a case sees while it runs: guarded device tensors for its arrays, and
// guarded temporaries (checked like the rest).
class Ctx {
 public:
  Backend& be;
  std::vector<Tensor> in, tok, out;
  Tensor temp(size_t numel, BufferRole role);  // NaN-poisoned, guarded

  explicit Ctx(Backend& backend) : be(backend) {}
  struct Guarded {
    Tensor full;
    Tensor view;
    std::vector<float> snapshot;  // full contents right after setup (as downloaded)
    bool is_tokens = false;
  };
  std::vector<Guarded> guarded;  // everything allocated for the case
};

struct CaseResult {
  bool ok = true;
  std::string detail;    // first problems found, human-readable
  double worst = 0;      // max |out-ref| / (atol + rtol |ref|) over all outputs
  std::vector<std::vector<float>> outputs;  // downloaded outputs
};

// Runs one case on one backend and checks it against its reference; when
// `other` is given, also against those outputs (a previous backend's).
CaseResult eval_case(OpCase& c, Backend& be, const CaseResult* other);

// Seconds per run(): the fastest of repeated timed runs after warm-up.
double time_case(OpCase& c, Backend& be, double min_seconds);

// Sets the case up on `be`, runs prepare(), then run() once between before_run()
// and after_run() (the profile driver counts only the op's own kernels).
void run_case_once(OpCase& c, Backend& be, const std::function<void()>& before_run,
                   const std::function<void()>& after_run);

// Case lists (cases.cpp): the eval cases of one op, all op names, and the perf
// cases (GPT-2 d12 shapes).
std::vector<std::string> eval_op_names();
std::vector<std::unique_ptr<OpCase>> eval_cases(const std::string& op, uint64_t seed);
// The default: d12 at B=4, T=64 (attention also at B=1, T=1024, 12 heads); the
// profile driver (dev/profile) asks for fewer rows, one head and fewer elements.
struct PerfShape {
  int B = 4, T = 64;
  bool attention_at_bt = true;  // attention at (B, T) too, besides T = attention_T
  int attention_NH = 12;        // heads of 64 at T = attention_T, B = 1
  int attention_T = 1024;
  size_t elements = size_t(1) << 24;  // AdamW, sum of squares
};
std::vector<std::unique_ptr<OpCase>> perf_cases(uint64_t seed, const PerfShape& shape = PerfShape{});

// Prints the perf table for every backend under test (only ops whose name
// contains `op_filter` when it is not empty); returns 0.
int run_perf(double min_seconds_per_case, const std::string& op_filter, const PerfShape& shape = PerfShape{});

}  // namespace optest
}  // namespace gpt2

#endif  // TEST_BACKEND_HARNESS_H
