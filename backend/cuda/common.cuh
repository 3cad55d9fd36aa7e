// Helpers shared by the kernel files: error checks for cuBLAS, launch-size
// arithmetic and the warp / block reductions every row-wise kernel uses.
// Like every file in backend/cuda/ it includes only CUDA's own headers, plus
// backend/cuda/launch.cuh for LAUNCH_KERNEL and CUDA_CHECK; the emulated build
// maps those headers to the emulator by its include path (emu/include/).
//
// Reductions are written so that the result does not depend on the order in
// which threads run: a warp reduction is a fixed butterfly of __shfl_xor_sync,
// a block reduction writes one partial per warp to shared memory and every
// warp then reduces the same partials in the same order, so all threads get
// the same bits (no separate broadcast step, no atomics).
#ifndef BACKEND_CUDA_COMMON_CUH
#define BACKEND_CUDA_COMMON_CUH

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublasLt.h>
#include <cublas_v2.h>

#include "backend/cuda/launch.cuh"

#define CUBLAS_CHECK(call)                                                                   \
  do {                                                                                       \
    cublasStatus_t gpt2_cublas_status_ = (call);                                             \
    if (gpt2_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                        \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) +      \
                               ": " #call ": " + cublasGetStatusString(gpt2_cublas_status_)); \
  } while (0)

namespace gpt2 {
namespace kern {

// Storage types: T is float or __nv_bfloat16 (params, grads, activations);
// arithmetic is always fp32. from_float rounds to nearest even.
__host__ __device__ inline float to_float(float x) { return x; }
__host__ __device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T>
__host__ __device__ inline T from_float(float x);
template <>
__host__ __device__ inline float from_float<float>(float x) { return x; }
template <>
__host__ __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}
template <class T>
inline cudaDataType_t cuda_data_type();
template <>
inline cudaDataType_t cuda_data_type<float>() { return CUDA_R_32F; }
template <>
inline cudaDataType_t cuda_data_type<__nv_bfloat16>() { return CUDA_R_16BF; }

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;

inline unsigned ceil_div(size_t a, size_t b) { return static_cast<unsigned>((a + b - 1) / b); }

template <class T>
__device__ inline T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// NaN inputs are skipped by the comparison; callers that must propagate NaN do
// it through a sum (exp(NaN) poisons it).
__device__ inline float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float o = __shfl_xor_sync(kFullMask, v, offset);
    v = o > v ? o : v;
  }
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024).
// `partials` is a shared array of 32 elements; it may be reused by the next
// call (the leading barrier protects the previous readers).
template <class T>
__device__ inline T block_sum(T v, T* partials) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) partials[warp] = v;
  __syncthreads();
  T r = lane < num_warps ? partials[lane] : T(0);
  return warp_sum(r);
}

__device__ inline float block_max(float v, float* partials) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) partials[warp] = v;
  __syncthreads();
  float r = lane < num_warps ? partials[lane] : -INFINITY;
  return warp_max(r);
}

}  // namespace kern
}  // namespace gpt2

#endif  // BACKEND_CUDA_COMMON_CUH
