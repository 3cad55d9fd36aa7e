// A planted 32-bit index overflow for test/backend_cuda/index_width_test.sh, which
// expects clang-tidy to flag exactly the PLANTED line and not its twin. At d48,
// B=64, T=1024 the logits hold B*T*Vp = 3.3e9 elements: an int product wraps.
#include <cstddef>

#include <cuda_runtime.h>

__global__ void planted_logits_row_kernel(float* logits, const int* targets, int T_, int Vp) {
  const int b = blockIdx.y, t = blockIdx.x;
  float* row = logits + (b * T_ + t) * Vp;  // PLANTED
  row[targets[b * T_ + t]] = 0.0f;
}

__global__ void widened_logits_row_kernel(float* logits, const int* targets, int T_, int Vp) {
  const int b = blockIdx.y, t = blockIdx.x;
  float* row = logits + static_cast<size_t>(b * T_ + t) * Vp;  // TWIN: widened before the product
  row[targets[b * T_ + t]] = 0.0f;
}
