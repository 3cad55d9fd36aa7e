// Device-side CUDA surface for the g++ (emulation) build: built-in index
// variables, barriers, warp intrinsics, atomics, memory-access hints and math
// intrinsics. Reached through the emulated build's <cuda_runtime.h>
// (emu/include/cuda_runtime.h); kernel sources never include it directly.
// Defines GPT2_EMU_CUDA, on which backend/cuda/launch.cuh picks the emulator's launch.
#ifndef EMU_DEVICE_H
#define EMU_DEVICE_H

#ifdef __CUDACC__
#error "emu/device.h is the emulation layer; nvcc compiles CUDA sources against the toolkit's headers"
#endif

#define GPT2_EMU_CUDA 1

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "emu/exec.h"

// ---- qualifiers ----------------------------------------------------------------
// The toolkit's host_defines.h maps __global__/__device__/__host__ to nothing
// under g++. Shared memory must be per block: every block runs start to finish on
// one OS thread, so a static thread_local is one copy per concurrently running block.
#undef __shared__
#if GPT2_EMU_PROFILE
// The profile build runs one block at a time: one static copy serves, in a
// section whose bounds tell the profiler which addresses are shared memory.
#define __shared__ static __attribute__((section("gpt2_emu_shared")))
#else
#define __shared__ static thread_local
#endif
// __launch_bounds__(max_threads[, min_blocks[, max_cluster]]): on a GPU a launch of
// a larger block fails. g++ cannot attach a value to a function that code reads
// back, so the emulated build encodes max_threads / 32 in the kernel's machine
// code: patchable_function_entry(N, N) puts N one-byte NOPs just before the entry
// and records their address in the section __patchable_function_entries, which
// the launcher reads (emu/launch_bounds.cpp). max_threads must be a multiple of 32
// in [32, 1024]: anything else is a compile error (a negative NOP count).
#undef __launch_bounds__
#define __launch_bounds__(...) GPT2_EMU_LAUNCH_BOUNDS_(__VA_ARGS__, 0)
#define GPT2_EMU_LAUNCH_BOUNDS_(max_threads, ...) \
  __attribute__((patchable_function_entry(GPT2_EMU_BOUND_NOPS_(max_threads), GPT2_EMU_BOUND_NOPS_(max_threads))))
#define GPT2_EMU_BOUND_NOPS_(n) (((n) % 32 == 0 && (n) >= 32 && (n) <= 1024) ? (n) / 32 : -1)
// __noinline__ is deliberately left undefined: libstdc++ spells
// __attribute__((__noinline__)), which a macro would break.
#undef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
#ifndef __grid_constant__
#define __grid_constant__
#endif

// Built-in variables. Each access reads the current fiber's context.
#define threadIdx (::gpt2::emu::current_thread().thread_idx)
#define blockIdx (::gpt2::emu::current_thread().block->block_idx)
#define blockDim (::gpt2::emu::current_thread().block->block_dim)
#define gridDim (::gpt2::emu::current_thread().block->grid_dim)
constexpr int warpSize = 32;

// Code that depends on PTX-level features must not silently compile in emulation.
#define asm inline_PTX_cannot_run_in_the_emulator__guard_it_with_CUDA_ARCH_and_keep_a_portable_fallback

// Device assert: records a kernel fault (cudaErrorAssert) instead of aborting the
// process. Re-including <cassert> after <cuda_runtime.h> restores the host assert.
#undef assert
#ifdef NDEBUG
#define assert(expr) (static_cast<void>(0))
#else
#define assert(expr) \
  (static_cast<bool>(expr) ? static_cast<void>(0) : ::gpt2::emu::device_assert_fail(#expr, __FILE__, __LINE__, __func__))
#endif

// ---- barriers ----------------------------------------------------------------------
// The call site (file:line) identifies the barrier, so threads waiting at different
// __syncthreads are reported instead of silently synchronising with each other.
inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  gpt2::emu::sync_threads(file, line);
}
inline int __syncthreads_count(int p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return gpt2::emu::sync_threads_reduce(p, 0, file, line);
}
inline int __syncthreads_and(int p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return gpt2::emu::sync_threads_reduce(p, 1, file, line);
}
inline int __syncthreads_or(int p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return gpt2::emu::sync_threads_reduce(p, 2, file, line);
}
// Memory fences: blocks on different OS threads really run concurrently.
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// ---- warp intrinsics --------------------------------------------------------------
namespace gpt2 {
namespace emu {
template <class T>
inline uint64_t to_bits(T v) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, static_cast<const void*>(&v), sizeof(T));
  return bits;
}
template <class T>
inline T from_bits(uint64_t bits) {
  T v;
  std::memcpy(static_cast<void*>(&v), &bits, sizeof(T));
  return v;
}
template <class T>
inline T shuffle(unsigned mask, T var, ShuffleMode mode, int operand, int width, const char* file, int line) {
  return from_bits<T>(warp_rendezvous(WarpOp::kShuffle, mask, to_bits(var), mode, operand, width, file, line));
}
}  // namespace emu
}  // namespace gpt2

template <class T>
inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32, const char* file = __builtin_FILE(),
                     int line = __builtin_LINE()) {
  return gpt2::emu::shuffle(mask, var, gpt2::emu::ShuffleMode::kIdx, src_lane, width, file, line);
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32, const char* file = __builtin_FILE(),
                        int line = __builtin_LINE()) {
  return gpt2::emu::shuffle(mask, var, gpt2::emu::ShuffleMode::kUp, static_cast<int>(delta), width, file, line);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32, const char* file = __builtin_FILE(),
                          int line = __builtin_LINE()) {
  return gpt2::emu::shuffle(mask, var, gpt2::emu::ShuffleMode::kDown, static_cast<int>(delta), width, file, line);
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32, const char* file = __builtin_FILE(),
                         int line = __builtin_LINE()) {
  return gpt2::emu::shuffle(mask, var, gpt2::emu::ShuffleMode::kXor, lane_mask, width, file, line);
}
inline unsigned __ballot_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  return static_cast<unsigned>(gpt2::emu::warp_rendezvous(gpt2::emu::WarpOp::kBallot, mask, predicate != 0,
                                                          gpt2::emu::ShuffleMode::kIdx, 0, 32, file, line));
}
inline int __all_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return static_cast<int>(gpt2::emu::warp_rendezvous(gpt2::emu::WarpOp::kAll, mask, predicate != 0,
                                                     gpt2::emu::ShuffleMode::kIdx, 0, 32, file, line));
}
inline int __any_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return static_cast<int>(gpt2::emu::warp_rendezvous(gpt2::emu::WarpOp::kAny, mask, predicate != 0,
                                                     gpt2::emu::ShuffleMode::kIdx, 0, 32, file, line));
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  gpt2::emu::warp_rendezvous(gpt2::emu::WarpOp::kSyncWarp, mask, 0, gpt2::emu::ShuffleMode::kIdx, 0, 32, file, line);
}
inline unsigned __reduce_add_sync(unsigned mask, unsigned v, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return static_cast<unsigned>(gpt2::emu::warp_rendezvous(gpt2::emu::WarpOp::kReduceAdd, mask, v,
                                                          gpt2::emu::ShuffleMode::kIdx, 0, 32, file, line));
}
// Emulation approximation: the lanes of this warp that have not exited (the
// hardware reports the lanes converged at this instruction).
inline unsigned __activemask() { return gpt2::emu::active_mask(); }

// ---- atomics (real atomics: blocks run concurrently on several OS threads) ----------
namespace gpt2 {
namespace emu {
template <class T, class F>
inline T atomic_update(T* address, F update) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8, "unsupported atomic width");
  using Bits = std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;
  Bits* word = reinterpret_cast<Bits*>(address);
  Bits expected = __atomic_load_n(word, __ATOMIC_RELAXED);
  for (;;) {
    T old_value;
    std::memcpy(static_cast<void*>(&old_value), &expected, sizeof(T));
    T new_value = update(old_value);
    Bits desired;
    std::memcpy(&desired, static_cast<const void*>(&new_value), sizeof(T));
    if (__atomic_compare_exchange_n(word, &expected, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
      return old_value;
  }
}
}  // namespace emu
}  // namespace gpt2

inline int atomicAdd(int* a, int v) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned* a, unsigned v) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }
inline unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) {
  return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
inline float atomicAdd(float* a, float v) { return gpt2::emu::atomic_update(a, [v](float o) { return o + v; }); }
inline double atomicAdd(double* a, double v) { return gpt2::emu::atomic_update(a, [v](double o) { return o + v; }); }
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* a, __nv_bfloat16 v) {
  return gpt2::emu::atomic_update(a, [v](__nv_bfloat16 o) { return __float2bfloat16(__bfloat162float(o) + __bfloat162float(v)); });
}
inline __half atomicAdd(__half* a, __half v) {
  return gpt2::emu::atomic_update(a, [v](__half o) { return __float2half(__half2float(o) + __half2float(v)); });
}
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* a, __nv_bfloat162 v) {
  return gpt2::emu::atomic_update(a, [v](__nv_bfloat162 o) {
    __nv_bfloat162 r;
    r.x = __float2bfloat16(__bfloat162float(o.x) + __bfloat162float(v.x));
    r.y = __float2bfloat16(__bfloat162float(o.y) + __bfloat162float(v.y));
    return r;
  });
}
inline int atomicSub(int* a, int v) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicSub(unsigned* a, unsigned v) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); }
inline int atomicExch(int* a, int v) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicExch(unsigned* a, unsigned v) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }
inline float atomicExch(float* a, float v) { return gpt2::emu::atomic_update(a, [v](float) { return v; }); }
inline int atomicMax(int* a, int v) { return gpt2::emu::atomic_update(a, [v](int o) { return o > v ? o : v; }); }
inline unsigned atomicMax(unsigned* a, unsigned v) { return gpt2::emu::atomic_update(a, [v](unsigned o) { return o > v ? o : v; }); }
inline int atomicMin(int* a, int v) { return gpt2::emu::atomic_update(a, [v](int o) { return o < v ? o : v; }); }
inline unsigned atomicMin(unsigned* a, unsigned v) { return gpt2::emu::atomic_update(a, [v](unsigned o) { return o < v ? o : v; }); }
inline int atomicCAS(int* a, int compare, int v) {
  __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;  // holds the old value whether or not the swap happened
}
inline unsigned atomicCAS(unsigned* a, unsigned compare, unsigned v) {
  __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;
}
inline unsigned long long atomicCAS(unsigned long long* a, unsigned long long compare, unsigned long long v) {
  __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;
}
// ((old >= limit) ? 0 : old + 1), as documented for atomicInc.
inline unsigned atomicInc(unsigned* a, unsigned limit) {
  return gpt2::emu::atomic_update(a, [limit](unsigned o) { return o >= limit ? 0u : o + 1u; });
}
inline unsigned atomicDec(unsigned* a, unsigned limit) {
  return gpt2::emu::atomic_update(a, [limit](unsigned o) { return (o == 0u || o > limit) ? limit : o - 1u; });
}
inline int atomicAnd(int* a, int v) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); }
inline int atomicOr(int* a, int v) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicOr(unsigned* a, unsigned v) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }

// ---- load/store cache hints: plain accesses on the CPU (scalars and 16-byte vectors) ----
// A GPU access of a T must be alignof(T)-aligned (16 bytes for float4, int4 and
// the 128-bit packs); a misaligned one is a fatal "misaligned address" fault,
// while a CPU carries on. These hints, and GPT2_CHECK_ALIGNED in the project's
// vector helpers, fault the launch instead, naming the address.
namespace gpt2 {
namespace emu {
template <class T>
inline const T* aligned_for_access(const T* p, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % alignof(T) != 0) misaligned_access(p, alignof(T), what);
  return p;
}
}  // namespace emu
}  // namespace gpt2
template <class T> inline T __ldg(const T* p) { return *gpt2::emu::aligned_for_access(p, "__ldg"); }
template <class T> inline T __ldcg(const T* p) { return *gpt2::emu::aligned_for_access(p, "__ldcg"); }
template <class T> inline T __ldca(const T* p) { return *gpt2::emu::aligned_for_access(p, "__ldca"); }
template <class T> inline T __ldcs(const T* p) { return *gpt2::emu::aligned_for_access(p, "__ldcs"); }
template <class T> inline T __ldlu(const T* p) { return *gpt2::emu::aligned_for_access(p, "__ldlu"); }
template <class T> inline T __ldcv(const T* p) { return *gpt2::emu::aligned_for_access(p, "__ldcv"); }
template <class T> inline void __stwb(T* p, T v) { *const_cast<T*>(gpt2::emu::aligned_for_access<T>(p, "__stwb")) = v; }
template <class T> inline void __stcg(T* p, T v) { *const_cast<T*>(gpt2::emu::aligned_for_access<T>(p, "__stcg")) = v; }
template <class T> inline void __stcs(T* p, T v) { *const_cast<T*>(gpt2::emu::aligned_for_access<T>(p, "__stcs")) = v; }
template <class T> inline void __stwt(T* p, T v) { *const_cast<T*>(gpt2::emu::aligned_for_access<T>(p, "__stwt")) = v; }

// ---- math and conversion intrinsics ------------------------------------------------
// The fast-math intrinsics are approximations on the GPU; the emulator returns the
// correctly rounded libm value, which is within their documented error bounds.
inline float __expf(float x) { return std::exp(x); }
inline float __exp10f(float x) { return std::pow(10.0f, x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __frsqrt_rn(float x) { return 1.0f / std::sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : (x == x ? x : 0.0f)); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fmaf_rz(float a, float b, float c) { return std::fma(a, b, c); }
inline unsigned __float_as_uint(float x) { unsigned u; std::memcpy(&u, &x, 4); return u; }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline long long __double_as_longlong(double x) { long long i; std::memcpy(&i, &x, 8); return i; }
inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
inline int __float2int_rn(float x) { return static_cast<int>(std::nearbyint(x)); }
inline int __float2int_rz(float x) { return static_cast<int>(x); }
inline int __float2int_rd(float x) { return static_cast<int>(std::floor(x)); }
inline int __float2int_ru(float x) { return static_cast<int>(std::ceil(x)); }
inline unsigned __float2uint_rn(float x) { return static_cast<unsigned>(std::nearbyint(x)); }
inline float __int2float_rn(int x) { return static_cast<float>(x); }
inline float __uint2float_rn(unsigned x) { return static_cast<float>(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline unsigned __umulhi(unsigned a, unsigned b) { return static_cast<unsigned>((static_cast<uint64_t>(a) * b) >> 32); }
inline int __mul24(int a, int b) { return a * b; }
// CUDA's global min/max overloads for integers (floats use fminf/fmaxf).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline size_t min(size_t a, size_t b) { return a < b ? a : b; }
inline size_t max(size_t a, size_t b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }

// Timing/clock intrinsics: monotonically increasing, not cycle accurate.
long long int clock64();

// Asynchronous copies: cp.async is emulated behind backend/cuda/mma.cuh's
// cp_async16/cp_async_commit/cp_async_wait (emu/ptx.h); the pipeline API and TMA are not.
template <class Unsupported = void>
void __pipeline_memcpy_async(void*, const void*, size_t, size_t = 0) {
  static_assert(sizeof(Unsupported) == 0, "cp.async (__pipeline_memcpy_async) cannot run in the emulator");
}

// cuda_runtime.h's typed overload exists only under nvcc.
template <class T>
inline cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(entry), attr, value);
}

// ---- dynamic shared memory ----------------------------------------------------------
namespace gpt2 {
namespace emu {
inline unsigned char* dynamic_shared_memory() { return current_thread().block->dynamic_smem; }
}  // namespace emu
}  // namespace gpt2

#endif  // EMU_DEVICE_H
