// Process-wide settings of the emulated device and of the execution engine (run
// order, workers, fiber stacks), read from the environment once; shared by the
// engine (emu/exec.cpp) and the control API (emu/settings.cpp). Not for kernel
// or host code.
#ifndef EMU_SETTINGS_H
#define EMU_SETTINGS_H

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "emu/control.h"

// The profile build of the library (emu/profile.h): one worker thread.
#ifndef GPT2_EMU_PROFILE
#define GPT2_EMU_PROFILE 0
#endif

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

namespace gpt2 {
namespace emu {

struct Settings {
  std::mutex mutex;
  RunOrder order = RunOrder::kForward;
  uint64_t seed = 1;
  DeviceConfig device;
  int workers = 1;
  bool blocks_descending = false;
  size_t stack_bytes = 0;
  std::string last_fault;
  std::atomic<uint64_t> threads_run{0}, barriers{0}, warp_syncs{0};
  // Stream mode (emu/streams.cpp): GPT2_EMU_STREAMS=sync|deferred|deferred-late,
  // its seed GPT2_EMU_STREAM_SEED (default: GPT2_EMU_SEED). Read once by the
  // scheduler. deferred-late: NCCL collectives run only when nothing else can.
  StreamMode stream_mode = StreamMode::kSync;
  uint64_t stream_seed = 1;
  bool collectives_last = false;

  Settings();  // from the environment: GPT2_EMU_ORDER, _SEED, _THREADS, _STACK_KB, _DEVICE, _STREAMS
  // "name=...,sms=N,smem_optin=BYTES,smem=BYTES,mem_gb=N,cc=MAJOR.MINOR"
  void parse_device(const std::string& spec);
};

Settings& settings();

// printf into a std::string (messages up to 1 KiB).
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace emu
}  // namespace gpt2

#endif  // EMU_SETTINGS_H
