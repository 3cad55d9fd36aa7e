// Transfers that overlap host work: the offloaded optimizer's gradients down
// and weights up (Backend::download_async, upload_async, issue_mark,
// wait_mark, pin_host).
//
// Numerics: bf16 -> fp32 is exact, fp32 -> bf16 rounds to nearest even, the
// rounding of upload() and of the AdamW kernel's params, so the offloaded
// weights stay bitwise the on-device optimizer's.
//
// Memory traffic, per element of a bf16 chunk: the device widens (2 B read,
// 4 B written) into `via` and fp32 crosses the bus (4 B); up, fp32 crosses and
// the device rounds (4 B read, 2 B written). fp32 on the bus is twice bf16's
// bytes, but the host converts nothing: its memory bandwidth, which the host
// AdamW already saturates, bounds an offloaded step, not the bus
// (dev/roofline prices both).
//
// Ordering: everything runs on the backend's one stream, so `via` is refilled
// only after its last copy ran, a download follows the ops that wrote its
// source, and the next step's kernels follow the last upload. A mark is an
// event recorded on that stream; waiting on it blocks the host only. Pinned
// host memory (cudaHostRegister) is read and written by DMA when the copy runs,
// which the emulator's deferred streams model (emu/cudart.cpp), so a host
// write before its wait is caught by the tests.
#ifndef BACKEND_CUDA_HOST_TRANSFERS_CUH
#define BACKEND_CUDA_HOST_TRANSFERS_CUH

#include <cstdint>
#include <cstdio>
#include <deque>
#include <utility>
#include <vector>

#include <cuda_bf16.h>

#include "backend/cuda/common.cuh"

namespace gpt2 {
namespace kern {

__global__ void widen_bf16_kernel(float* out, const __nv_bfloat16* in, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __bfloat162float(in[i]);
}

__global__ void round_bf16_kernel(__nv_bfloat16* out, const float* in, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16(in[i]);
}

class HostTransfers {
 public:
  HostTransfers() = default;
  ~HostTransfers() { release(); }
  HostTransfers(const HostTransfers&) = delete;
  HostTransfers& operator=(const HostTransfers&) = delete;

  // host[i] = float(src[i]), n elements of 2 (bf16, through via) or 4 bytes.
  void download(float* host, const void* src, size_t n, bool bf16, float* via, cudaStream_t stream) {
    if (n == 0) return;
    if (bf16) {
      LAUNCH_KERNEL(widen_bf16_kernel, ceil_div(n, kBlock), kBlock, 0, stream, via,
                    static_cast<const __nv_bfloat16*>(src), n);
      src = via;
    }
    CUDA_CHECK(cudaMemcpyAsync(host, src, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
  }

  // dst[i] = round(host[i]).
  void upload(void* dst, const float* host, size_t n, bool bf16, float* via, cudaStream_t stream) {
    if (n == 0) return;
    CUDA_CHECK(cudaMemcpyAsync(bf16 ? via : dst, host, n * sizeof(float), cudaMemcpyHostToDevice, stream));
    if (bf16)
      LAUNCH_KERNEL(round_bf16_kernel, ceil_div(n, kBlock), kBlock, 0, stream, static_cast<__nv_bfloat16*>(dst),
                    via, n);
  }

  uint64_t mark(cudaStream_t stream) {
    cudaEvent_t e = nullptr;
    if (free_.empty()) {
      CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    } else {
      e = free_.back();
      free_.pop_back();
    }
    pending_.emplace_back(++last_mark_, e);
    CUDA_CHECK(cudaEventRecord(e, stream));
    return last_mark_;
  }

  // The stream runs in order: the newest event at or before `mark` covers the
  // older ones, which go back to the pool with it.
  void wait(uint64_t mark) {
    cudaEvent_t newest = nullptr;
    while (!pending_.empty() && pending_.front().first <= mark) {
      if (newest != nullptr) free_.push_back(newest);
      newest = pending_.front().second;
      pending_.pop_front();
    }
    if (newest == nullptr) return;
    free_.push_back(newest);
    CUDA_CHECK(cudaEventSynchronize(newest));
  }

  // cudaHostRegister may be refused (a locked-memory limit, a platform without
  // it); the copies then stage through the driver: slower, still correct.
  bool pin(void* p, size_t bytes) {
    if (p == nullptr || bytes == 0) return false;
    const cudaError_t status = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
    if (status == cudaSuccess) return true;
    (void)cudaGetLastError();  // not sticky: clear it
    std::fprintf(stderr, "backend/cuda: warning: pinning %zu bytes of host memory failed (%s); transfers stay pageable\n",
                 bytes, cudaGetErrorString(status));
    return false;
  }
  void unpin(void* p) { CUDA_CHECK(cudaHostUnregister(p)); }

  void release() noexcept {
    for (auto& [mark, e] : pending_) cudaEventDestroy(e);
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
    pending_.clear();
    free_.clear();
  }

 private:
  static constexpr unsigned kBlock = 256;
  std::deque<std::pair<uint64_t, cudaEvent_t>> pending_;  // recorded, not yet waited on
  std::vector<cudaEvent_t> free_;
  uint64_t last_mark_ = 0;
};

}  // namespace kern
}  // namespace gpt2

#endif  // BACKEND_CUDA_HOST_TRANSFERS_CUH
