// Emulator execution model shared by the device-side header (emu/device.h) and
// the runtime (emu/exec.cpp): per-thread and per-block context, the entry points
// for barriers and warp-level rendezvous, and the kernel launcher. Only the g++
// (emulation) build includes this; under nvcc the hardware provides all of it.
#ifndef EMU_EXEC_H
#define EMU_EXEC_H

#include <vector_types.h>
#include <vector_functions.h>
#include <driver_types.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpt2 {
namespace emu {

struct BlockContext {
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  unsigned char* dynamic_smem;  // exact-size, NaN-poisoned (0xFF bytes) per block
};

// A cp.async copy issued and not yet waited for (emu/ptx.h): `bytes` from `src`
// (the first `src_bytes` of them; the rest zero) land in `dst` at the wait, or
// earlier under a perturbed run order (land_early_copies).
struct AsyncCopy {
  void* dst;
  const void* src;
  uint32_t bytes, src_bytes;
  bool landed = false;
  // The profile build counts a copy once, as the cp.async that issued it (emu/ptx.h):
  // its landing is the emulator's work, not an access of the kernel's.
#if GPT2_EMU_PROFILE
  __attribute__((no_sanitize("address")))
#endif
  void land() {
    char* d = static_cast<char*>(dst);
    const char* s = static_cast<const char*>(src);
    for (uint32_t b = 0; b < bytes; ++b) d[b] = b < src_bytes ? s[b] : 0;
    landed = true;
  }
};
struct ThreadContext {
  uint3 thread_idx;
  const BlockContext* block;
  std::vector<AsyncCopy> async_copies;  // issued, oldest first
  std::vector<size_t> async_groups;     // committed groups: one past each group's last copy
  uint64_t copy_rng = 0;                // early landings' generator; 0: copies land at their wait
};

// A GPU completes a cp.async at some time between its issue and its wait, and
// other threads can see the copy only when they run, that is after this thread
// switches away. So under a perturbed run order each pending copy lands at each
// fiber switch of its thread (barrier or warp operation) with probability 1/2,
// drawn from the thread's seeded generator: a reader that skipped a barrier sees
// old data, new data or a mix. The forward order keeps every copy to its wait.
inline void land_early_copies(ThreadContext& t) {
  if (t.copy_rng == 0) return;
  uint64_t bits = 0;
  for (size_t i = 0; i < t.async_copies.size(); ++i) {
    if (i % 64 == 0) {  // splitmix64: 64 fair bits per step
      uint64_t z = (t.copy_rng += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      bits = z ^ (z >> 31);
    }
    AsyncCopy& c = t.async_copies[i];
    if (!c.landed && ((bits >> (i % 64)) & 1u)) c.land();
  }
}

// The emulated CUDA thread running on this OS thread (null outside kernels).
// Fibers never migrate between OS threads, so a thread_local is exact.
extern thread_local ThreadContext* tls_current_thread;

[[noreturn]] void fail_outside_kernel(const char* what);

inline ThreadContext& current_thread() {
  ThreadContext* t = tls_current_thread;
  if (t == nullptr) fail_outside_kernel("a device built-in (threadIdx, blockIdx, ...)");
  return *t;
}

// ---- synchronisation points (each one is a fiber switch) ----------------------
void sync_threads(const char* file, int line);
int sync_threads_reduce(int predicate, int op, const char* file, int line);  // op: 0 count, 1 and, 2 or

enum class WarpOp : uint8_t { kShuffle, kBallot, kAll, kAny, kSyncWarp, kReduceAdd, kReduceMin, kReduceMax };
enum class ShuffleMode : uint8_t { kIdx, kUp, kDown, kXor };

// Rendezvous of the lanes named in `mask`; returns this lane's result.
uint64_t warp_rendezvous(WarpOp op, unsigned mask, uint64_t value, ShuffleMode mode, int operand,
                         int width, const char* file, int line);
unsigned active_mask();  // lanes of this warp that have not exited
[[noreturn]] void device_fault(const char* kind, const char* message, const char* file, int line);
// A `bytes`-wide access at a misaligned address: cudaErrorMisalignedAddress for the launch.
[[noreturn]] void misaligned_access(const void* address, size_t alignment, const char* what);
void device_assert_fail(const char* expr, const char* file, int line, const char* function);

// ---- launching -------------------------------------------------------------
struct KernelInvoker {
  void (*invoke)(const void* ctx);
  const void* ctx;
};

// Runs every block of the grid (synchronously) and returns the launch status;
// configuration errors are returned without running anything. In the deferred
// stream mode a launch on a created stream is checked now and queued; `keep`
// then owns what body.ctx points to until it has run.
cudaError_t run_grid(const void* kernel_id, const char* kernel_name, dim3 grid, dim3 block,
                     size_t dynamic_smem, cudaStream_t stream, KernelInvoker body,
                     std::shared_ptr<const void> keep = {});
// Whether work on `stream` is queued (emu/streams.cpp).
bool defers(cudaStream_t stream);

template <class... Params>
struct BoundKernel {
  void (*kernel)(Params...);
  std::tuple<std::decay_t<Params>...> args;
  static void invoke(const void* self) {
    const auto* bound = static_cast<const BoundKernel*>(self);
    // Each emulated thread gets its own copy of the arguments, as on the GPU.
    std::apply(bound->kernel, bound->args);
  }
};

template <class... Params, class... Args>
cudaError_t launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t dynamic_smem,
                   cudaStream_t stream, const char* name, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "kernel launched with the wrong number of arguments");
  BoundKernel<Params...> bound{kernel, std::tuple<std::decay_t<Params>...>(static_cast<std::decay_t<Params>>(std::forward<Args>(args))...)};
  if (defers(stream)) {  // the arguments must outlive this call
    auto heap = std::make_shared<BoundKernel<Params...>>(std::move(bound));
    return run_grid(reinterpret_cast<const void*>(kernel), name, grid, block, dynamic_smem, stream,
                    KernelInvoker{&BoundKernel<Params...>::invoke, heap.get()}, heap);
  }
  return run_grid(reinterpret_cast<const void*>(kernel), name, grid, block, dynamic_smem, stream,
                  KernelInvoker{&BoundKernel<Params...>::invoke, &bound});
}

// Throws std::runtime_error naming file:line and the kernel when the launch (or,
// in emulation, the kernel itself) failed. The one place launch errors are checked.
void check_launch(cudaError_t status, const char* kernel_name, const char* file, int line);

}  // namespace emu
}  // namespace gpt2

#endif  // EMU_EXEC_H
