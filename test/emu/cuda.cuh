// The one include of the emulator tests' CUDA sources (test/emu/ kernels): CUDA's headers by their own names plus the backend's launch
// macros (backend/cuda/launch.cuh: LAUNCH_KERNEL, DYNAMIC_SHARED, CUDA_CHECK), so
// these kernels are written and launched exactly as production kernels are.
//
//   nvcc  -> the toolkit's headers
//   g++   -> emu/include/ comes first on the include path (EMU_KERNEL_INC in
//            emu/module.mk): <cuda_runtime.h> is the toolkit's host header plus the
//            emulator's device surface (emu/device.h, emu/ptx.h); <cooperative_groups.h>
//            and <mma.h> are emu/cooperative_groups.h and emu/wmma.h.
// Production code (backend/cuda/) includes the same CUDA headers and launch.cuh
// itself, never this file. See docs/emulator.md for the supported surface.
#ifndef TEST_EMU_CUDA_CUH
#define TEST_EMU_CUDA_CUH

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <mma.h>

#include "backend/cuda/launch.cuh"

#endif  // TEST_EMU_CUDA_CUH
