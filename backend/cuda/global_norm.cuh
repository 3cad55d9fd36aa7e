// Sum of squares of a gradient vector, for the global norm (clipping).
// Deterministic for a given n, whatever the GPU or the thread run order:
//   stage 1  a fixed grid (the block count depends only on n, at most 1024
//            blocks of 256 threads) walks the vector with a grid stride; each
//            thread accumulates x^2 in fp64, the block reduces with a fixed
//            tree and writes one fp64 partial per block
//   stage 2  one block adds the partials in a fixed order (thread i takes
//            partials i, i+1024, ..., then the same tree) and writes the total
// No atomics, so repeated calls give the same bits. Traffic: read n floats.
#ifndef BACKEND_CUDA_GLOBAL_NORM_CUH
#define BACKEND_CUDA_GLOBAL_NORM_CUH

#include "backend/cuda/common.cuh"

namespace gpt2 {
namespace kern {

constexpr int kNormBlock = 256;
constexpr int kNormMaxBlocks = 1024;
constexpr int kNormFinishBlock = 1024;

inline int global_norm_blocks(size_t n) {
  constexpr size_t kPerBlock = size_t{kNormBlock} * 8;  // >= 8 elements per thread
  const size_t wanted = (n + kPerBlock - 1) / kPerBlock;
  return wanted < 1 ? 1 : (wanted > kNormMaxBlocks ? kNormMaxBlocks : static_cast<int>(wanted));
}

template <class T>
__global__ void sum_squares_partials_kernel(double* partials, const T* x, size_t n) {
  __shared__ double warp_partials[kWarpSize];
  double acc = 0.0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double v = static_cast<double>(to_float(x[i]));
    acc += v * v;
  }
  acc = block_sum(acc, warp_partials);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void sum_partials_kernel(double* out, const double* partials, int count) {
  __shared__ double warp_partials[kWarpSize];
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  acc = block_sum(acc, warp_partials);
  if (threadIdx.x == 0) *out = acc;
}

// The clip scale from the sum of squares, clip[1] from clip[0]: backend.h's
// clip_scale_value, the same fp64 operations (sqrt and division are correctly
// rounded on the device too), so the device and the host agree to the bit.
__global__ void clip_scale_kernel(double* clip, float max_norm) {
  const double norm = sqrt(clip[0]);
  double scale = 1.0;
  if (!isfinite(norm))
    scale = nan("");
  else if (max_norm > 0.0f && norm > max_norm)
    scale = static_cast<float>(max_norm / norm);
  clip[1] = scale;
}

// partials: global_norm_blocks(n) doubles of scratch; the total lands in *out.
template <class T>
void sum_squares(double* out, double* partials, const T* x, size_t n, cudaStream_t stream) {
  const int blocks = global_norm_blocks(n);
  auto partials_kernel = sum_squares_partials_kernel<T>;
  LAUNCH_KERNEL(partials_kernel, blocks, kNormBlock, 0, stream, partials, x, n);
  LAUNCH_KERNEL(sum_partials_kernel, 1, kNormFinishBlock, 0, stream, out, partials, blocks);
}

}  // namespace kern
}  // namespace gpt2

#endif  // BACKEND_CUDA_GLOBAL_NORM_CUH
