// <cooperative_groups.h> in the emulated build (emu/include/ is first on its
// include path): the toolkit's header is device code for nvcc only, so the
// emulator's subset (emu/cooperative_groups.h) stands in for it.
#ifndef EMU_INCLUDE_COOPERATIVE_GROUPS_H
#define EMU_INCLUDE_COOPERATIVE_GROUPS_H

#include <cuda_runtime.h>

#include "emu/cooperative_groups.h"

#endif  // EMU_INCLUDE_COOPERATIVE_GROUPS_H
