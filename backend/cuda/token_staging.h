// Token uploads without a host wait: host ids are copied into one of a ring of
// pinned (cudaMallocHost) buffers and sent by cudaMemcpyAsync on the backend's
// stream, which reads pinned memory when the copy runs (DMA), so the caller may
// reuse its array at once and the stream is never drained for an upload. A
// slot is refilled only after its previous copy has run: cudaEventSynchronize
// on the event recorded behind that copy, kSlots uploads ago (a micro-step
// uploads inputs and targets: four slots cover the next micro-step's uploads
// while the current one's may still be queued). Compiled by nvcc and, for
// tests, against the emulator, whose deferred stream mode runs a pinned copy
// late as a GPU does (GPT2_TEST_DROP_STAGING_WAIT=1 leaves the wait out:
// test/backend_cuda/cuda_staging_test.cpp must then see wrong tokens).
#ifndef BACKEND_CUDA_TOKEN_STAGING_H
#define BACKEND_CUDA_TOKEN_STAGING_H

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/common.cuh"
#include "util/test_hook.h"

namespace gpt2 {
namespace kern {

class TokenStaging {
 public:
  static constexpr int kSlots = 4;

  TokenStaging()
      : drop_wait_(test_hook_drops_wait("GPT2_TEST_DROP_STAGING_WAIT", "1", "", "the wait before a token slot is refilled")) {}
  ~TokenStaging() { release(); }
  TokenStaging(const TokenStaging&) = delete;
  TokenStaging& operator=(const TokenStaging&) = delete;

  // dst: count int32 on the device; src: count host ids (reusable on return).
  void upload(void* dst, const int32_t* src, size_t count, cudaStream_t stream) {
    if (count == 0) return;
    Slot& s = slots_[static_cast<size_t>(next_)];
    next_ = (next_ + 1) % kSlots;
    if (s.done != nullptr && !drop_wait_) CUDA_CHECK(cudaEventSynchronize(s.done));  // its last copy has run
    if (s.capacity < count) {
      if (s.host != nullptr) CUDA_CHECK(cudaFreeHost(s.host));
      s.host = nullptr;
      s.capacity = 0;
      CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&s.host), count * sizeof(int32_t)));
      s.capacity = count;
    }
    if (s.done == nullptr) CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
    std::memcpy(s.host, src, count * sizeof(int32_t));
    CUDA_CHECK(cudaMemcpyAsync(dst, s.host, count * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaEventRecord(s.done, stream));
  }

  // Frees the pinned buffers (cudaFreeHost waits for queued copies).
  void release() {
    for (Slot& s : slots_) {
      if (s.host != nullptr) cudaFreeHost(s.host);
      if (s.done != nullptr) cudaEventDestroy(s.done);
      s = Slot{};
    }
  }

 private:
  struct Slot {
    int32_t* host = nullptr;
    size_t capacity = 0;  // int32 elements
    cudaEvent_t done = nullptr;
  };
  std::array<Slot, kSlots> slots_{};
  int next_ = 0;
  bool drop_wait_ = false;  // test hook
};

}  // namespace kern
}  // namespace gpt2

#endif  // BACKEND_CUDA_TOKEN_STAGING_H
