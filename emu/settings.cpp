// The emulator's settings and its control API (emu/control.h): run order,
// device configuration, workers, the last fault, counters, check_launch.
#include "emu/settings.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdarg>
#include <cstdlib>
#include <thread>
#include <cstdio>
#include <stdexcept>

#include "emu/runtime_internal.h"

namespace gpt2 {
namespace emu {

Settings::Settings() {
  const char* order_env = std::getenv("GPT2_EMU_ORDER");
  if (order_env != nullptr) {
    std::string o = order_env;
    if (o == "forward") order = RunOrder::kForward;
    else if (o == "reverse") order = RunOrder::kReverse;
    else if (o == "random") order = RunOrder::kRandom;
    else std::fprintf(stderr, "emu: ignoring GPT2_EMU_ORDER=%s (expected forward|reverse|random)\n", order_env);
  }
  if (const char* s = std::getenv("GPT2_EMU_SEED")) seed = std::strtoull(s, nullptr, 10);
  unsigned hw = std::thread::hardware_concurrency();
  workers = hw == 0 ? 1 : static_cast<int>(hw);
  if (const char* s = std::getenv("GPT2_EMU_THREADS")) workers = std::max(1, std::atoi(s));
#if GPT2_EMU_PROFILE
  workers = 1;  // the profiler follows one block at a time (emu/profile.h)
#endif
  // Kernels keep register arrays on the fiber stack; ASan frames are much larger.
  stack_bytes = (EMU_ASAN ? 256 : 64) * 1024;
  if (const char* s = std::getenv("GPT2_EMU_STACK_KB")) stack_bytes = std::max(16, std::atoi(s)) * size_t(1024);
  if (const char* s = std::getenv("GPT2_EMU_DEVICE")) parse_device(s);
  stream_seed = seed;
  if (const char* s = std::getenv("GPT2_EMU_STREAMS")) {
    std::string m = s;
    if (m == "deferred" || m == "deferred-late") stream_mode = StreamMode::kDeferred;
    else if (m != "sync" && !m.empty())
      std::fprintf(stderr, "emu: ignoring GPT2_EMU_STREAMS=%s (expected sync|deferred|deferred-late)\n", s);
    collectives_last = m == "deferred-late";
  }
  if (const char* s = std::getenv("GPT2_EMU_STREAM_SEED")) stream_seed = std::strtoull(s, nullptr, 10);
}

void Settings::parse_device(const std::string& spec) {
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    std::string item = spec.substr(pos, end - pos);
    size_t eq = item.find('=');
    std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (key == "name") device.name = value;
    else if (key == "sms") device.sm_count = std::atoi(value.c_str());
    else if (key == "smem_optin") device.smem_per_block_optin = std::strtoull(value.c_str(), nullptr, 10);
    else if (key == "smem") device.smem_per_block = std::strtoull(value.c_str(), nullptr, 10);
    else if (key == "mem_gb") device.total_global_mem = std::strtoull(value.c_str(), nullptr, 10) << 30;
    else if (key == "cc") std::sscanf(value.c_str(), "%d.%d", &device.major, &device.minor);
    else std::fprintf(stderr, "emu: ignoring GPT2_EMU_DEVICE key '%s'\n", key.c_str());
    pos = end + 1;
  }
}

Settings& settings() {
  static Settings instance;
  return instance;
}

std::string format(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

// ---- control API ------------------------------------------------------------------------
void set_run_order(RunOrder order, uint64_t seed) {
  std::lock_guard<std::mutex> lock(settings().mutex);
  settings().order = order;
  settings().seed = seed;
}
RunOrder run_order() {
  std::lock_guard<std::mutex> lock(settings().mutex);
  return settings().order;
}
void set_device_config(const DeviceConfig& config) {
  std::lock_guard<std::mutex> lock(settings().mutex);
  settings().device = config;
}
DeviceConfig device_config() {
  std::lock_guard<std::mutex> lock(settings().mutex);
  return settings().device;
}
void set_worker_threads(int count) {
  std::lock_guard<std::mutex> lock(settings().mutex);
  settings().workers = GPT2_EMU_PROFILE ? 1 : std::max(1, count);
}
void set_block_dispatch(BlockDispatch order) {
  std::lock_guard<std::mutex> lock(settings().mutex);
  settings().blocks_descending = order == BlockDispatch::kDescending;
}
void set_kernel_fault(const std::string& message) {
  std::lock_guard<std::mutex> lock(settings().mutex);
  settings().last_fault = message;
}
std::string last_kernel_fault() {
  std::lock_guard<std::mutex> lock(settings().mutex);
  return settings().last_fault;
}
ExecStats exec_stats() {
  Settings& s = settings();
  return ExecStats{s.threads_run.load(), s.barriers.load(), s.warp_syncs.load()};
}

void check_launch(cudaError_t status, const char* kernel_name, const char* file, int line) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // the failure is reported here; do not leave it for an unrelated call
  std::string fault = last_kernel_fault();
  throw std::runtime_error(format("%s:%d: launch of %s failed: %s%s%s", file, line, kernel_name,
                                  cudaGetErrorString(status), fault.empty() ? "" : ": ", fault.c_str()));
}

}  // namespace emu
}  // namespace gpt2
