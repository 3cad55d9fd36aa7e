#include "train/test_hooks.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include "distributed/context.h"
#include "util/test_hook.h"

namespace gpt2 {

namespace {

bool test_fault_env(const char* rank_var, const char* step_var, int rank, int step) {
  const char* r = test_hook(rank_var);
  const char* s = test_hook(step_var);
  return r && s && std::atoi(r) == rank && std::atoi(s) == step + 1;
}

// Hook `name`'s positive count of `unit`s, 0 when unset.
size_t positive_count(const char* name, const char* unit) {
  const char* v = test_hook(name);
  if (!v) return 0;
  const long long n = std::atoll(v);
  if (n < 1) throw std::runtime_error(std::string(name) + " must be a positive " + unit + " count");
  return static_cast<size_t>(n);
}

}  // namespace

void test_fault_hook(const DistContext& dist, int step) {
  const bool exit = test_fault_env("GPT2_TEST_EXIT_RANK", "GPT2_TEST_EXIT_AT_STEP", dist.rank, step);
  if (!exit && !test_fault_env("GPT2_TEST_HANG_RANK", "GPT2_TEST_HANG_AT_STEP", dist.rank, step)) return;
  std::fprintf(stderr, "%stest hook: %s before step %d (GPT2_TEST_%s_*)\n", dist.prefix().c_str(),
               exit ? "exiting" : "hanging", step + 1, exit ? "EXIT" : "HANG");
  std::fflush(stderr);
  if (exit) std::_Exit(1);
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

size_t test_wte_chunk_rows() { return positive_count("GPT2_TEST_WTE_CHUNK_ROWS", "row"); }

size_t test_offload_chunk() { return positive_count("GPT2_TEST_OFFLOAD_CHUNK", "element"); }

float test_gradient_scale(int step) {
  const char* v = test_hook("GPT2_TEST_SCALE_GRAD");
  int at = 0;
  float factor = 1.0f;
  if (!v || std::sscanf(v, "%d:%f", &at, &factor) != 2 || at != step + 1) return 1.0f;
  return factor;
}

}  // namespace gpt2
