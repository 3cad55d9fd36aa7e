// Injected and sticky device faults (docs/emulator.md, "Faults").
//
// On a GPU a fault inside a kernel (illegal address, misaligned access, device
// assert) is asynchronous and sticky: it surfaces at the next synchronising call
// and every later call fails until the process ends. The emulator reports a
// fault at the faulting launch; with sticky faults on (GPT2_EMU_STICKY_FAULTS=1,
// set_sticky_faults, or implied by an injection) every later launch and every
// synchronising or copying cudart call fails with the first fault's code too,
// until cudaDeviceReset. GPT2_EMU_INJECT_FAULT=SUBSTRING[@N] makes the N-th
// launch (default the first) of a kernel whose name contains SUBSTRING fault
// with cudaErrorIllegalAddress, so tests can drive the trainer through a fault.
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "emu/control.h"
#include "emu/runtime_internal.h"

namespace gpt2 {
namespace emu {
namespace {

struct FaultState {
  std::mutex mutex;
  bool sticky_mode = false;
  cudaError_t sticky = cudaSuccess;
  std::string sticky_message;
  std::string inject_pattern;  // empty: no injection
  int inject_nth = 1;
  int inject_seen = 0;

  FaultState() {
    if (const char* s = std::getenv("GPT2_EMU_STICKY_FAULTS")) sticky_mode = std::string(s) == "1";
    if (const char* s = std::getenv("GPT2_EMU_INJECT_FAULT")) arm(s);
  }
  void arm(const std::string& spec) {
    const size_t at = spec.rfind('@');
    inject_pattern = spec.substr(0, at);
    inject_nth = at == std::string::npos ? 1 : std::max(1, std::atoi(spec.c_str() + at + 1));
    inject_seen = 0;
    sticky_mode = true;
  }
};

FaultState& faults() {
  static FaultState state;
  return state;
}

}  // namespace

void set_sticky_faults(bool on) {
  std::lock_guard<std::mutex> lock(faults().mutex);
  faults().sticky_mode = on;
}

void inject_fault(const std::string& spec) {
  std::lock_guard<std::mutex> lock(faults().mutex);
  faults().arm(spec);
}

bool injected_fault(const char* kernel_name, std::string* message) {
  FaultState& f = faults();
  std::lock_guard<std::mutex> lock(f.mutex);
  if (f.inject_pattern.empty() || std::string(kernel_name).find(f.inject_pattern) == std::string::npos) return false;
  if (++f.inject_seen != f.inject_nth) return false;
  *message = "injected fault (GPT2_EMU_INJECT_FAULT=" + f.inject_pattern + "@" + std::to_string(f.inject_nth) +
             "): an illegal memory access was encountered";
  return true;
}

void note_kernel_fault(cudaError_t code, const std::string& message) {
  FaultState& f = faults();
  std::lock_guard<std::mutex> lock(f.mutex);
  if (!f.sticky_mode || f.sticky != cudaSuccess) return;
  f.sticky = code;
  f.sticky_message = message;
}

cudaError_t sticky_fault(std::string* message) {
  FaultState& f = faults();
  std::lock_guard<std::mutex> lock(f.mutex);
  if (message != nullptr && f.sticky != cudaSuccess)
    *message = "the context is unusable after an earlier device fault: " + f.sticky_message;
  return f.sticky;
}

void clear_sticky_fault() {
  std::lock_guard<std::mutex> lock(faults().mutex);
  faults().sticky = cudaSuccess;
  faults().sticky_message.clear();
}

}  // namespace emu
}  // namespace gpt2
