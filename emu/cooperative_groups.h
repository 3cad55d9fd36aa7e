// Emulated cooperative groups (g++ build only): the subset the project uses --
// this_thread_block, tiled_partition<N> (N a power of two <= 32), thread_rank,
// meta_group_rank/size, shuffles/ballot on tiles and cg::reduce with plus, less
// and greater. The emulated build's <cooperative_groups.h> (emu/include/)
// includes it; nvcc uses the toolkit's.
#ifndef EMU_COOPERATIVE_GROUPS_H
#define EMU_COOPERATIVE_GROUPS_H

#include "emu/device.h"

namespace cooperative_groups {

class thread_block {
 public:
  void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const { __syncthreads(file, line); }
  unsigned long long thread_rank() const {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  }
  unsigned long long size() const { return num_threads(); }
  unsigned long long num_threads() const { return static_cast<unsigned long long>(blockDim.x) * blockDim.y * blockDim.z; }
  dim3 group_index() const { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
  dim3 thread_index() const { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
  dim3 group_dim() const { return blockDim; }
  dim3 dim_threads() const { return blockDim; }
};

inline thread_block this_thread_block() { return thread_block(); }

template <unsigned Size>
class thread_block_tile {
  static_assert(Size >= 1 && Size <= 32 && (Size & (Size - 1)) == 0,
                "emulated tiled_partition supports power-of-two tiles up to 32 threads");

 public:
  thread_block_tile() {
    unsigned linear = static_cast<unsigned>(thread_block().thread_rank());
    rank_ = linear % Size;
    meta_rank_ = linear / Size;
    meta_size_ = static_cast<unsigned>((thread_block().num_threads() + Size - 1) / Size);
    unsigned lane = linear % 32;
    mask_ = Size == 32 ? 0xffffffffu : (((1u << Size) - 1u) << (lane & ~(Size - 1)));
  }
  unsigned long long thread_rank() const { return rank_; }
  unsigned long long size() const { return Size; }
  unsigned long long num_threads() const { return Size; }
  unsigned long long meta_group_rank() const { return meta_rank_; }
  unsigned long long meta_group_size() const { return meta_size_; }
  void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const { __syncwarp(mask_, file, line); }
  template <class T>
  T shfl(T v, int src, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    return __shfl_sync(mask_, v, src, Size, file, line);
  }
  template <class T>
  T shfl_down(T v, unsigned d, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    return __shfl_down_sync(mask_, v, d, Size, file, line);
  }
  template <class T>
  T shfl_up(T v, unsigned d, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    return __shfl_up_sync(mask_, v, d, Size, file, line);
  }
  template <class T>
  T shfl_xor(T v, unsigned m, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    return __shfl_xor_sync(mask_, v, static_cast<int>(m), Size, file, line);
  }
  unsigned ballot(int p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    return __ballot_sync(mask_, p, file, line) >> (mask_ == 0xffffffffu ? 0 : __builtin_ctz(mask_));
  }
  int any(int p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const { return __any_sync(mask_, p, file, line); }
  int all(int p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const { return __all_sync(mask_, p, file, line); }

 private:
  unsigned rank_ = 0, meta_rank_ = 0, meta_size_ = 0, mask_ = 0;
};

template <unsigned Size, class Parent>
inline thread_block_tile<Size> tiled_partition(const Parent&) {
  return thread_block_tile<Size>();
}

template <class T>
struct plus {
  T operator()(const T& a, const T& b) const { return a + b; }
};
template <class T>
struct less {  // cg::less selects the smaller value
  T operator()(const T& a, const T& b) const { return b < a ? b : a; }
};
template <class T>
struct greater {  // cg::greater selects the larger value
  T operator()(const T& a, const T& b) const { return a < b ? b : a; }
};

// Butterfly reduction: every lane of the tile gets the result.
template <unsigned Size, class T, class Op>
inline T reduce(const thread_block_tile<Size>& tile, T value, Op op) {
  for (unsigned offset = Size / 2; offset > 0; offset /= 2) value = op(value, tile.shfl_xor(value, offset));
  return value;
}

// Grid-wide synchronisation needs every block resident at once, which the emulator
// (blocks run to completion one after another per OS thread) cannot provide.
class grid_group {};
template <class Unsupported = void>
grid_group this_grid() {
  static_assert(sizeof(Unsupported) == 0,
                "cooperative_groups::this_grid() (grid-wide sync) cannot run in the emulator: keep a multi-kernel fallback");
  return grid_group();
}

}  // namespace cooperative_groups

#endif  // EMU_COOPERATIVE_GROUPS_H
