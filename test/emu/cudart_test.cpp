// cudart subset of the emulator: fake device, memory, streams, events, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "emu/control.h"
#include "test/emu/cuda.cuh"

namespace gpt2 {
namespace {

__global__ void fill_kernel(float* out, int n, float value) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}

TEST(Cudart, DefaultAndConfiguredDeviceProperties) {
  int count = 0, device = -1;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 1);
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(device, 0);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);

  emu::DeviceConfig saved = emu::device_config();
  emu::DeviceConfig config = saved;
  config.name = "test H100";
  config.sm_count = 132;
  config.major = 9;
  config.smem_per_block_optin = 227 * 1024;
  emu::set_device_config(config);
  cudaDeviceProp prop;
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_STREQ(prop.name, "test H100");
  EXPECT_EQ(prop.multiProcessorCount, 132);
  EXPECT_EQ(prop.major, 9);
  EXPECT_EQ(prop.sharedMemPerBlockOptin, 227u * 1024u);
  EXPECT_EQ(prop.warpSize, 32);
  int value = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&value, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), cudaSuccess);
  EXPECT_EQ(value, 227 * 1024);
  ASSERT_EQ(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  EXPECT_EQ(value, 132);
  emu::set_device_config(saved);
}

TEST(Cudart, FreshAllocationsArePoisonedAndTracked) {
  size_t free0 = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 1000 * sizeof(float)), cudaSuccess);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d) % 256, 0u);
  size_t free1 = 0;
  ASSERT_EQ(cudaMemGetInfo(&free1, &total), cudaSuccess);
  EXPECT_EQ(free0 - free1, 4000u);
  std::vector<float> h(1000);
  ASSERT_EQ(cudaMemcpy(h.data(), d, 4000, cudaMemcpyDeviceToHost), cudaSuccess);
  for (float x : h) ASSERT_TRUE(std::isnan(x));
  ASSERT_EQ(cudaMemset(d, 0, 4000), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(h.data(), d, 4000, cudaMemcpyDeviceToHost), cudaSuccess);
  for (float x : h) ASSERT_EQ(x, 0.0f);
  // copies that overrun the allocation are rejected like on a GPU
  EXPECT_EQ(cudaMemcpy(d + 1, h.data(), 4000, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemset(d, 0, 4001), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  ASSERT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaErrorInvalidValue);  // double free
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  ASSERT_EQ(cudaMemGetInfo(&free1, &total), cudaSuccess);
  EXPECT_EQ(free1, free0);
}

// GPT2_TEST_DEVICE_MEMORY=FREE[,TOTAL]: cudaMemGetInfo reports those numbers
// whatever is allocated (a GPU others fill, for --memory-check's tests), while
// cudaMalloc keeps the device's limit; a malformed value is an error.
TEST(Cudart, MemGetInfoTestHook) {
  size_t free0 = 0, total0 = 0, free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free0, &total0), cudaSuccess);
  setenv("GPT2_TEST_DEVICE_MEMORY", "4096,1048576", 1);
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  EXPECT_EQ(free_bytes, 4096u);
  EXPECT_EQ(total, 1048576u);
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 1 << 20), cudaSuccess);  // more than it says is free
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  EXPECT_EQ(free_bytes, 4096u);
  ASSERT_EQ(cudaFree(d), cudaSuccess);
  setenv("GPT2_TEST_DEVICE_MEMORY", "123", 1);
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  EXPECT_EQ(free_bytes, 123u);
  EXPECT_EQ(total, total0);
  for (const char* bad : {"x", "", "2,1", "1,", ",5", "1 2", "18446744073709551616"}) {
    setenv("GPT2_TEST_DEVICE_MEMORY", bad, 1);
    EXPECT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaErrorInvalidValue) << "'" << bad << "'";
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  }
  unsetenv("GPT2_TEST_DEVICE_MEMORY");
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  EXPECT_EQ(free_bytes, free0);
  EXPECT_EQ(total, total0);
}

TEST(Cudart, PinnedMemoryAndAsyncCopiesOnStreams) {
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 256 * sizeof(float)), cudaSuccess);
  for (int i = 0; i < 256; ++i) pinned[i] = static_cast<float>(i);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 256 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(d, pinned, 1024, cudaMemcpyHostToDevice, stream), cudaSuccess);
  LAUNCH_KERNEL(fill_kernel, 1, 128, 0, stream, d, 100, -1.0f);
  ASSERT_EQ(cudaMemsetAsync(d + 200, 0, 56 * sizeof(float), stream), cudaSuccess);
  std::vector<float> h(256);
  ASSERT_EQ(cudaMemcpyAsync(h.data(), d, 1024, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(h[i], i < 100 ? -1.0f : (i < 200 ? static_cast<float>(i) : 0.0f)) << i;
  ASSERT_EQ(cudaFree(d), cudaSuccess);
  void* async_block = nullptr;
  ASSERT_EQ(cudaMallocAsync(&async_block, 100, stream), cudaSuccess);
  EXPECT_TRUE(std::isnan(*static_cast<float*>(async_block)));
  ASSERT_EQ(cudaFreeAsync(async_block, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaErrorInvalidResourceHandle);
  ASSERT_EQ(cudaFreeHost(pinned), cudaSuccess);
  int not_pinned = 0;
  EXPECT_EQ(cudaFreeHost(&not_pinned), cudaErrorInvalidValue);
  cudaGetLastError();
}

TEST(Cudart, EventsMeasureElapsedTime) {
  cudaEvent_t start, stop, untimed;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&stop), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming), cudaSuccess);
  float ms = -1;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, stop), cudaErrorInvalidResourceHandle);  // not recorded yet
  ASSERT_EQ(cudaEventRecord(start, 0), cudaSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(cudaEventRecord(stop, 0), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(untimed, 0), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
  ASSERT_EQ(cudaEventElapsedTime(&ms, start, stop), cudaSuccess);
  EXPECT_GE(ms, 19.0f);
  EXPECT_LT(ms, 2000.0f);
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, untimed), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  EXPECT_EQ(cudaEventDestroy(start), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(stop), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(untimed), cudaSuccess);
}

TEST(Cudart, LaunchConfigurationErrorsAreReportedAtTheLaunch) {
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 64 * sizeof(float)), cudaSuccess);
  try {
    LAUNCH_KERNEL(fill_kernel, 1, 2048, 0, 0, d, 64, 1.0f);
    ADD_FAILURE() << "a block of 2048 threads must be rejected";
  } catch (const std::runtime_error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("invalid configuration argument"), std::string::npos) << what;
    EXPECT_NE(what.find("cudart_test.cpp:"), std::string::npos) << what;
    EXPECT_NE(what.find("fill_kernel"), std::string::npos) << what;
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_THROW(LAUNCH_KERNEL(fill_kernel, dim3(1, 70000), 32, 0, 0, d, 64, 1.0f), std::runtime_error);
  EXPECT_THROW(LAUNCH_KERNEL(fill_kernel, 0, 32, 0, 0, d, 64, 1.0f), std::runtime_error);
  // over the opt-in limit, cudaFuncSetAttribute itself fails
  EXPECT_EQ(cudaFuncSetAttribute(fill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 1 << 20),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  ASSERT_EQ(cudaFree(d), cudaSuccess);
}

TEST(Cudart, DeviceBuiltinsOutsideAKernelThrow) {
  EXPECT_THROW((void)threadIdx.x, std::runtime_error);
  EXPECT_THROW(__syncthreads(), std::runtime_error);
}

TEST(Cudart, OccupancyAndFunctionAttributes) {
  int blocks = 0;
  ASSERT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fill_kernel, 256, 0), cudaSuccess);
  EXPECT_EQ(blocks, emu::device_config().max_threads_per_sm / 256);
  ASSERT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fill_kernel, 64, 60 * 1024), cudaSuccess);
  EXPECT_EQ(blocks, static_cast<int>(emu::device_config().smem_per_sm / (60 * 1024)));
  cudaFuncAttributes attr;
  ASSERT_EQ(cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(fill_kernel)), cudaSuccess);
  EXPECT_EQ(attr.maxThreadsPerBlock, 1024);
}

TEST(Cudart, ErrorStrings) {
  EXPECT_STREQ(cudaGetErrorString(cudaSuccess), "no error");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation");
}

}  // namespace
}  // namespace gpt2
