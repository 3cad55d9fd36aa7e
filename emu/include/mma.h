// <mma.h> (nvcuda::wmma) in the emulated build (emu/include/ is first on its
// include path): the emulator's tensor-core tiles (emu/wmma.h) stand in for the
// toolkit's nvcc-only header.
#ifndef EMU_INCLUDE_MMA_H
#define EMU_INCLUDE_MMA_H

#include <cuda_runtime.h>

#include "emu/wmma.h"

#endif  // EMU_INCLUDE_MMA_H
