// The CUDA runtime subset of the emulator, implemented against the toolkit's own
// declarations (cuda_runtime_api.h), so host code calling cudart compiles and runs
// unchanged. Device memory is host memory: every allocation is an exact-size
// heap block (AddressSanitizer sees overruns) filled with 0xFF bytes (NaN as
// fp32/bf16/fp16) so reads of never-written memory show up in results.
// By default every operation completes before it returns, so streams and events
// are trivially ordered; event timing measures host wall time between records.
// In the deferred stream mode (emu/streams.cpp) work on created streams is queued
// and the synchronising calls here are where it runs.
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "emu/control.h"
#include "emu/runtime_internal.h"

struct CUstream_st {
  unsigned flags;
};
struct CUevent_st {
  unsigned flags;
  bool recorded;
  std::chrono::steady_clock::time_point time;
  uint64_t record_item = 0;  // deferred mode: the queued record (0 or run: complete)
};

namespace gpt2 {
namespace emu {
namespace {

// The emulated device's memory and object tables.
struct DeviceState {
  std::mutex mutex;
  std::map<uintptr_t, size_t> device_allocs;  // start -> bytes
  std::map<const void*, size_t> pinned;  // cudaMallocHost blocks and cudaHostRegister ranges: base -> bytes
  std::set<const void*> registered;       // which of them cudaHostRegister made
  std::set<cudaStream_t> streams;
  std::set<cudaEvent_t> events;
  std::map<const void*, size_t> max_dynamic_smem;
  size_t allocated = 0;
  int current_device = 0;
};

DeviceState& state() {
  static DeviceState instance;
  return instance;
}

thread_local cudaError_t tls_last_error = cudaSuccess;

cudaError_t fail(cudaError_t e) {
  tls_last_error = e;
  return e;
}

// After a sticky device fault (emu/faults.cpp) every call that waits for or
// moves device data fails with it, as a GPU context does until the process ends.
// A queued item's failure (deferred mode), reported by the synchronising call.
#define RETURN_IF_DRAIN_FAILS(call)                                               \
  do {                                                                           \
    if (cudaError_t drained_ = (call); drained_ != cudaSuccess) return fail(drained_); \
  } while (0)

#define RETURN_IF_STICKY_FAULT()                                                     \
  do {                                                                               \
    if (cudaError_t sticky_ = ::gpt2::emu::surface_fault(); sticky_ != cudaSuccess) return fail(sticky_); \
  } while (0)

// True when [p, p+bytes) lies inside one cudaMalloc allocation.
bool is_device_range(const void* p, size_t bytes) {
  DeviceState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = s.device_allocs.upper_bound(a);
  if (it == s.device_allocs.begin()) return false;
  --it;
  return a >= it->first && a + bytes <= it->first + it->second;
}

bool valid_stream(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return true;
  DeviceState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.streams.count(stream) != 0;
}

bool valid_event(cudaEvent_t event) {
  DeviceState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return event != nullptr && s.events.count(event) != 0;
}

}  // namespace

bool stream_is_blocking(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return true;
  return (stream->flags & cudaStreamNonBlocking) == 0;
}

bool stream_handle_valid(cudaStream_t stream) { return valid_stream(stream); }

// For emu/nccl.cpp: whether [p, p+bytes) is device memory (NCCL refuses host buffers).
bool device_memory_range(const void* p, size_t bytes) { return is_device_range(p, bytes); }

void record_error(cudaError_t status) {
  if (status != cudaSuccess) tls_last_error = status;
}

namespace {

int initial_device_count() {
  const char* s = std::getenv("GPT2_EMU_DEVICE_COUNT");
  if (s == nullptr) return 1;
  int n = std::atoi(s);
  if (n >= 1 && n <= 64) return n;
  std::fprintf(stderr, "emu: ignoring GPT2_EMU_DEVICE_COUNT=%s (1..64)\n", s);
  return 1;
}

std::atomic<int>& device_count_setting() {
  static std::atomic<int> count{initial_device_count()};
  return count;
}

// cudaSetDevice is per host thread in CUDA; a new thread starts on device 0.
thread_local int tls_current_device = 0;

bool valid_device(int device) { return device >= 0 && device < device_count(); }

}  // namespace

void set_device_count(int count) { device_count_setting() = std::max(1, count); }

int device_count() { return device_count_setting().load(); }

size_t kernel_max_dynamic_smem(const void* kernel) {
  DeviceState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.max_dynamic_smem.find(kernel);
  return it == s.max_dynamic_smem.end() ? 0 : it->second;
}

}  // namespace emu
}  // namespace gpt2

using gpt2::emu::fail;
using gpt2::emu::state;

extern "C" {

cudaError_t cudaGetLastError(void) {
  if (cudaError_t sticky = gpt2::emu::sticky_fault(); sticky != cudaSuccess) return sticky;  // cannot be cleared
  cudaError_t e = gpt2::emu::tls_last_error;
  gpt2::emu::tls_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) {
  cudaError_t sticky = gpt2::emu::sticky_fault();
  return sticky != cudaSuccess ? sticky : gpt2::emu::tls_last_error;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorAssert: return "cudaErrorAssert";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorMisalignedAddress: return "cudaErrorMisalignedAddress";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorAssert: return "device-side assert triggered";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorMisalignedAddress: return "misaligned address";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    default: return "unknown error";
  }
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return fail(cudaErrorInvalidValue);
  *count = gpt2::emu::device_count();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (!gpt2::emu::valid_device(device)) return fail(cudaErrorInvalidDevice);
  gpt2::emu::tls_current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue);
  *device = gpt2::emu::tls_current_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return fail(cudaErrorInvalidValue);
  if (!gpt2::emu::valid_device(device)) return fail(cudaErrorInvalidDevice);
  gpt2::emu::DeviceConfig d = gpt2::emu::device_config();
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof prop->name, "%s", d.name.c_str());
  prop->totalGlobalMem = d.total_global_mem;
  prop->sharedMemPerBlock = d.smem_per_block;
  prop->sharedMemPerBlockOptin = d.smem_per_block_optin;
  prop->sharedMemPerMultiprocessor = d.smem_per_sm;
  prop->regsPerBlock = d.regs_per_block;
  prop->regsPerMultiprocessor = d.regs_per_block;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = d.max_threads_per_block;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->multiProcessorCount = d.sm_count;
  prop->maxThreadsPerMultiProcessor = d.max_threads_per_sm;
  prop->maxBlocksPerMultiProcessor = 32;
  prop->major = d.major;
  prop->minor = d.minor;
  prop->l2CacheSize = d.l2_cache_bytes;
  prop->totalConstMem = 64 * 1024;
  prop->memoryBusWidth = 5120;
  prop->concurrentKernels = 1;
  prop->unifiedAddressing = 1;
  prop->managedMemory = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (value == nullptr) return fail(cudaErrorInvalidValue);
  if (!gpt2::emu::valid_device(device)) return fail(cudaErrorInvalidDevice);
  gpt2::emu::DeviceConfig d = gpt2::emu::device_config();
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = d.sm_count; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(d.smem_per_block_optin); break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(d.smem_per_block); break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = static_cast<int>(d.smem_per_sm); break;
    case cudaDevAttrMaxThreadsPerBlock: *value = d.max_threads_per_block; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = d.max_threads_per_sm; break;
    case cudaDevAttrComputeCapabilityMajor: *value = d.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = d.minor; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrL2CacheSize: *value = d.l2_cache_bytes; break;
    default: return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  if (version == nullptr) return fail(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return fail(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  RETURN_IF_DRAIN_FAILS(gpt2::emu::drain_all());
  RETURN_IF_STICKY_FAULT();
  return cudaSuccess;
}

// A new context: the only way out of a sticky fault (allocations survive in emulation).
cudaError_t cudaDeviceReset(void) {
  gpt2::emu::clear_sticky_fault();
  gpt2::emu::tls_last_error = cudaSuccess;
  return cudaSuccess;
}

// ---- memory -----------------------------------------------------------------------------
cudaError_t cudaMalloc(void** ptr, size_t size) {
  if (ptr == nullptr) return fail(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  auto& s = state();
  gpt2::emu::DeviceConfig d = gpt2::emu::device_config();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.allocated + size > d.total_global_mem) return fail(cudaErrorMemoryAllocation);
  }
  void* p = nullptr;
  // 256-byte aligned like cudaMalloc, but exactly `size` bytes long.
  if (posix_memalign(&p, 256, size) != 0) return fail(cudaErrorMemoryAllocation);
  std::memset(p, 0xFF, size);
  std::lock_guard<std::mutex> lock(s.mutex);
  s.device_allocs[reinterpret_cast<uintptr_t>(p)] = size;
  s.allocated += size;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaMallocManaged(void** ptr, size_t size, unsigned int flags) {
  (void)flags;
  return cudaMalloc(ptr, size);
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  gpt2::emu::drain_all();  // cudaFree synchronises the device (queued work may use ptr)
  auto& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.device_allocs.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == s.device_allocs.end()) return fail(cudaErrorInvalidValue);
    s.allocated -= it->second;
    s.device_allocs.erase(it);
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
  if (!gpt2::emu::valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  return cudaMalloc(ptr, size);
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  if (!gpt2::emu::valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  return cudaFree(ptr);
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  if (ptr == nullptr) return fail(cudaErrorInvalidValue);
  void* p = nullptr;
  if (posix_memalign(&p, 256, std::max<size_t>(size, 1)) != 0) return fail(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> lock(state().mutex);
  state().pinned[p] = std::max<size_t>(size, 1);
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  (void)flags;
  return cudaMallocHost(ptr, size);
}

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  gpt2::emu::drain_all();  // as cudaFree: queued copies may use ptr
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    if (state().registered.count(ptr) != 0 || state().pinned.erase(ptr) == 0) return fail(cudaErrorInvalidValue);
  }
  std::free(ptr);
  return cudaSuccess;
}

namespace {

// A byte count: decimal digits only, no more than fit in 64 bits.
bool parse_bytes(const std::string& text, size_t* v) {
  static_assert(sizeof(size_t) == sizeof(unsigned long long), "byte counts are parsed as 64-bit");
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return false;
  errno = 0;
  *v = std::strtoull(text.c_str(), nullptr, 10);
  return errno != ERANGE;
}

// The test hook GPT2_TEST_DEVICE_MEMORY=FREE[,TOTAL] (docs/emulator.md): what
// cudaMemGetInfo reports instead of the device's own numbers, so tests of the
// trainer's --memory-check can stand for a GPU that other processes already
// fill. Read at every call (tests change it). cudaSuccess and *hooked false
// without it; cudaErrorInvalidValue, said on stderr, for a malformed value.
cudaError_t test_device_memory(size_t device_total, size_t* free_bytes, size_t* total_bytes, bool* hooked) {
  *hooked = false;
  const char* env = std::getenv("GPT2_TEST_DEVICE_MEMORY");
  if (env == nullptr) return cudaSuccess;
  const std::string text = env;
  const size_t comma = text.find(',');
  size_t free_v = 0, total_v = device_total;
  if (!parse_bytes(text.substr(0, comma), &free_v) ||
      (comma != std::string::npos && !parse_bytes(text.substr(comma + 1), &total_v)) || free_v > total_v) {
    std::fprintf(stderr,
                 "emu: GPT2_TEST_DEVICE_MEMORY='%s': expected FREE[,TOTAL], byte counts with FREE <= TOTAL "
                 "(TOTAL defaults to the device's %zu)\n",
                 env, device_total);
    return cudaErrorInvalidValue;
  }
  *free_bytes = free_v;
  *total_bytes = total_v;
  *hooked = true;
  return cudaSuccess;
}

}  // namespace

// Profiler capture window (nsys --capture-range=cudaProfilerApi): nothing to
// capture here; accepted so the trainer's --profile-steps runs emulated.
cudaError_t cudaProfilerStart() { return cudaSuccess; }
cudaError_t cudaProfilerStop() { return cudaSuccess; }

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return fail(cudaErrorInvalidValue);
  gpt2::emu::DeviceConfig d = gpt2::emu::device_config();
  bool hooked = false;
  const cudaError_t hook = test_device_memory(d.total_global_mem, free_bytes, total_bytes, &hooked);
  if (hook != cudaSuccess) return fail(hook);
  if (hooked) return cudaSuccess;
  std::lock_guard<std::mutex> lock(state().mutex);
  *total_bytes = d.total_global_mem;
  *free_bytes = d.total_global_mem - state().allocated;
  return cudaSuccess;
}

// Page-locking memory the program allocated: copies from and to it are then
// deferred as for cudaMallocHost's blocks (read and written when they run).
cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  (void)flags;
  if (ptr == nullptr || size == 0) return fail(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(state().mutex);
  auto next = state().pinned.lower_bound(ptr);
  const char* p = static_cast<const char*>(ptr);
  if (next != state().pinned.end() && static_cast<const char*>(next->first) < p + size)
    return fail(cudaErrorHostMemoryAlreadyRegistered);
  if (next != state().pinned.begin()) {
    auto prev = std::prev(next);
    if (static_cast<const char*>(prev->first) + prev->second > p) return fail(cudaErrorHostMemoryAlreadyRegistered);
  }
  state().pinned[ptr] = size;
  state().registered.insert(ptr);
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* ptr) {
  gpt2::emu::drain_all();  // queued copies may still use the range
  std::lock_guard<std::mutex> lock(state().mutex);
  if (state().registered.erase(ptr) == 0) return fail(cudaErrorHostMemoryNotRegistered);
  state().pinned.erase(ptr);
  return cudaSuccess;
}

namespace {

// Whether [p, p + count) lies inside one cudaMallocHost block.
bool is_pinned_range(const void* p, size_t count) {
  std::lock_guard<std::mutex> lock(state().mutex);
  auto it = state().pinned.upper_bound(p);
  if (it == state().pinned.begin()) return false;
  --it;
  const char* base = static_cast<const char*>(it->first);
  const char* q = static_cast<const char*>(p);
  return q >= base && q + count <= base + it->second;
}

// The checks of a copy, made when it is issued (also when it is queued).
cudaError_t check_copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  // With an explicit direction the device side must be inside one cudaMalloc block.
  bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind != cudaMemcpyHostToHost && kind != cudaMemcpyDefault && !dst_dev && !src_dev)
    return cudaErrorInvalidMemcpyDirection;
  if ((dst_dev && !gpt2::emu::is_device_range(dst, count)) || (src_dev && !gpt2::emu::is_device_range(src, count)))
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

}  // namespace

// The legacy default stream: runs after every blocking stream's queued work.
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  RETURN_IF_DRAIN_FAILS(gpt2::emu::drain_legacy());
  RETURN_IF_STICKY_FAULT();
  if (count == 0) return cudaSuccess;
  if (cudaError_t e = check_copy(dst, src, count, kind); e != cudaSuccess) return fail(e);
  std::memmove(dst, src, count);
  return cudaSuccess;
}

// Deferred: a pageable host source is read now (as CUDA stages pageable
// memory); pinned host memory (cudaMallocHost), device memory and a host
// destination when the copy runs, so reusing a pinned staging buffer before
// its copy has run is caught (the DMA of a GPU reads it late too).
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  if (!gpt2::emu::valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (!gpt2::emu::defers(stream)) return cudaMemcpy(dst, src, count, kind);
  RETURN_IF_STICKY_FAULT();
  if (count == 0) return cudaSuccess;
  if (cudaError_t e = check_copy(dst, src, count, kind); e != cudaSuccess) return fail(e);
  const bool host_src = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost ||
                        (kind == cudaMemcpyDefault && !gpt2::emu::is_device_range(src, count));
  if (host_src && !is_pinned_range(src, count)) {
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                               static_cast<const unsigned char*>(src) + count);
    gpt2::emu::enqueue(stream, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); }, "cudaMemcpyAsync");
  } else {
    gpt2::emu::enqueue(stream, [dst, src, count] { std::memmove(dst, src, count); }, "cudaMemcpyAsync");
  }
  return cudaSuccess;
}

cudaError_t cudaMemset(void* dst, int value, size_t count) {
  RETURN_IF_DRAIN_FAILS(gpt2::emu::drain_legacy());
  RETURN_IF_STICKY_FAULT();
  if (count == 0) return cudaSuccess;
  if (!gpt2::emu::is_device_range(dst, count)) return fail(cudaErrorInvalidValue);
  std::memset(dst, value, count);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t count, cudaStream_t stream) {
  if (!gpt2::emu::valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (!gpt2::emu::defers(stream)) return cudaMemset(dst, value, count);
  RETURN_IF_STICKY_FAULT();
  if (count == 0) return cudaSuccess;
  if (!gpt2::emu::is_device_range(dst, count)) return fail(cudaErrorInvalidValue);
  gpt2::emu::enqueue(stream, [dst, value, count] { std::memset(dst, value, count); }, "cudaMemsetAsync");
  return cudaSuccess;
}

// __device__ / __constant__ variables are ordinary host globals in emulation.
cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset, cudaMemcpyKind kind) {
  if (symbol == nullptr || src == nullptr) return fail(cudaErrorInvalidValue);
  (void)kind;
  RETURN_IF_DRAIN_FAILS(gpt2::emu::drain_legacy());  // queued kernels may read the symbol
  std::memcpy(static_cast<char*>(const_cast<void*>(symbol)) + offset, src, count);
  return cudaSuccess;
}

cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset, cudaMemcpyKind kind) {
  if (symbol == nullptr || dst == nullptr) return fail(cudaErrorInvalidValue);
  (void)kind;
  RETURN_IF_DRAIN_FAILS(gpt2::emu::drain_legacy());
  std::memcpy(dst, static_cast<const char*>(symbol) + offset, count);
  return cudaSuccess;
}

// ---- streams and events -------------------------------------------------------------------
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (stream == nullptr) return fail(cudaErrorInvalidValue);
  *stream = new CUstream_st{flags};
  std::lock_guard<std::mutex> lock(state().mutex);
  state().streams.insert(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int priority) {
  (void)priority;
  return cudaStreamCreateWithFlags(stream, flags);
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least != nullptr) *least = 0;
  if (greatest != nullptr) *greatest = -5;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    if (state().streams.count(stream) == 0) return fail(cudaErrorInvalidResourceHandle);
  }
  gpt2::emu::forget_stream(stream);  // its queued work still runs, as on a GPU
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    state().streams.erase(stream);
  }
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (!gpt2::emu::valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  RETURN_IF_DRAIN_FAILS(gpt2::emu::drain_stream(stream));
  RETURN_IF_STICKY_FAULT();
  return cudaSuccess;
}

// Never cudaErrorNotReady: a query runs the stream's queued work (so pollers progress).
cudaError_t cudaStreamQuery(cudaStream_t stream) { return cudaStreamSynchronize(stream); }

// Deferred: later work on `stream` waits for the event's latest record (captured
// now, as CUDA does); a legacy-stream wait runs that record's closure at once.
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  (void)flags;
  if (!gpt2::emu::valid_stream(stream) || !gpt2::emu::valid_event(event)) return fail(cudaErrorInvalidResourceHandle);
  const uint64_t record = event->record_item;
  if (record == 0 || !gpt2::emu::item_pending(record)) return cudaSuccess;
  if (gpt2::emu::defers(stream)) gpt2::emu::enqueue(stream, [] {}, "cudaStreamWaitEvent", record);
  else RETURN_IF_DRAIN_FAILS(gpt2::emu::drain_item(record));
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (event == nullptr) return fail(cudaErrorInvalidValue);
  *event = new CUevent_st{flags, false, {}};
  std::lock_guard<std::mutex> lock(state().mutex);
  state().events.insert(*event);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (gpt2::emu::valid_event(event) && event->record_item != 0) gpt2::emu::drain_item(event->record_item);
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    if (state().events.erase(event) == 0) return fail(cudaErrorInvalidResourceHandle);
  }
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!gpt2::emu::valid_event(event) || !gpt2::emu::valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (gpt2::emu::defers(stream)) {
    event->record_item = gpt2::emu::enqueue(stream, [event] {
      event->recorded = true;
      event->time = std::chrono::steady_clock::now();
    }, "cudaEventRecord");
    return cudaSuccess;
  }
  RETURN_IF_DRAIN_FAILS(gpt2::emu::drain_legacy());  // the legacy stream's earlier work
  event->record_item = 0;
  event->recorded = true;
  event->time = std::chrono::steady_clock::now();
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!gpt2::emu::valid_event(event)) return fail(cudaErrorInvalidResourceHandle);
  if (event->record_item != 0) RETURN_IF_DRAIN_FAILS(gpt2::emu::drain_item(event->record_item));
  RETURN_IF_STICKY_FAULT();
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) { return cudaEventSynchronize(event); }

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return fail(cudaErrorInvalidValue);
  if (!gpt2::emu::valid_event(start) || !gpt2::emu::valid_event(end)) return fail(cudaErrorInvalidResourceHandle);
  if ((start->flags & cudaEventDisableTiming) || (end->flags & cudaEventDisableTiming))
    return fail(cudaErrorInvalidResourceHandle);
  if ((start->record_item != 0 && gpt2::emu::item_pending(start->record_item)) ||
      (end->record_item != 0 && gpt2::emu::item_pending(end->record_item)))
    return fail(cudaErrorNotReady);  // a queued record has not run yet
  if (!start->recorded || !end->recorded) return fail(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return cudaSuccess;
}

// ---- kernel attributes -----------------------------------------------------------------------
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (func == nullptr) return fail(cudaErrorInvalidDeviceFunction);
  gpt2::emu::DeviceConfig d = gpt2::emu::device_config();
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || static_cast<size_t>(value) > d.smem_per_block_optin) return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lock(state().mutex);
    state().max_dynamic_smem[func] = static_cast<size_t>(value);
    return cudaSuccess;
  }
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) {
    if (value < -1 || value > 100) return fail(cudaErrorInvalidValue);
    return cudaSuccess;
  }
  return fail(cudaErrorInvalidValue);
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  if (attr == nullptr) return fail(cudaErrorInvalidValue);
  if (func == nullptr) return fail(cudaErrorInvalidDeviceFunction);
  gpt2::emu::DeviceConfig d = gpt2::emu::device_config();
  std::memset(attr, 0, sizeof(*attr));
  const int bound = gpt2::emu::kernel_launch_bound(func);
  attr->maxThreadsPerBlock = bound > 0 ? std::min(bound, d.max_threads_per_block) : d.max_threads_per_block;
  attr->maxDynamicSharedSizeBytes = static_cast<int>(
      std::max(d.smem_per_block, gpt2::emu::kernel_max_dynamic_smem(func)));
  attr->numRegs = 32;  // unknown in emulation; a typical value
  attr->ptxVersion = d.major * 10 + d.minor;
  attr->binaryVersion = d.major * 10 + d.minor;
  return cudaSuccess;
}

// Occupancy from the thread and shared-memory limits of the fake device (registers
// are unknown in emulation).
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, const void* func, int block_size,
                                                                   size_t dynamic_smem, unsigned int flags) {
  (void)flags;
  if (blocks == nullptr || block_size <= 0) return fail(cudaErrorInvalidValue);
  if (func == nullptr) return fail(cudaErrorInvalidDeviceFunction);
  gpt2::emu::DeviceConfig d = gpt2::emu::device_config();
  int by_threads = d.max_threads_per_sm / block_size;
  int by_smem = dynamic_smem == 0 ? 32 : static_cast<int>(d.smem_per_sm / dynamic_smem);
  *blocks = std::max(0, std::min({32, by_threads, by_smem}));
  return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* func, int block_size,
                                                          size_t dynamic_smem) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, func, block_size, dynamic_smem, 0);
}

cudaError_t cudaDeviceSetLimit(cudaLimit limit, size_t value) {
  (void)limit, (void)value;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetLimit(size_t* value, cudaLimit limit) {
  if (value == nullptr) return fail(cudaErrorInvalidValue);
  *value = limit == cudaLimitStackSize ? 1024 : 0;
  return cudaSuccess;
}

cudaError_t cudaFuncSetCacheConfig(const void* func, cudaFuncCache config) {
  (void)config;
  return func == nullptr ? fail(cudaErrorInvalidDeviceFunction) : cudaSuccess;
}

cudaError_t cudaDeviceSetCacheConfig(cudaFuncCache config) {
  (void)config;
  return cudaSuccess;
}

}  // extern "C"
