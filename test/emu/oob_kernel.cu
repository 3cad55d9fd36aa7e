// A kernel with an off-by-one bound: the last thread writes one element past its
// cudaMalloc allocation. Built with ASan by emu/module.mk; test/emu/asan_oob_test.sh
// expects AddressSanitizer to report the overflow at the store below (file:line).
#include <cstdio>
#include <stdexcept>

#include "test/emu/cuda.cuh"

namespace {

__global__ void scale_off_by_one_kernel(float* data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) data[i] = 2.0f * static_cast<float>(i);  // OOB_STORE: should be i < n
}

}  // namespace

int main() {
  try {
    const int n = 100;
    float* data = nullptr;
    CUDA_CHECK(cudaMalloc(&data, n * sizeof(float)));
    LAUNCH_KERNEL(scale_off_by_one_kernel, 1, 128, 0, 0, data, n);
    CUDA_CHECK(cudaFree(data));
    std::printf("no out-of-bounds access detected\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
