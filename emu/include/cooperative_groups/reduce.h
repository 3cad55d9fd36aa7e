// <cooperative_groups/reduce.h> in the emulated build: cg::reduce and its
// operators are part of the emulator's cooperative groups (emu/cooperative_groups.h).
#ifndef EMU_INCLUDE_COOPERATIVE_GROUPS_REDUCE_H
#define EMU_INCLUDE_COOPERATIVE_GROUPS_REDUCE_H

#include <cooperative_groups.h>

#endif  // EMU_INCLUDE_COOPERATIVE_GROUPS_REDUCE_H
