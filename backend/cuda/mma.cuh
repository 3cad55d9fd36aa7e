// Warp-level tensor-core and async-copy instructions with documented fragment
// layouts (PTX ISA: "Matrix Fragments for mma.m16n8k16", "...m16n8k8",
// "ldmatrix", "cp.async"). Kernels that touch fragment elements use these, never
// WMMA, whose element order is unspecified. Under nvcc each is one instruction;
// in the emulator (emu/ptx.h) the same layouts, exchanges and completion rules.
// With backend/cuda/launch.cuh, the one place in backend/cuda/ that tells the
// GPU from the emulator: inline PTX here (__CUDA_ARCH__), emu::ptx otherwise
// (the emulated build's <cuda_runtime.h> brings it); kernels call only these.
//
// Lane = 4g + t (g = lane/4 the "group", t = lane%4 the thread in it):
//   bf16 A 16x16 (row-major)  a[0]: row g, cols 2t,2t+1   a[1]: row g+8, same
//                             a[2]: row g, cols 2t+8,+9   a[3]: row g+8, same
//   bf16 B 16x8 (k x n)       b[0]: k 2t,2t+1, col g      b[1]: k 2t+8,+9, col g
//   tf32 A 16x8               a[0]: (g, t)  a[1]: (g+8, t)  a[2]: (g, t+4)  a[3]: (g+8, t+4)
//   tf32 B 8x8                b[0]: (k t, col g)  b[1]: (k t+4, col g)
//   fp32 C/D 16x8             d[0], d[1]: row g, cols 2t, 2t+1   d[2], d[3]: row g+8
// Two bf16 share a register, the lower column (or k) in the low half. So the
// C/D fragments of two adjacent n8 tiles, rounded to bf16 pairs, are exactly the
// A fragment of a k16 step: S's accumulators become P's operand in registers.
//
// ldmatrix_x4: lanes 8i..8i+7 pass the addresses of the 8 rows (16 bytes each,
// 16-byte aligned, shared memory) of 8x8 b16 matrix i; r[i] is this lane's word
// of matrix i: row g, elements 2t, 2t+1 (trans: column g, rows 2t, 2t+1). On
// fp32 data a "row" is 4 floats and word t is element t: the tf32 A layout.
// Conflict-free when the 8 rows of each matrix fall in distinct 16-byte bank
// groups: row strides of 16 mod 128 bytes (a padded row) do that.
#ifndef BACKEND_CUDA_MMA_CUH
#define BACKEND_CUDA_MMA_CUH

#include <cstdint>
#include <cstring>

#include "backend/cuda/common.cuh"

namespace gpt2 {
namespace kern {
namespace mma {

#if GPT2_EMULATED
#define MMA_CALLER , const char* file = __builtin_FILE(), int line = __builtin_LINE()
#else
#define MMA_CALLER
#endif

#if defined(__CUDA_ARCH__)
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
#endif

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row MMA_CALLER) {
#if defined(__CUDA_ARCH__)
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
#elif GPT2_EMULATED
  emu::ptx::ldmatrix_x4(r, row, false, file, line);
#endif
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row MMA_CALLER) {
#if defined(__CUDA_ARCH__)
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
#elif GPT2_EMULATED
  emu::ptx::ldmatrix_x4(r, row, true, file, line);
#endif
}

// d += a b, bf16 inputs, fp32 accumulators (m16n8k16).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2] MMA_CALLER) {
#if defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif GPT2_EMULATED
  emu::ptx::mma<false>(d, a, b, file, line);
#endif
}

// d += a b, tf32 inputs (registers from to_tf32), fp32 accumulators (m16n8k8).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2] MMA_CALLER) {
#if defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif GPT2_EMULATED
  emu::ptx::mma<true>(d, a, b, file, line);
#endif
}

// 3xTF32's three products: corr += a_big b_small, corr += a_small b_big, d +=
// a_big b_big (three mma.sync in this order; one warp exchange in the emulator).
__device__ __forceinline__ void mma_tf32x3(float (&d)[4], float (&corr)[4], const uint32_t (&a_big)[4],
                                           const uint32_t (&a_small)[4], const uint32_t (&b_big)[2],
                                           const uint32_t (&b_small)[2] MMA_CALLER) {
#if defined(__CUDA_ARCH__)
  mma_tf32(corr, a_big, b_small);
  mma_tf32(corr, a_small, b_big);
  mma_tf32(d, a_big, b_big);
#elif GPT2_EMULATED
  emu::ptx::mma_tf32x3(d, corr, a_big, a_small, b_big, b_small, file, line);
#endif
}

// fp32 -> tf32 register: round to nearest, ties away (cvt.rna.tf32.f32).
__device__ __forceinline__ uint32_t to_tf32(float x) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
#elif GPT2_EMULATED
  return emu::ptx::cvt_rna_tf32(x);
#else
  return 0;
#endif
}

// Two floats -> one register of two bf16 (lo in the low half), round to nearest even.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t r;
  static_assert(sizeof(v) == sizeof(r), "two bf16 in a register");
  memcpy(&r, &v, sizeof(r));
  return r;
}

// 16 bytes global -> shared without a register round trip; src_bytes < 16 zero-fills
// the rest (0: nothing read, src may be out of bounds). Lands at cp_async_wait.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, uint32_t src_bytes) {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(src_bytes));
#elif GPT2_EMULATED
  emu::ptx::cp_async16(dst, src, src_bytes);
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.commit_group;\n" ::);
#elif GPT2_EMULATED
  emu::ptx::cp_async_commit();
#endif
}

// Every committed group but the N newest has landed (for this thread: the block
// still needs __syncthreads before reading other threads' copies).
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#elif GPT2_EMULATED
  emu::ptx::cp_async_wait_group(N);
#endif
}

// Spins (one thread) until an acquire load of *flag reads want: what the block
// that stored it with store_release wrote before is then visible. A value that
// never comes ends the launch with an error instead of hanging: __trap after 60e9
// clocks (~30 s) on a GPU, a fault naming `what` after 60 s in the emulator.
__device__ inline void wait_acquire(const int* flag, int want, const char* what) {
#if defined(__CUDA_ARCH__)
  const long long start = clock64();
  int now;
  for (;;) {
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(now) : "l"(flag) : "memory");
    if (now == want) break;
    __nanosleep(64);
    if (clock64() - start > 60LL * 1000 * 1000 * 1000) __trap();
  }
#elif GPT2_EMULATED
  emu::ptx::wait_for_value(flag, want, what);
#endif
}

// *flag = value with release semantics (global memory, GPU scope).
__device__ inline void store_release(int* flag, int value) {
#if defined(__CUDA_ARCH__)
  asm volatile("st.release.gpu.global.s32 [%0], %1;\n" ::"l"(flag), "r"(value) : "memory");
#elif GPT2_EMULATED
  __atomic_store_n(flag, value, __ATOMIC_RELEASE);
#endif
}

#undef MMA_CALLER

}  // namespace mma
}  // namespace kern
}  // namespace gpt2

#endif  // BACKEND_CUDA_MMA_CUH
