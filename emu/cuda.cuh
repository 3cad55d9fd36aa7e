// The one include for CUDA sources (backend/cuda/*.cuh, test kernels, CUDA host code).
//
//   nvcc  -> the toolkit headers; LAUNCH_KERNEL is kernel<<<grid, block, smem, stream>>>(args)
//   g++   -> the same toolkit host headers (types, bf16/fp16, cudart/cuBLAS declarations)
//            plus the emulator (emu/device.h, emu/cooperative_groups.h, emu/wmma.h,
//            emu/ptx.h: the PTX instructions behind backend/cuda/mma.cuh);
//            LAUNCH_KERNEL runs the grid on CPU fibers before it returns.
//
// Write kernels in ordinary CUDA C++ and launch them only through LAUNCH_KERNEL,
// the single place where launch errors are checked (throws std::runtime_error
// naming file:line and the kernel). Declare dynamic shared memory with
// DYNAMIC_SHARED(type, name); static __shared__ arrays are written as usual.
// See docs/emulator.md for the supported surface.
#ifndef EMU_CUDA_CUH
#define EMU_CUDA_CUH

#include <stdexcept>
#include <string>

#if defined(__CUDACC__)

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <mma.h>

namespace gpt2 {
inline void check_launch(cudaError_t status, const char* kernel_name, const char* file, int line) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": launch of " + kernel_name +
                             " failed: " + cudaGetErrorString(status));
}
}  // namespace gpt2

#define LAUNCH_KERNEL(kernel, grid, block, smem, stream, ...)                           \
  do {                                                                                  \
    kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__);                         \
    ::gpt2::check_launch(cudaGetLastError(), #kernel, __FILE__, __LINE__);              \
  } while (0)

// All extern __shared__ arrays alias one buffer; 16-byte alignment covers float4/int4.
#define DYNAMIC_SHARED(type, name)                                                      \
  extern __shared__ __align__(16) unsigned char gpt2_dynamic_smem_bytes_[];            \
  type* name = reinterpret_cast<type*>(gpt2_dynamic_smem_bytes_)

// Vector helpers state the alignment they rely on; the hardware checks it (a fault).
#define GPT2_CHECK_ALIGNED(ptr, bytes, what) static_cast<void>(0)

#define GPT2_EMULATED 0

#else  // emulation

#include "emu/device.h"
#include "emu/cooperative_groups.h"
#include "emu/wmma.h"
#include "emu/ptx.h"

namespace gpt2 {
using emu::check_launch;
}  // namespace gpt2

#define LAUNCH_KERNEL(kernel, grid, block, smem, stream, ...)                                                \
  do {                                                                                                       \
    cudaError_t gpt2_launch_status_ =                                                                        \
        ::gpt2::emu::launch(kernel, dim3(grid), dim3(block), (smem), (stream), #kernel, ##__VA_ARGS__);      \
    ::gpt2::check_launch(gpt2_launch_status_, #kernel, __FILE__, __LINE__);                                  \
  } while (0)

#define DYNAMIC_SHARED(type, name) type* name = reinterpret_cast<type*>(::gpt2::emu::dynamic_shared_memory())

// In emulation a misaligned vector access faults the launch, as on a GPU, naming the address.
#define GPT2_CHECK_ALIGNED(ptr, bytes, what)                                                    \
  (reinterpret_cast<uintptr_t>(ptr) % (bytes) == 0 ? static_cast<void>(0)                     \
                                                  : ::gpt2::emu::misaligned_access((ptr), (bytes), (what)))

#define GPT2_EMULATED 1

#endif

// Checks a cudart call: CUDA_CHECK(cudaMalloc(&p, n));
#define CUDA_CHECK(call)                                                                                  \
  do {                                                                                                    \
    cudaError_t gpt2_status_ = (call);                                                                    \
    if (gpt2_status_ != cudaSuccess)                                                                      \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " #call ": " + \
                               cudaGetErrorString(gpt2_status_));                                         \
  } while (0)

#endif  // EMU_CUDA_CUH
