// Reads back the __launch_bounds__ of emulated kernels (see emu/device.h): a
// bounded kernel is preceded by max_threads/32 one-byte NOPs whose address GCC
// records in the section __patchable_function_entries; the linker's
// __start_/__stop_ symbols delimit that section in the executable.
#include <cstdint>
#include <unordered_map>

#include "emu/runtime_internal.h"

extern "C" {
extern const uintptr_t __start___patchable_function_entries[] __attribute__((weak));
extern const uintptr_t __stop___patchable_function_entries[] __attribute__((weak));
}

namespace gpt2 {
namespace emu {
namespace {

constexpr unsigned char kNop = 0x90;
constexpr int kMaxNops = 1024 / 32;

// Function entry address -> max_threads. A record is believed only when exactly
// 1..32 NOPs run from it up to a non-NOP instruction: the entry of the kernel.
std::unordered_map<uintptr_t, int> read_bounds() {
  std::unordered_map<uintptr_t, int> bounds;
  if (__start___patchable_function_entries == nullptr) return bounds;
  for (const uintptr_t* r = __start___patchable_function_entries; r < __stop___patchable_function_entries; r++) {
    const auto* code = reinterpret_cast<const unsigned char*>(*r);
    int nops = 0;
    while (nops <= kMaxNops && code[nops] == kNop) nops++;
    if (nops >= 1 && nops <= kMaxNops) bounds[*r + nops] = 32 * nops;
  }
  return bounds;
}

}  // namespace

int kernel_launch_bound(const void* kernel) {
  static const std::unordered_map<uintptr_t, int> bounds = read_bounds();  // thread-safe once
  auto it = bounds.find(reinterpret_cast<uintptr_t>(kernel));
  return it == bounds.end() ? 0 : it->second;
}

}  // namespace emu
}  // namespace gpt2
