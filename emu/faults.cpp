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
// with cudaErrorIllegalAddress, asynchronously as on a GPU: that launch returns
// success without running, and the fault surfaces at the next launch or
// synchronising call, so tests can drive the trainer through a fault.
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
  std::string pending;  // an injected fault not yet surfaced
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

bool injected_fault(const std::string& kernel, std::string* message) {
  FaultState& f = faults();
  std::lock_guard<std::mutex> lock(f.mutex);
  if (f.inject_pattern.empty() || kernel.find(f.inject_pattern) == std::string::npos) return false;
  if (++f.inject_seen != f.inject_nth) return false;
  *message = "kernel " + kernel + ": injected fault (GPT2_EMU_INJECT_FAULT=" + f.inject_pattern + "@" +
             std::to_string(f.inject_nth) + "): an illegal memory access was encountered";
  f.pending = *message;
  std::fprintf(stderr, "emu: %s; it surfaces at the next launch or synchronisation\n", message->c_str());
  return true;
}

void note_kernel_fault(cudaError_t code, const std::string& message) {
  FaultState& f = faults();
  std::lock_guard<std::mutex> lock(f.mutex);
  if (!f.sticky_mode || f.sticky != cudaSuccess) return;
  f.sticky = code;
  f.sticky_message = message;
}

namespace {
cudaError_t sticky_locked(FaultState& f, std::string* message) {
  if (message != nullptr && f.sticky != cudaSuccess)
    *message = "the context is unusable after an earlier device fault: " + f.sticky_message;
  return f.sticky;
}
}  // namespace

cudaError_t sticky_fault(std::string* message) {
  FaultState& f = faults();
  std::lock_guard<std::mutex> lock(f.mutex);
  return sticky_locked(f, message);
}

cudaError_t surface_fault(std::string* message) {
  FaultState& f = faults();
  std::lock_guard<std::mutex> lock(f.mutex);
  if (!f.pending.empty() && f.sticky == cudaSuccess) {
    f.sticky = cudaErrorIllegalAddress;
    f.sticky_message = f.pending;
  }
  f.pending.clear();
  return sticky_locked(f, message);
}

void clear_sticky_fault() {
  std::lock_guard<std::mutex> lock(faults().mutex);
  faults().sticky = cudaSuccess;
  faults().sticky_message.clear();
  faults().pending.clear();
}

}  // namespace emu
}  // namespace gpt2
