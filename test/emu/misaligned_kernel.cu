// A 128-bit load from an address 8 bytes past a 16-byte boundary, the classic
// bug of vectorised kernels (odd row strides, shard offsets). On a GPU it is a
// fatal "misaligned address"; a CPU runs it. Built with ASan + UBSan's alignment
// check by emu/module.mk; test/emu/misaligned_access_test.sh expects:
//   raw OFFSET     UBSan reports the load below (file:line) unless OFFSET is a multiple of 4 floats
//   helper OFFSET  kern::load128 makes the launch fail, naming the kernel and the address
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "test/emu/cuda.cuh"
#include "backend/cuda/pack128.cuh"

namespace {

__global__ void raw_float4_sum_kernel(const float* in, float* out) {
  float4 v = *reinterpret_cast<const float4*>(in);  // RAW_LOAD
  out[0] = v.x + v.y + v.z + v.w;
}

__global__ void helper_pack_sum_kernel(const float* in, float* out) {
  gpt2::kern::Pack128<float> v = gpt2::kern::load128(in);
  out[0] = v[0] + v[1] + v[2] + v[3];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[1], "raw") != 0 && std::strcmp(argv[1], "helper") != 0)) {
    std::fprintf(stderr, "usage: %s raw|helper OFFSET_FLOATS\n", argv[0]);
    return 2;
  }
  try {
    const int offset = std::atoi(argv[2]);
    std::vector<float> host = {1, 2, 3, 4, 5, 6, 7, 8};
    float *in = nullptr, *out = nullptr;
    CUDA_CHECK(cudaMalloc(&in, host.size() * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&out, sizeof(float)));
    CUDA_CHECK(cudaMemcpy(in, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    if (std::strcmp(argv[1], "raw") == 0) LAUNCH_KERNEL(raw_float4_sum_kernel, 1, 1, 0, 0, in + offset, out);
    else LAUNCH_KERNEL(helper_pack_sum_kernel, 1, 1, 0, 0, in + offset, out);
    float sum = 0;
    CUDA_CHECK(cudaMemcpy(&sum, out, sizeof(float), cudaMemcpyDeviceToHost));
    std::printf("sum of floats %d..%d: %g\n", offset, offset + 3, sum);
    CUDA_CHECK(cudaFree(in));
    CUDA_CHECK(cudaFree(out));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
