// The memory profiler of the emulator's profile build (emu/profile.h): the ASan
// callbacks the instrumented kernel code calls, the grouping of lane accesses
// into warp-level requests, and the per-kernel counts written at exit.
#include "emu/profile.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "emu/exec.h"
#include "emu/runtime_internal.h"

// The static __shared__ arrays of the profile build (emu/device.h puts them in
// this section; the linker defines its bounds when it exists).
extern "C" char __start_gpt2_emu_shared[] __attribute__((weak));
extern "C" char __stop_gpt2_emu_shared[] __attribute__((weak));

namespace gpt2 {
namespace emu {
namespace profile {

namespace {

struct LaneAccess {
  uint32_t lane;
  uint32_t bytes;
  uintptr_t address;
};

// One warp-level request: the same site executed for the same time by lanes of one warp.
struct RequestKey {
  uintptr_t site;
  uint32_t warp, occurrence;
  bool store, shared;
  bool operator==(const RequestKey& o) const {
    return site == o.site && warp == o.warp && occurrence == o.occurrence && store == o.store && shared == o.shared;
  }
};
struct RequestHash {
  size_t operator()(const RequestKey& k) const {
    uint64_t h = k.site * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t(k.warp) << 32 | k.occurrence) + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
    return static_cast<size_t>(h ^ (uint64_t(k.store) << 1 | uint64_t(k.shared)));
  }
};

// The lanes of a shared request that the hardware serves together: a warp for
// accesses of up to 4 bytes, a half-warp for 8, a quarter-warp for 16.
uint32_t lanes_per_pass(uint32_t bytes) { return bytes <= 4 ? 32 : bytes <= 8 ? 16 : 8; }

void count_shared(const std::vector<LaneAccess>& lanes, KernelCounts* c) {
  const uint32_t group = lanes_per_pass(lanes.front().bytes);
  for (uint32_t first = 0; first < 32; first += group) {
    std::vector<uint64_t> words;  // 4-byte words addressed by this pass
    for (const LaneAccess& a : lanes)
      if (a.lane >= first && a.lane < first + group)
        for (uintptr_t w = a.address >> 2; w <= (a.address + a.bytes - 1) >> 2; ++w) words.push_back(w);
    if (words.empty()) continue;
    std::sort(words.begin(), words.end());
    words.erase(std::unique(words.begin(), words.end()), words.end());
    uint32_t per_bank[32] = {};
    for (uint64_t w : words) ++per_bank[w & 31];
    c->shared_wavefronts += *std::max_element(per_bank, per_bank + 32);
    c->shared_ideal_wavefronts += (words.size() + 31) / 32;
  }
}

void count_global(const std::vector<LaneAccess>& lanes, KernelCounts* c) {
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;  // [begin, end) bytes
  for (const LaneAccess& a : lanes) ranges.emplace_back(a.address, a.address + a.bytes);
  std::sort(ranges.begin(), ranges.end());
  uint64_t bytes = 0, sectors = 0;
  uintptr_t covered = 0, last_sector = UINTPTR_MAX;
  for (const auto& r : ranges) {
    const uintptr_t begin = std::max(r.first, covered);
    if (begin < r.second) bytes += r.second - begin, covered = r.second;
    for (uintptr_t s = r.first >> 5; s <= (r.second - 1) >> 5; ++s)
      if (last_sector == UINTPTR_MAX || s > last_sector) ++sectors, last_sector = s;
  }
  c->global_sectors += sectors;
  c->global_ideal_sectors += (bytes + 31) / 32;
}

class Profiler {
 public:
  ~Profiler() { write(); }

  void set_recording(bool on) { recording_ = on; }

  void launch_begin(const char* kernel, const void* dynamic_smem, size_t smem_bytes) {
    if (!recording_) return;
    kernel_ = kernel;
    smem_begin_ = reinterpret_cast<uintptr_t>(dynamic_smem);
    smem_end_ = smem_begin_ + smem_bytes;
    current_ = KernelCounts{};
    current_.launches = 1;
    active_ = true;
  }

  void launch_end() {
    if (!active_) return;
    flush();
    active_ = false;
    std::lock_guard<std::mutex> lock(mutex_);
    KernelCounts& t = totals_[kernel_];
    t.launches += current_.launches;
    t.shared_requests += current_.shared_requests;
    t.shared_wavefronts += current_.shared_wavefronts;
    t.shared_ideal_wavefronts += current_.shared_ideal_wavefronts;
    t.shared_store_requests += current_.shared_store_requests;
    t.global_requests += current_.global_requests;
    t.global_sectors += current_.global_sectors;
    t.global_ideal_sectors += current_.global_ideal_sectors;
    t.global_store_requests += current_.global_store_requests;
  }

  // Requests end at a barrier: their lanes cannot pair with accesses after it.
  void flush() {
    for (const auto& kv : requests_) {
      const RequestKey& k = kv.first;
      if (k.shared) {
        ++current_.shared_requests;
        current_.shared_store_requests += k.store;
        count_shared(kv.second, &current_);
      } else {
        ++current_.global_requests;
        current_.global_store_requests += k.store;
        count_global(kv.second, &current_);
      }
    }
    requests_.clear();
    occurrences_.clear();
  }

  void access(uintptr_t site, uintptr_t address, size_t bytes, bool store) {
    if (!active_ || bytes == 0) return;
    const ThreadContext* t = tls_current_thread;
    if (t == nullptr) return;  // host code of an instrumented file
    const bool shared = is_shared(address);
    if (!shared && !device_memory_range(reinterpret_cast<const void*>(address), 1)) return;  // stack, arguments, ...
    const dim3& dim = t->block->block_dim;
    const uint32_t linear = t->thread_idx.x + dim.x * (t->thread_idx.y + dim.y * t->thread_idx.z);
    // Wider copies (a struct) are issued as 16-byte accesses, one after another.
    for (size_t offset = 0; offset < bytes; offset += 16) {
      const uint32_t piece = static_cast<uint32_t>(std::min<size_t>(16, bytes - offset));
      uint32_t& seen = occurrences_[OccurrenceKey{site, linear, store}];
      const RequestKey key{site, linear / 32, seen++, store, shared};
      requests_[key].push_back(LaneAccess{linear % 32, piece, address + offset});
    }
  }

  std::map<std::string, KernelCounts> snapshot() {
    std::lock_guard<std::mutex> lock(mutex_);
    return totals_;
  }

 private:
  struct OccurrenceKey {
    uintptr_t site;
    uint32_t linear;
    bool store;
    bool operator==(const OccurrenceKey& o) const { return site == o.site && linear == o.linear && store == o.store; }
  };
  struct OccurrenceHash {
    size_t operator()(const OccurrenceKey& k) const {
      return static_cast<size_t>((k.site * 0x9E3779B97F4A7C15ull) ^ (uint64_t(k.linear) << 1 | k.store));
    }
  };

  bool is_shared(uintptr_t a) const {
    if (a >= smem_begin_ && a < smem_end_) return true;
    const uintptr_t lo = reinterpret_cast<uintptr_t>(__start_gpt2_emu_shared);
    const uintptr_t hi = reinterpret_cast<uintptr_t>(__stop_gpt2_emu_shared);
    return lo != 0 && a >= lo && a < hi;
  }

  void write() {
    const char* path = std::getenv("GPT2_EMU_PROFILE");
    if (path == nullptr || *path == '\0') return;
    std::FILE* f = std::fopen(path, "w");
    if (f == nullptr) {
      std::fprintf(stderr, "emu: cannot write the profile to %s\n", path);
      return;
    }
    for (const auto& kv : totals_) {
      const KernelCounts& c = kv.second;
      std::fprintf(f,
                   "{\"kernel\":\"%s\",\"launches\":%llu,\"shared_requests\":%llu,\"shared_wavefronts\":%llu,"
                   "\"shared_ideal_wavefronts\":%llu,\"shared_store_requests\":%llu,\"global_requests\":%llu,"
                   "\"global_sectors\":%llu,\"global_ideal_sectors\":%llu,\"global_store_requests\":%llu}\n",
                   json_escaped(kv.first).c_str(), ull(c.launches), ull(c.shared_requests), ull(c.shared_wavefronts),
                   ull(c.shared_ideal_wavefronts), ull(c.shared_store_requests), ull(c.global_requests),
                   ull(c.global_sectors), ull(c.global_ideal_sectors), ull(c.global_store_requests));
    }
    if (std::fclose(f) != 0) std::fprintf(stderr, "emu: error writing the profile to %s\n", path);
  }

  static unsigned long long ull(uint64_t v) { return static_cast<unsigned long long>(v); }
  static std::string json_escaped(const std::string& s) {
    std::string out;
    for (char ch : s) {
      if (ch == '"' || ch == '\\') out += '\\';
      out += ch;
    }
    return out;
  }

  std::mutex mutex_;
  std::map<std::string, KernelCounts> totals_;
  std::atomic<bool> recording_{true};
  // The running launch: the profile build runs blocks on one worker thread.
  bool active_ = false;
  std::string kernel_;
  uintptr_t smem_begin_ = 0, smem_end_ = 0;
  KernelCounts current_;
  std::unordered_map<OccurrenceKey, uint32_t, OccurrenceHash> occurrences_;
  std::unordered_map<RequestKey, std::vector<LaneAccess>, RequestHash> requests_;
};

Profiler& profiler() {
  static Profiler p;
  return p;
}

}  // namespace

void launch_begin(const char* kernel, const void* dynamic_smem, size_t smem_bytes) {
  profiler().launch_begin(kernel, dynamic_smem, smem_bytes);
}
void barrier_passed() { profiler().flush(); }
void block_end() { profiler().flush(); }
void launch_end() { profiler().launch_end(); }
void record(const void* site, const void* address, size_t bytes, bool store) {
  profiler().access(reinterpret_cast<uintptr_t>(site), reinterpret_cast<uintptr_t>(address), bytes, store);
}
std::map<std::string, KernelCounts> snapshot() { return profiler().snapshot(); }
void set_recording(bool on) { profiler().set_recording(on); }

}  // namespace profile
}  // namespace emu
}  // namespace gpt2

// ---- the instrumentation's callbacks (clang -fsanitize=address, callback mode, no runtime) ----
using gpt2::emu::profile::record;

extern "C" {
void __asan_init() {}
void __asan_version_mismatch_check_v8() {}
void __asan_handle_no_return() {}

#define GPT2_EMU_PROFILE_ACCESS(n)                                                                        \
  void __asan_load##n(uintptr_t a) { record(__builtin_return_address(0), reinterpret_cast<void*>(a), n, false); } \
  void __asan_store##n(uintptr_t a) { record(__builtin_return_address(0), reinterpret_cast<void*>(a), n, true); }
GPT2_EMU_PROFILE_ACCESS(1)
GPT2_EMU_PROFILE_ACCESS(2)
GPT2_EMU_PROFILE_ACCESS(4)
GPT2_EMU_PROFILE_ACCESS(8)
GPT2_EMU_PROFILE_ACCESS(16)
#undef GPT2_EMU_PROFILE_ACCESS

void __asan_loadN(uintptr_t a, size_t n) { record(__builtin_return_address(0), reinterpret_cast<void*>(a), n, false); }
void __asan_storeN(uintptr_t a, size_t n) { record(__builtin_return_address(0), reinterpret_cast<void*>(a), n, true); }

void* __asan_memcpy(void* dst, const void* src, size_t n) {
  record(__builtin_return_address(0), src, n, false);
  record(__builtin_return_address(0), dst, n, true);
  return std::memcpy(dst, src, n);
}
void* __asan_memmove(void* dst, const void* src, size_t n) {
  record(__builtin_return_address(0), src, n, false);
  record(__builtin_return_address(0), dst, n, true);
  return std::memmove(dst, src, n);
}
void* __asan_memset(void* dst, int value, size_t n) {
  record(__builtin_return_address(0), dst, n, true);
  return std::memset(dst, value, n);
}
}
