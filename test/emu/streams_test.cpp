// The deferred stream mode (emu/streams.cpp): work on created streams is queued
// and run at synchronisation points in a seeded random interleaving that keeps
// only CUDA's guarantees. A producer/consumer pair on two streams is right with
// cudaStreamWaitEvent and wrong (detected) without it, for several seeds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "emu/control.h"
#include "test/emu/cuda.cuh"

namespace gpt2 {
namespace {

__global__ void add_one_kernel(float* buf, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) buf[i] += 1.0f;
}

__global__ void double_kernel(float* out, const float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2.0f * in[i];
}

// Not commutative: any reordering of the launches changes the result.
__global__ void affine_kernel(float* buf, int n, float k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) buf[i] = buf[i] * 2.0f + k;
}

// Deferred mode for one test; everything queued runs when it ends.
class DeferredStreams {
 public:
  explicit DeferredStreams(uint64_t seed) { emu::set_stream_mode(emu::StreamMode::kDeferred, seed); }
  ~DeferredStreams() { emu::set_stream_mode(emu::StreamMode::kSync); }
};

constexpr int kN = 64;
constexpr int kProducerSteps = 16;  // a missed wait goes unnoticed with probability ~2^-16

// Stream a: zero, then kProducerSteps increments, record; stream b: (wait), out = 2 * buf.
// Returns out[0] after cudaDeviceSynchronize (every element is checked equal).
float producer_consumer(uint64_t seed, bool wait) {
  DeferredStreams mode(seed);
  cudaStream_t a, b;
  cudaEvent_t produced;
  EXPECT_EQ(cudaStreamCreate(&a), cudaSuccess);
  EXPECT_EQ(cudaStreamCreate(&b), cudaSuccess);
  EXPECT_EQ(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming), cudaSuccess);
  float *buf = nullptr, *out = nullptr;
  EXPECT_EQ(cudaMalloc(&buf, kN * sizeof(float)), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&out, kN * sizeof(float)), cudaSuccess);
  EXPECT_EQ(cudaMemsetAsync(buf, 0, kN * sizeof(float), a), cudaSuccess);
  for (int s = 0; s < kProducerSteps; ++s) LAUNCH_KERNEL(add_one_kernel, 1, kN, 0, a, buf, kN);
  EXPECT_EQ(cudaEventRecord(produced, a), cudaSuccess);
  if (wait) {
    EXPECT_EQ(cudaStreamWaitEvent(b, produced, 0), cudaSuccess);
  }
  LAUNCH_KERNEL(double_kernel, 1, kN, 0, b, out, buf, kN);
  // Nothing has run yet: the output is still cudaMalloc's NaN poison.
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_GT(emu::pending_stream_items(), size_t(kProducerSteps));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(emu::pending_stream_items(), 0u);
  std::vector<float> h(kN);
  EXPECT_EQ(cudaMemcpy(h.data(), out, kN * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 1; i < kN; ++i) EXPECT_TRUE(h[i] == h[0] || (std::isnan(h[i]) && std::isnan(h[0]))) << i;
  cudaFree(buf);
  cudaFree(out);
  cudaEventDestroy(produced);
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
  return h[0];
}

TEST(DeferredStreams, ProducerConsumerRightWithEventWaitWrongWithout) {
  const float right = 2.0f * kProducerSteps;
  for (uint64_t seed : {1u, 2u, 3u, 7u, 42u, 1234u}) {
    const float with = producer_consumer(seed, true);
    EXPECT_EQ(with, right) << "seed " << seed;
    const float without = producer_consumer(seed, false);
    std::printf("seed %llu: with the wait %g, without %g (right: %g)\n", static_cast<unsigned long long>(seed),
                static_cast<double>(with), static_cast<double>(without), static_cast<double>(right));
    // The consumer ran before some of the producer's work: a stale (or NaN) input.
    EXPECT_TRUE(std::isnan(without) || without < right) << "seed " << seed << ": the missing wait went unnoticed";
  }
}

TEST(DeferredStreams, StreamOrderIsKeptAcrossInterleavings) {
  for (uint64_t seed : {1u, 5u, 9u}) {
    DeferredStreams mode(seed);
    cudaStream_t s, other;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
    float *x = nullptr, *noise = nullptr;
    ASSERT_EQ(cudaMalloc(&x, kN * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&noise, kN * sizeof(float)), cudaSuccess);
    std::vector<float> start(kN, 1.0f), h(kN);
    ASSERT_EQ(cudaMemcpyAsync(x, start.data(), kN * sizeof(float), cudaMemcpyHostToDevice, s), cudaSuccess);
    start.assign(kN, -5.0f);  // the host source was read at the call (pageable staging)
    float expect = 1.0f;
    ASSERT_EQ(cudaMemsetAsync(noise, 0, kN * sizeof(float), other), cudaSuccess);
    for (int k = 0; k < 12; ++k) {
      LAUNCH_KERNEL(affine_kernel, 1, kN, 0, s, x, kN, static_cast<float>(k));
      LAUNCH_KERNEL(add_one_kernel, 1, kN, 0, other, noise, kN);  // unrelated work to interleave with
      expect = expect * 2.0f + static_cast<float>(k);
    }
    ASSERT_EQ(cudaMemcpyAsync(h.data(), x, kN * sizeof(float), cudaMemcpyDeviceToHost, s), cudaSuccess);
    EXPECT_NE(h[0], expect);  // an asynchronous copy to the host has not run before the sync
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    for (int i = 0; i < kN; ++i) ASSERT_EQ(h[i], expect) << "seed " << seed << ", element " << i;
    // The stream synchronisation ran only what `s` needed.
    EXPECT_GT(emu::pending_stream_items(), 0u);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(emu::pending_stream_items(), 0u);
    EXPECT_EQ(noise[0], 12.0f);
    cudaFree(x);
    cudaFree(noise);
    cudaStreamDestroy(s);
    cudaStreamDestroy(other);
  }
}

TEST(DeferredStreams, SynchronisationPointsRunWhatTheyWaitFor) {
  DeferredStreams mode(3);
  cudaStream_t a, b, nb;
  cudaEvent_t e;
  ASSERT_EQ(cudaStreamCreate(&a), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&b), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  float* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, 4 * kN * sizeof(float)), cudaSuccess);
  float *pa = buf, *pb = buf + kN, *pn = buf + 2 * kN, *after = buf + 3 * kN;
  ASSERT_EQ(cudaMemsetAsync(pa, 0, kN * sizeof(float), a), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(e, a), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(after, 0, kN * sizeof(float), a), cudaSuccess);  // after the record
  ASSERT_EQ(cudaStreamWaitEvent(b, e, 0), cudaSuccess);
  LAUNCH_KERNEL(double_kernel, 1, kN, 0, b, pb, pa, kN);
  ASSERT_EQ(cudaMemsetAsync(pn, 0, kN * sizeof(float), nb), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);  // runs the record's closure (pa), not the rest
  EXPECT_EQ(pa[0], 0.0f);
  EXPECT_TRUE(std::isnan(after[0]) && std::isnan(pb[0]) && std::isnan(pn[0]));
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);  // b and what it waited for
  EXPECT_EQ(pb[0], 0.0f);
  EXPECT_TRUE(std::isnan(after[0]) && std::isnan(pn[0]));
  // A blocking copy (legacy stream) waits for the blocking streams, not the non-blocking one.
  float h = 1.0f;
  ASSERT_EQ(cudaMemcpy(&h, pb, sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(after[0], 0.0f);
  EXPECT_TRUE(std::isnan(pn[0]));
  EXPECT_EQ(emu::pending_stream_items(), 1u);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(pn[0], 0.0f);
  cudaFree(buf);
  cudaEventDestroy(e);
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
  cudaStreamDestroy(nb);
}

TEST(DeferredStreams, SynchronousModeIsTheDefaultAndRunsAtTheCall) {
  if (std::getenv("GPT2_EMU_STREAMS") != nullptr) GTEST_SKIP() << "GPT2_EMU_STREAMS is set";
  EXPECT_EQ(emu::stream_mode(), emu::StreamMode::kSync);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  float* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, kN * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(buf, 0, kN * sizeof(float), s), cudaSuccess);
  LAUNCH_KERNEL(add_one_kernel, 1, kN, 0, s, buf, kN);
  EXPECT_EQ(buf[0], 1.0f);
  EXPECT_EQ(emu::pending_stream_items(), 0u);
  cudaFree(buf);
  cudaStreamDestroy(s);
}

// cudaHostRegister makes program memory pinned: a queued copy from it reads it
// when it runs (a pageable source is read at the call), and cudaFreeHost and
// cudaHostUnregister each refuse the other's memory, as CUDA does.
TEST(DeferredStreams, RegisteredHostMemoryIsReadWhenTheCopyRuns) {
  DeferredStreams mode(3);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, kN * sizeof(float)), cudaSuccess);
  std::vector<float> host(kN, 1.0f), back(kN);
  ASSERT_EQ(cudaHostRegister(host.data(), kN * sizeof(float), cudaHostRegisterDefault), cudaSuccess);
  EXPECT_EQ(cudaHostRegister(host.data() + 8, 8 * sizeof(float), cudaHostRegisterDefault),
            cudaErrorHostMemoryAlreadyRegistered);
  ASSERT_EQ(cudaMemcpyAsync(dev, host.data(), kN * sizeof(float), cudaMemcpyHostToDevice, s), cudaSuccess);
  host.assign(kN, 7.0f);  // before the copy ran: a DMA reads the new contents
  ASSERT_EQ(cudaMemcpyAsync(back.data(), dev, kN * sizeof(float), cudaMemcpyDeviceToHost, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(back[0], 7.0f);
  EXPECT_EQ(back[kN - 1], 7.0f);
  EXPECT_EQ(cudaFreeHost(host.data()), cudaErrorInvalidValue);  // registered, not cudaMallocHost's
  ASSERT_EQ(cudaHostUnregister(host.data()), cudaSuccess);
  EXPECT_EQ(cudaHostUnregister(host.data()), cudaErrorHostMemoryNotRegistered);
  void* block = nullptr;
  ASSERT_EQ(cudaMallocHost(&block, 64), cudaSuccess);
  EXPECT_EQ(cudaHostUnregister(block), cudaErrorHostMemoryNotRegistered);  // cudaMallocHost's, not registered
  EXPECT_EQ(cudaFreeHost(block), cudaSuccess);
  cudaGetLastError();
  cudaFree(dev);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace gpt2
