// 128-bit packs: the unit of vectorised global memory traffic. One thread moves
// 16 bytes (4 floats or 8 bf16) with one LDG.128/STG.128 instead of 4 or 8 scalar
// accesses, which is what memory-bound kernels need to approach HBM bandwidth.
// The address must be 16-byte aligned: on a GPU a misaligned 128-bit access is a
// fatal fault, and in emulation GPT2_CHECK_ALIGNED makes it a launch error that
// names the address (docs/emulator.md). Row strides and offsets that are not a
// multiple of 16 bytes (odd C, padded vocabularies, head splits, ZeRO shards) are
// the usual cause: the caller checks them before choosing a packed kernel.
#ifndef BACKEND_CUDA_PACK128_CUH
#define BACKEND_CUDA_PACK128_CUH

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/common.cuh"

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


// ---- P elements as fp32 ------------------------------------------------------------------
// The packed kernels are templates over P, the elements one thread (or lane) moves per
// access: P = 1 is the scalar kernel (any size, any alignment); P a multiple of
// Pack128<T>::kSize moves them with P * sizeof(T) / 16 128-bit accesses. One source
// gives both, so the packed and the fallback kernel compute the same formula.
template <class T>
constexpr int kPack = Pack128<T>::kSize;

// f[0..P) = p[0..P) as fp32. kStream: evict-first (__ldcs), for data read once.
template <int P, bool kStream = false, class T>
__device__ inline void load_floats(float (&f)[P], const T* p) {
  if constexpr (P % kPack<T> == 0) {
    for (int j = 0; j < P; j += kPack<T>) {
      const Pack128<T> v = kStream ? load128cs(p + j) : load128(p + j);
      for (int k = 0; k < kPack<T>; k++) f[j + k] = to_float(v[k]);
    }
  } else {
    for (int k = 0; k < P; k++) f[k] = to_float(p[k]);
  }
}

// p[0..P) = f[0..P) rounded to T (nearest even). kStream: __stcs, not read again soon.
template <int P, bool kStream = false, class T>
__device__ inline void store_floats(T* p, const float (&f)[P]) {
  if constexpr (P % kPack<T> == 0) {
    for (int j = 0; j < P; j += kPack<T>) {
      Pack128<T> v;
      for (int k = 0; k < kPack<T>; k++) v[k] = from_float<T>(f[j + k]);
      if constexpr (kStream) store128cs(p + j, v); else store128(p + j, v);
    }
  } else {
    for (int k = 0; k < P; k++) p[k] = from_float<T>(f[k]);
  }
}

// Host side: may a packed kernel (P elements per access) use these pointers for a
// size (or row length) of n elements? Every pointer 16-byte aligned, n % P == 0.
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
template <class... Ptrs>
inline bool can_pack(size_t n, size_t P, const Ptrs*... ptrs) {
  return n % P == 0 && (aligned16(ptrs) && ...);
}

}  // namespace kern
}  // namespace gpt2

#endif  // BACKEND_CUDA_PACK128_CUH
