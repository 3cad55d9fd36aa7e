// 128-bit packs: the unit of vectorised global memory traffic. One thread moves
// 16 bytes (4 floats or 8 bf16) with one LDG.128/STG.128 instead of 4 or 8 scalar
// accesses, which is what memory-bound kernels need to approach HBM bandwidth.
// The address must be 16-byte aligned: on a GPU a misaligned 128-bit access is a
// fatal fault, and in emulation GPT2_CHECK_ALIGNED makes it a launch error that
// names the address (docs/emulator.md). Row strides and offsets that are not a
// multiple of 16 bytes (odd C, padded vocabularies, head splits, ZeRO shards) are
// the usual cause: the caller checks them before choosing a packed kernel.
#ifndef KERNELS_PACK128_CUH
#define KERNELS_PACK128_CUH

#include "emu/cuda.cuh"

namespace gpt2 {
namespace kern {

template <class T>
struct alignas(16) Pack128 {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
  __device__ T& operator[](int i) { return v[i]; }
  __device__ const T& operator[](int i) const { return v[i]; }
};

// Plain load: cached in L1/L2 (data read again soon).
template <class T>
__device__ inline Pack128<T> load128(const T* p) {
  GPT2_CHECK_ALIGNED(p, 16, "load128");
  return *reinterpret_cast<const Pack128<T>*>(p);
}

// Streaming load (__ldcs): evict-first, for data read once.
template <class T>
__device__ inline Pack128<T> load128cs(const T* p) {
  GPT2_CHECK_ALIGNED(p, 16, "load128cs");
  int4 bits = __ldcs(reinterpret_cast<const int4*>(p));
  Pack128<T> out;
  memcpy(&out, &bits, sizeof(out));
  return out;
}

template <class T>
__device__ inline void store128(T* p, const Pack128<T>& value) {
  GPT2_CHECK_ALIGNED(p, 16, "store128");
  *reinterpret_cast<Pack128<T>*>(p) = value;
}

// Streaming store (__stcs): the result is not read again by this kernel.
template <class T>
__device__ inline void store128cs(T* p, const Pack128<T>& value) {
  GPT2_CHECK_ALIGNED(p, 16, "store128cs");
  int4 bits;
  memcpy(&bits, &value, sizeof(bits));
  __stcs(reinterpret_cast<int4*>(p), bits);
}

}  // namespace kern
}  // namespace gpt2

#endif  // KERNELS_PACK128_CUH
