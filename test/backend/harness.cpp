#include "test/backend/harness.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "util/rng.h"

namespace gpt2 {
namespace optest {

uint64_t Rng::next() { return splitmix64_mix(state_ += kSplitMix64Gamma); }
double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
double Rng::uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
double Rng::normal() {
  const double u1 = 1.0 - uniform();  // (0, 1]
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}
int Rng::below(int n) { return static_cast<int>(next() % static_cast<uint64_t>(n)); }

std::vector<BackendUnderTest> backends_under_test() {
  // One backend at two thread counts: the OpenMP default is what the other is
  // compared with, the single-threaded one checks that results do not depend
  // on the thread split. A second backend would plug in here; the CUDA
  // backend is compared with this one by test/backend_cuda/cuda_ops_test.cpp.
  return {
      {"cpu", [] { return make_cpu_backend(0); }},
      {"cpu-1thread", [] { return make_cpu_backend(1); }},
  };
}

namespace {

constexpr size_t kGuard = 16;  // elements of canary on each side of every buffer

float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
// Quiet NaNs with payloads no arithmetic produces, so a stray write shows up.
const float kCanary = bits_to_float(0x7FC5A5A5u);
const float kPoison = bits_to_float(0x7FCDEAD1u);

Ctx::Guarded make_guarded(Backend& be, const std::vector<float>& interior, BufferRole role) {
  Ctx::Guarded g;
  const size_t n = interior.size();
  g.full = be.alloc(n + 2 * kGuard, role);
  g.view = g.full.slice(kGuard, n);
  std::vector<float> host(n + 2 * kGuard, kCanary);
  std::copy(interior.begin(), interior.end(), host.begin() + kGuard);
  be.upload(g.full, host.data());
  g.snapshot.resize(host.size());
  be.download(g.snapshot.data(), g.full);
  return g;
}

bool same_bits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// Compares one output; returns the worst normalised error, appends problems.
double compare(const std::vector<float>& out, const std::vector<double>& ref, Tolerance tol,
               const std::vector<double>& magnitude, const std::string& what,
               std::string& problems, int& problem_count) {
  double worst = 0;
  auto report = [&](size_t i, const std::string& msg) {
    if (problem_count++ < 4) {
      std::ostringstream s;
      s << "  " << what << "[" << i << "]: got " << out[i] << ", expected " << ref[i] << " ("
        << msg << ")\n";
      problems += s.str();
    }
  };
  if (out.size() != ref.size()) {
    problems += "  " + what + ": size mismatch\n";
    problem_count++;
    return std::numeric_limits<double>::infinity();
  }
  for (size_t i = 0; i < out.size(); i++) {
    const double o = out[i], r = ref[i];
    if (std::isnan(r)) {
      if (!std::isnan(o)) report(i, "reference is NaN");
      continue;
    }
    if (std::isinf(r)) {
      if (o != r) report(i, "reference is Inf");
      continue;
    }
    if (!std::isfinite(o)) {
      report(i, "non-finite output for a finite reference");
      worst = std::numeric_limits<double>::infinity();
      continue;
    }
    const double size = magnitude.empty() ? std::fabs(r) : std::max(std::fabs(r), magnitude[i]);
    const double err = std::fabs(o - r) / (tol.atol + tol.rtol * size);
    if (err > 1.0) {
      std::ostringstream s;
      s << "error " << err << "x tolerance";
      report(i, s.str());
    }
    worst = std::max(worst, err);
  }
  return worst;
}

struct Setup {
  explicit Setup(Backend& be) : ctx(be) {}
  Ctx ctx;
  size_t n_in = 0, n_tok = 0, n_out = 0;
  ~Setup() {
    for (auto& g : ctx.guarded) ctx.be.free(g.full);
  }
};

void setup(OpCase& c, Setup& s) {
  Backend& be = s.ctx.be;
  for (const HostArray& a : c.inputs) {
    s.ctx.guarded.push_back(make_guarded(be, a.data, a.role));
    s.ctx.in.push_back(s.ctx.guarded.back().view);
  }
  for (const auto& t : c.tokens) {
    Ctx::Guarded g;
    g.full = be.alloc(t.size() + 2 * kGuard, BufferRole::kTokens);
    g.view = g.full.slice(kGuard, t.size());
    g.is_tokens = true;
    std::vector<int32_t> host(t.size() + 2 * kGuard, 0x5A5A5A5A);
    std::copy(t.begin(), t.end(), host.begin() + kGuard);
    be.upload_tokens(g.full, host.data());
    s.ctx.guarded.push_back(g);
    s.ctx.tok.push_back(g.view);
  }
  for (const HostArray& a : c.outputs) {
    std::vector<float> init = a.data;
    if (a.overwritten) std::fill(init.begin(), init.end(), kPoison);
    s.ctx.guarded.push_back(make_guarded(be, init, a.role));
    s.ctx.out.push_back(s.ctx.guarded.back().view);
  }
  s.n_in = c.inputs.size();
  s.n_tok = c.tokens.size();
  s.n_out = c.outputs.size();
}

}  // namespace

Tensor Ctx::temp(size_t numel, BufferRole role) {
  guarded.push_back(make_guarded(be, std::vector<float>(numel, kPoison), role));
  return guarded.back().view;
}

CaseResult eval_case(OpCase& c, Backend& be, const CaseResult* other) {
  CaseResult res;
  int problems = 0;
  try {
    Setup s(be);
    setup(c, s);
    c.prepare(s.ctx);
    c.run(s.ctx);
    be.synchronize();
    // Guards of every float buffer, and inputs bit-for-bit unchanged.
    for (size_t gi = 0; gi < s.ctx.guarded.size(); gi++) {
      const Ctx::Guarded& g = s.ctx.guarded[gi];
      if (g.is_tokens) continue;  // tokens are never written and cannot be read back as floats
      std::vector<float> now(g.full.numel);
      be.download(now.data(), g.full);
      const size_t n = g.view.numel;
      if (!same_bits(now.data(), g.snapshot.data(), kGuard) ||
          !same_bits(now.data() + kGuard + n, g.snapshot.data() + kGuard + n, kGuard)) {
        res.detail += "  guard bytes overwritten around buffer #" + std::to_string(gi) + "\n";
        problems++;
      }
      const bool is_input = gi < s.n_in;
      if (is_input && !same_bits(now.data() + kGuard, g.snapshot.data() + kGuard, n)) {
        res.detail += "  input '" + c.inputs[gi].name + "' was modified\n";
        problems++;
      }
    }
    for (size_t o = 0; o < s.n_out; o++) {
      std::vector<float> host(s.ctx.out[o].numel);
      be.download(host.data(), s.ctx.out[o]);
      res.outputs.push_back(std::move(host));
    }
  } catch (const std::exception& e) {
    res.ok = false;
    res.detail += std::string("  exception: ") + e.what() + "\n";
    return res;
  }
  const auto ref = c.reference();
  for (size_t o = 0; o < res.outputs.size(); o++) {
    const Tolerance tol = c.tolerance(o);
    const std::vector<double> mag = c.magnitude(o);
    res.worst = std::max(res.worst, compare(res.outputs[o], ref[o], tol, mag, c.outputs[o].name,
                                            res.detail, problems));
    if (other != nullptr && o < other->outputs.size()) {
      const std::vector<double> theirs(other->outputs[o].begin(), other->outputs[o].end());
      // Two fp32 results each within tol of the truth are within 2 tol of each other.
      compare(res.outputs[o], theirs, Tolerance{2 * tol.atol, 2 * tol.rtol}, mag,
              c.outputs[o].name + " vs first backend", res.detail, problems);
    }
  }
  res.ok = problems == 0;
  return res;
}

double time_case(OpCase& c, Backend& be, double min_seconds) {
  Setup s(be);
  setup(c, s);
  c.prepare(s.ctx);
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < 2; i++) c.run(s.ctx);  // warm-up: page faults, thread pools
  be.synchronize();
  std::vector<double> times;
  const auto start = clock::now();
  while (times.size() < 5 ||
         std::chrono::duration<double>(clock::now() - start).count() < min_seconds) {
    const auto t0 = clock::now();
    c.run(s.ctx);
    be.synchronize();
    times.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    if (times.size() >= 1000) break;
  }
  // The fastest run: on a shared 2-core machine any other process preempting
  // one of the two OpenMP threads stalls every barrier for a scheduler tick,
  // so medians measure the neighbours; the minimum measures the op.
  return *std::min_element(times.begin(), times.end());
}

void run_case_once(OpCase& c, Backend& be, const std::function<void()>& before_run,
                   const std::function<void()>& after_run) {
  Setup s(be);
  setup(c, s);
  c.prepare(s.ctx);
  be.synchronize();
  before_run();
  c.run(s.ctx);
  be.synchronize();
  after_run();
}

int run_perf(double min_seconds_per_case, const std::string& op_filter, const PerfShape& shape) {
  for (const BackendUnderTest& but : backends_under_test()) {
    auto be = but.make();
    std::printf("backend %s\n", but.name.c_str());
    std::printf("  %-30s %-36s %10s %10s %9s\n", "op", "shape", "time(us)", "GFLOP/s", "GB/s");
    for (auto& c : perf_cases(1234, shape)) {
      if (!op_filter.empty() && c->op().find(op_filter) == std::string::npos) continue;
      const double t = time_case(*c, *be, min_seconds_per_case);
      const double gflops = c->flops() > 0 ? c->flops() / t * 1e-9 : 0;
      const double gbs = c->bytes() / t * 1e-9;
      if (gflops > 0)
        std::printf("  %-30s %-36s %10.1f %10.1f %9.1f\n", c->op().c_str(), c->params().c_str(),
                    t * 1e6, gflops, gbs);
      else
        std::printf("  %-30s %-36s %10.1f %10s %9.1f\n", c->op().c_str(), c->params().c_str(),
                    t * 1e6, "-", gbs);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace optest
}  // namespace gpt2
