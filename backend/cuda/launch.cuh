// How the CUDA backend launches kernels and checks CUDA calls: the one place in
// backend/cuda/ that tells the toolkit (nvcc) from the emulator (g++ with
// emu/include/ first on the include path, whose <cuda_runtime.h> brings the
// emulator's device surface and defines GPT2_EMU_CUDA).
//
//   LAUNCH_KERNEL(kernel, grid, block, smem, stream, args...)
//       nvcc: kernel<<<grid, block, smem, stream>>>(args); g++: the emulator runs
//       the grid on CPU fibers before it returns. Either way a failed launch
//       throws std::runtime_error naming file:line and the kernel.
//   DYNAMIC_SHARED(type, name)      the block's dynamic shared memory as type*
//   GPT2_CHECK_ALIGNED(p, bytes, w) a misaligned vector access faults the launch
//                                   in emulation (the hardware checks it on a GPU)
//   GPT2_EMULATED                   1 in the emulated build, else 0
//   CUDA_CHECK(call)                throws on a cudart error
// Kernels are ordinary CUDA C++; launch them only through LAUNCH_KERNEL.
// docs/emulator.md lists the emulated surface.
#ifndef BACKEND_CUDA_LAUNCH_CUH
#define BACKEND_CUDA_LAUNCH_CUH

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#if defined(__CUDACC__)

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

#define GPT2_CHECK_ALIGNED(ptr, bytes, what) static_cast<void>(0)

#define GPT2_EMULATED 0

#elif defined(GPT2_EMU_CUDA)

namespace gpt2 {
using emu::check_launch;  // also names the emulated kernel's fault, if any
}  // namespace gpt2

#define LAUNCH_KERNEL(kernel, grid, block, smem, stream, ...)                                                \
  do {                                                                                                       \
    cudaError_t gpt2_launch_status_ =                                                                        \
        ::gpt2::emu::launch(kernel, dim3(grid), dim3(block), (smem), (stream), #kernel, ##__VA_ARGS__);      \
    ::gpt2::check_launch(gpt2_launch_status_, #kernel, __FILE__, __LINE__);                                  \
  } while (0)

#define DYNAMIC_SHARED(type, name) type* name = reinterpret_cast<type*>(::gpt2::emu::dynamic_shared_memory())

#define GPT2_CHECK_ALIGNED(ptr, bytes, what)                                                    \
  (reinterpret_cast<uintptr_t>(ptr) % (bytes) == 0 ? static_cast<void>(0)                     \
                                                  : ::gpt2::emu::misaligned_access((ptr), (bytes), (what)))

#define GPT2_EMULATED 1

#else
#error "CUDA sources compile with nvcc, or with g++ and emu/include/ first on the include path (EMU_KERNEL_INC)"
#endif

// Checks a cudart call: CUDA_CHECK(cudaMalloc(&p, n));
#define CUDA_CHECK(call)                                                                                  \
  do {                                                                                                    \
    cudaError_t gpt2_status_ = (call);                                                                    \
    if (gpt2_status_ != cudaSuccess)                                                                      \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " #call ": " + \
                               cudaGetErrorString(gpt2_status_));                                         \
  } while (0)

#endif  // BACKEND_CUDA_LAUNCH_CUH
