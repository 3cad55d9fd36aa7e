// <cuda_runtime.h> for CUDA sources compiled by g++ against the emulator: the
// emulated build puts emu/include/ first on the include path (EMU_KERNEL_INC in
// emu/module.mk), so production code names only CUDA's own headers and gets
//   - the toolkit's host header (types, cudart and its C++ overloads, which
//     libemu implements), by #include_next, and
//   - the emulator's device surface: built-in index variables, barriers, warp
//     intrinsics, atomics and math (emu/device.h), and the PTX instructions that
//     backend/cuda/mma.cuh wraps (emu/ptx.h).
// nvcc never sees this directory. Host-only code of the emulated build keeps the
// toolkit's header (EMU_CUDA_INC), without the device macros.
#ifndef EMU_INCLUDE_CUDA_RUNTIME_H
#define EMU_INCLUDE_CUDA_RUNTIME_H

#ifdef __CUDACC__
#error "emu/include/ is the emulated build's include directory; nvcc uses the toolkit's headers"
#endif

#include_next <cuda_runtime.h>

#include "emu/device.h"
#include "emu/ptx.h"

#endif  // EMU_INCLUDE_CUDA_RUNTIME_H
