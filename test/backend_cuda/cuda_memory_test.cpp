// The CUDA backend's device-memory query (Backend::device_memory: what the
// trainer's --memory-check holds a run against) and its allocation failures,
// which name their size and what the buffer was for. Under the emulator the
// query answers GPT2_TEST_DEVICE_MEMORY=FREE[,TOTAL] when it is set
// (docs/emulator.md); on a GPU (the same source in backend_cuda_gpu_test) the
// variable means nothing and the real device's numbers are checked for sense.
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "backend/cuda/cuda_backend.h"

namespace gpt2 {
namespace {

// The emulated build: its --tf32 auto is off (cuda_backend.h).
bool emulated() { return !cuda_tf32_default(); }

TEST(CudaMemory, DeviceMemoryOfTheBackendsGpu) {
  EXPECT_FALSE(make_cpu_backend(1)->device_memory().present);  // the CPU backend: host memory only
  auto cuda = make_cuda_backend(0);
  const DeviceMemory m = cuda->device_memory();
  EXPECT_TRUE(m.present);
  EXPECT_GT(m.total_bytes, 0u);
  EXPECT_LE(m.free_bytes, m.total_bytes);
  EXPECT_EQ(m.device.rfind("GPU 0 (", 0), 0u) << m.device;
  if (!emulated()) return;
  // the emulated device: what is allocated is exactly what is no longer free
  const Tensor t = cuda->alloc(1000, BufferRole::kOptimizer);
  EXPECT_EQ(m.free_bytes - cuda->device_memory().free_bytes, 4000u);
  cuda->free(t);
  EXPECT_EQ(cuda->device_memory().free_bytes, m.free_bytes);
}

TEST(CudaMemory, TestHookStandsForTheMeasurement) {
  if (!emulated()) GTEST_SKIP() << "GPT2_TEST_DEVICE_MEMORY is the emulator's";
  auto cuda = make_cuda_backend(0);
  const size_t device_total = cuda->device_memory().total_bytes;
  setenv("GPT2_TEST_DEVICE_MEMORY", "1000,5000", 1);
  DeviceMemory m = cuda->device_memory();
  EXPECT_EQ(m.free_bytes, 1000u);
  EXPECT_EQ(m.total_bytes, 5000u);
  const Tensor t = cuda->alloc(1000, BufferRole::kParams);  // allocations do not change what it says
  EXPECT_EQ(cuda->device_memory().free_bytes, 1000u);
  cuda->free(t);
  setenv("GPT2_TEST_DEVICE_MEMORY", "7", 1);  // TOTAL: the device's own
  m = cuda->device_memory();
  EXPECT_EQ(m.free_bytes, 7u);
  EXPECT_EQ(m.total_bytes, device_total);
  for (const char* bad : {"lots", "", "5,4", "1,", "-1", "99999999999999999999999"}) {
    setenv("GPT2_TEST_DEVICE_MEMORY", bad, 1);
    EXPECT_THROW(cuda->device_memory(), std::runtime_error) << "'" << bad << "'";
  }
  unsetenv("GPT2_TEST_DEVICE_MEMORY");
  EXPECT_EQ(cuda->device_memory().total_bytes, device_total);
}

// A buffer no GPU can hold: the error names the bytes, the role and the device,
// and leaves no error behind for the next call.
TEST(CudaMemory, AllocationFailureNamesSizeAndPurpose) {
  auto cuda = make_cuda_backend(0);
  const size_t numel = size_t{1} << 48;  // 1 PiB of fp32
  try {
    cuda->alloc(numel, BufferRole::kActivations);
    ADD_FAILURE() << "a 1 PiB cudaMalloc succeeded";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("backend/cuda: alloc: cudaMalloc of " + std::to_string(numel * 4) +
                        " bytes for activations failed on GPU 0: "),
              std::string::npos)
        << what;
    EXPECT_NE(what.find(" bytes free of "), std::string::npos) << what;
    EXPECT_NE(what.find("--dry-run 1 prints what a run needs"), std::string::npos) << what;
  }
  const Tensor t = cuda->alloc(64, BufferRole::kGrads);
  cuda->zero(t);
  cuda->synchronize();
  cuda->free(t);
}

}  // namespace
}  // namespace gpt2
