// Glue between the emulator's execution engine (exec.cpp) and its CUDA runtime
// (cudart.cpp). Not for kernel or host code.
#ifndef EMU_RUNTIME_INTERNAL_H
#define EMU_RUNTIME_INTERNAL_H

#include <driver_types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace gpt2 {
namespace emu {

// True when [p, p+bytes) lies inside one cudaMalloc allocation (emu/cudart.cpp).
bool device_memory_range(const void* p, size_t bytes);
// cudaGetLastError state of the calling host thread.
void record_error(cudaError_t status);
// Opt-in dynamic shared memory set with cudaFuncSetAttribute (0 when never set).
size_t kernel_max_dynamic_smem(const void* kernel);
// max_threads of the kernel's __launch_bounds__ (emu/launch_bounds.cpp); 0 without one.
int kernel_launch_bound(const void* kernel);
// Faults (emu/faults.cpp). injected_fault: whether this launch of `kernel` is the
// injected, asynchronous fault (then it does not run and the fault is pending);
// note_kernel_fault: a fault inside a kernel, remembered when sticky faults are
// on; surface_fault: turns a pending fault into the sticky one (launches and
// synchronising calls) and returns the sticky fault, cudaSuccess when none;
// sticky_fault: the same without surfacing (cudaGetLastError); clear_sticky_fault:
// cudaDeviceReset.
bool injected_fault(const std::string& kernel, std::string* message);
void note_kernel_fault(cudaError_t code, const std::string& message);
cudaError_t surface_fault(std::string* message = nullptr);
cudaError_t sticky_fault(std::string* message = nullptr);
void clear_sticky_fault();
// The demangled name of the function at `kernel` (emu/symbols.cpp); empty if unknown.
std::string kernel_symbol_name(const void* kernel);
// The name a launch is reported under: LAUNCH_KERNEL's token, plus the symbol when
// the token was an alias ("kernel (gpt2::kern::classifier_kernel<float>)"). Cached.
const std::string& kernel_label(const void* kernel_id, const char* kernel_name);
// Fault text of the last failed launch (shared with check_launch).
void set_kernel_fault(const std::string& message);

// ---- deferred stream mode (emu/streams.cpp) ----------------------------------------------
// defers(stream): work on `stream` is to be queued (deferred mode, a created
// stream, and not called from inside a queued item, which runs nested work at once).
// enqueue: queues `work` behind the stream's earlier items and behind item
// `after` (0: none); returns the item's id (never 0). The drain_* calls are the
// synchronisation points: they run what the target needs (its stream
// predecessors and, transitively, the items its waits name), in a seeded random
// interleaving, and return (once) the first error a queued item reported.
// drain_legacy: what a legacy-default-stream operation waits for (every
// blocking stream). All are no-ops in the synchronous mode.
bool defers(cudaStream_t stream);
uint64_t enqueue(cudaStream_t stream, std::function<void()> work, const char* what, uint64_t after = 0);
// The `what` of a queued NCCL collective (GPT2_EMU_STREAMS=deferred-late runs them last).
inline constexpr const char kCollectiveItem[] = "nccl collective";
bool item_pending(uint64_t id);
uint64_t last_item(cudaStream_t stream);  // 0 when nothing is queued on it
cudaError_t drain_item(uint64_t id);
cudaError_t drain_stream(cudaStream_t stream);
cudaError_t drain_legacy();
cudaError_t drain_all();
void forget_stream(cudaStream_t stream);  // cudaStreamDestroy: runs its queue, drops it
// A queued item failed (a kernel fault): reported by the next drain.
void report_deferred_error(cudaError_t code);
// cudart's view of a stream: whether it synchronises with the legacy stream.
bool stream_is_blocking(cudaStream_t stream);
bool stream_handle_valid(cudaStream_t stream);  // without synchronising (cudaStreamQuery does)

}  // namespace emu
}  // namespace gpt2

#endif  // EMU_RUNTIME_INTERNAL_H
