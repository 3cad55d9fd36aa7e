// The CUDA ops of the GPT-2 d12 training step in the emulator's profile build
// (emu/profile.h), for `make profile-cuda`: the op harness's perf cases
// (test/backend/cases.cpp) at fewer rows (B=1, T=64: 64 tokens), one attention
// head at T=1024 and 2^16 optimizer elements, which keeps every kernel's per-warp
// access pattern as at C=768, 12 heads of 64, T=1024 while the emulator (at -O0,
// one callback per access) runs each case in seconds. Counts scale linearly with
// rows, heads and elements; "scale" says by how much to reach one call at d12
// B=64 T=1024 (65,536 tokens, 64 x 12 heads, the 124,475,904 parameters).
//   profile_cuda_ops --list [--fp32]   index, op, shape, scale and dtype of every case
//   profile_cuda_ops --case I [--fp32] runs case I once (bf16 storage unless
//                                      --fp32); only its run() is counted
// dev/profile/profile_cuda.sh runs each case in its own process with
// GPT2_EMU_PROFILE and merges the files (dev/profile/profile_table.py).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "emu/profile.h"
#include "test/backend/harness.h"

namespace {

constexpr double kStepTokens = 64.0 * 1024, kStepHeads = 64.0 * 12, kStepParams = 124475904.0;

gpt2::optest::PerfShape profile_shape() {
  gpt2::optest::PerfShape s;
  s.B = 1;
  s.T = 64;
  s.attention_at_bt = false;
  s.attention_NH = 1;
  s.elements = size_t(1) << 16;
  return s;
}

// "B=1,T=64,C=768" -> {B: 1, T: 64, C: 768}
std::map<std::string, double> parse_params(const std::string& params) {
  std::map<std::string, double> kv;
  size_t pos = 0;
  while (pos < params.size()) {
    size_t end = params.find(',', pos);
    if (end == std::string::npos) end = params.size();
    const std::string item = params.substr(pos, end - pos);
    const size_t eq = item.find('=');
    if (eq != std::string::npos) kv[item.substr(0, eq)] = std::atof(item.c_str() + eq + 1);
    pos = end + 1;
  }
  return kv;
}

// From this case's counts to one call at d12 B=64 T=1024.
double scale_to_d12(const gpt2::optest::OpCase& c) {
  const std::string op = c.op();
  std::map<std::string, double> p = parse_params(c.params());
  if (op.rfind("attention", 0) == 0) return kStepHeads / (p["B"] * p["NH"]);
  if (op == "adamw_update" || op == "sum_squares") return kStepParams / p["n"];
  if (op.rfind("gelu", 0) == 0) return kStepTokens * 4 * 768 / p["n"];  // the 4C-wide activations
  if (op == "residual_forward") return kStepTokens * 768 / p["n"];
  if (p.count("N")) return kStepTokens / p["N"];
  if (p.count("B") && p.count("T")) return kStepTokens / (p["B"] * p["T"]);
  return 0.0;  // unknown: the table says so
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpt2;
  try {
    bool list = false;
    int which = -1;
    CudaBackendOptions options;
    options.bf16 = true;
    for (int i = 1; i < argc; i++) {
      if (std::strcmp(argv[i], "--list") == 0) list = true;
      else if (std::strcmp(argv[i], "--case") == 0 && i + 1 < argc) which = std::atoi(argv[++i]);
      else if (std::strcmp(argv[i], "--fp32") == 0) options.bf16 = false;
      else {
        std::fprintf(stderr, "usage: profile_cuda_ops --list | --case I [--fp32]\n");
        return 2;
      }
    }
    auto cases = optest::perf_cases(1234, profile_shape());
    if (list) {
      for (size_t i = 0; i < cases.size(); i++)
        std::printf("%zu\t%s\t%s\t%.10g\t%s\n", i, cases[i]->op().c_str(), cases[i]->params().c_str(),
                    scale_to_d12(*cases[i]), options.bf16 ? "bf16" : "fp32");
      return 0;
    }
    if (which < 0 || which >= static_cast<int>(cases.size())) {
      std::fprintf(stderr, "profile_cuda_ops: --case must be in [0, %zu)\n", cases.size());
      return 2;
    }
    auto cuda = make_cuda_backend(0, options);
    emu::profile::set_recording(false);  // set-up and prepare() kernels are not the op's
    optest::run_case_once(*cases[which], *cuda, [] { emu::profile::set_recording(true); },
                          [] { emu::profile::set_recording(false); });
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
