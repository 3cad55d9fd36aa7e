// Emulated PTX warp instructions (g++ build only) behind backend/cuda/mma.cuh:
// ldmatrix, mma.sync (bf16 m16n8k16, tf32 m16n8k8), cvt.rna.tf32 and cp.async
// with commit/wait groups. Under nvcc the wrappers issue the instructions.
//
// Fragments follow the PTX ISA's layouts exactly (lane = 4g + t, g = lane/4,
// t = lane%4), so code that touches fragment elements behaves here as on a GPU:
//   bf16 A 16x16  a[0]: row g,   k 2t,2t+1    a[1]: row g+8, k 2t,2t+1
//                 a[2]: row g,   k 2t+8,+9    a[3]: row g+8, k 2t+8,+9
//   bf16 B 16x8   b[0]: k 2t,2t+1, col g      b[1]: k 2t+8,+9, col g
//   tf32 A 16x8   a[0]: (g, t)  a[1]: (g+8, t)  a[2]: (g, t+4)  a[3]: (g+8, t+4)
//   tf32 B 8x8    b[0]: (k t, col g)  b[1]: (k t+4, col g)
//   fp32 C/D 16x8 d[0], d[1]: row g, cols 2t, 2t+1;  d[2], d[3]: row g+8, same cols
// (two bf16 in one register: the lower column or k in the low half).
//
// mma sums d + a_0 b_0 + ... + a_{K-1} b_{K-1} in that order, rounding each add
// to fp32 (the products of bf16 or tf32 inputs are exact in fp32). The GPU's
// order inside the instruction is not documented: tests bound the difference.
//
// cp.async: a copy is queued per thread and lands in shared memory when a
// cp.async.wait_group lets it complete; copies still pending when the thread
// ends never land. So a missing wait reads stale (NaN-poisoned) shared memory
// and fails the test that checks the result, where a GPU might just be lucky.
// Under the reverse and random run orders a copy may also land earlier, at one
// of its thread's fiber switches (emu/exec.h's land_early_copies), so a reader
// that is not ordered after the wait by a barrier can see it too soon.
//
// Profile build: ldmatrix reports each lane's 16-byte row, cp.async its 16-byte
// global read and shared write, at the kernel's call site (the wrappers are
// always-inline); the element copies here are not instrumented.
#ifndef EMU_PTX_H
#define EMU_PTX_H

#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

#include "emu/exec.h"
#if GPT2_EMU_PROFILE
#include "emu/profile.h"
#define GPT2_EMU_PTX_UNCOUNTED __attribute__((no_sanitize("address"), noinline))
#else
#define GPT2_EMU_PTX_UNCOUNTED
#endif

namespace gpt2 {
namespace emu {
namespace ptx {

namespace detail {
inline unsigned linear_thread() {
  const ThreadContext& t = current_thread();
  const dim3& d = t.block->block_dim;
  return t.thread_idx.x + d.x * (t.thread_idx.y + d.y * t.thread_idx.z);
}
// What each lane of the running block publishes for a warp exchange.
struct Slot {
  const void* ptr;
  uint32_t w[12];
};
// Two tables, each lane alternating between them call by call: a lane may
// publish for its warp's next exchange while a slower lane still reads this
// one (it cannot get two ahead: the next exchange waits for every lane), so
// mma, which reads only the published registers, needs one rendezvous. `me`
// is the lane's thread index in its block; every lane of a warp makes the
// same exchanges, so their tables agree.
inline Slot* slots(unsigned me) {
  static thread_local Slot table[2][1024];
  static thread_local uint8_t parity[1024];
  const unsigned p = parity[me];
  parity[me] = static_cast<uint8_t>(p ^ 1u);
  return table[p];
}
inline void rendezvous(const char* file, int line) {
  warp_rendezvous(WarpOp::kSyncWarp, 0xffffffffu, 0, ShuffleMode::kIdx, 0, 32, file, line);
}
inline float bf16_bits_to_float(uint32_t h) {
  const uint32_t u = h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float tf32_bits_to_float(uint32_t u) {  // the tensor core reads the upper 19 bits
  u &= 0xffffe000u;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace detail

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lanes 8i..8i+7 give the rows of
// 8x8 b16 matrix i (16 bytes each, 16-byte aligned); r[i] is this lane's word of
// matrix i: non-trans row g, elements 2t, 2t+1; trans column g, rows 2t, 2t+1.
GPT2_EMU_PTX_UNCOUNTED inline void ldmatrix_x4(uint32_t (&r)[4], const void* row, bool trans, const char* file,
                                               int line) {
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0) misaligned_access(row, 16, "ldmatrix row");
#if GPT2_EMU_PROFILE
  profile::record(__builtin_return_address(0), row, 16, false);
#endif
  const unsigned me = detail::linear_thread(), lane = me % 32, base = me - lane, g = lane / 4, t = lane % 4;
  detail::Slot* s = detail::slots(me);
  s[me].ptr = row;
  detail::rendezvous(file, line);
  for (int i = 0; i < 4; ++i) {
    if (!trans) {
      std::memcpy(&r[i], static_cast<const char*>(s[base + 8 * i + g].ptr) + 4 * t, 4);
    } else {
      uint16_t lo, hi;
      std::memcpy(&lo, static_cast<const char*>(s[base + 8 * i + 2 * t].ptr) + 2 * g, 2);
      std::memcpy(&hi, static_cast<const char*>(s[base + 8 * i + 2 * t + 1].ptr) + 2 * g, 2);
      r[i] = uint32_t(lo) | (uint32_t(hi) << 16);
    }
  }
  // A lane's next store must not reach shared memory before every lane has read
  // its rows, as the warp's instructions are ordered on a GPU.
  detail::rendezvous(file, line);
}

namespace detail {
// The operands one lane's accumulators need, gathered once from the warp's
// published words: rows g and g+8 of A (A's four registers at w[ao..ao+3]) and
// columns 2t and 2t+1 of B (B's two at w[bo..bo+1]), as floats.
template <bool kTf32>
struct LaneOperands {
  static constexpr int K = kTf32 ? 8 : 16;
  float a[2][K], b[2][K];
  LaneOperands(const Slot* s, unsigned base, unsigned lane, int ao, int bo) {
    const unsigned g = lane / 4, t = lane % 4;
    for (unsigned r = 0; r < 2; ++r)
      for (unsigned k = 0; k < K; ++k) a[r][k] = a_at(s, base, g + 8 * r, k, ao);
    for (unsigned c = 0; c < 2; ++c)
      for (unsigned k = 0; k < K; ++k) b[c][k] = b_at(s, base, k, 2 * t + c, bo);
  }
  static float a_at(const Slot* s, unsigned base, unsigned row, unsigned k, int ao) {
    if (kTf32) return tf32_bits_to_float(s[base + 4 * (row % 8) + k % 4].w[ao + row / 8 + 2 * (k / 4)]);
    const uint32_t w = s[base + 4 * (row % 8) + (k % 8) / 2].w[ao + row / 8 + 2 * (k / 8)];
    return bf16_bits_to_float(k % 2 ? w >> 16 : w & 0xffffu);
  }
  static float b_at(const Slot* s, unsigned base, unsigned k, unsigned col, int bo) {
    if (kTf32) return tf32_bits_to_float(s[base + 4 * col + k % 4].w[bo + k / 4]);
    const uint32_t w = s[base + 4 * col + (k % 8) / 2].w[bo + k / 8];
    return bf16_bits_to_float(k % 2 ? w >> 16 : w & 0xffffu);
  }
};
// This lane's d += a b: each of its four elements a sum over k ascending, each add rounded to fp32.
template <bool kTf32>
inline void accumulate(float (&d)[4], const LaneOperands<kTf32>& a, const LaneOperands<kTf32>& b) {
  for (int e = 0; e < 4; ++e) {
    float sum = d[e];
    for (int k = 0; k < LaneOperands<kTf32>::K; ++k) sum += a.a[e / 2][k] * b.b[e % 2][k];
    d[e] = sum;
  }
}
}  // namespace detail

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (kTf32 false) or
// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (kTf32 true): d += a b.
template <bool kTf32>
GPT2_EMU_PTX_UNCOUNTED inline void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                       const char* file, int line) {
  const unsigned me = detail::linear_thread(), lane = me % 32, base = me - lane;
  detail::Slot* s = detail::slots(me);
  for (int i = 0; i < 4; ++i) s[me].w[i] = a[i];
  s[me].w[4] = b[0];
  s[me].w[5] = b[1];
  detail::rendezvous(file, line);
  float out[4] = {d[0], d[1], d[2], d[3]};
  const detail::LaneOperands<kTf32> ops(s, base, lane, 0, 4);
  detail::accumulate(out, ops, ops);
  for (int e = 0; e < 4; ++e) d[e] = out[e];
}

// 3xTF32's three tf32 mma.sync in one warp exchange (the GPU issues the three
// instructions; the results are theirs, in this order): corr += a_big b_small,
// corr += a_small b_big, d += a_big b_big.
GPT2_EMU_PTX_UNCOUNTED inline void mma_tf32x3(float (&d)[4], float (&corr)[4], const uint32_t (&a_big)[4],
                                              const uint32_t (&a_small)[4], const uint32_t (&b_big)[2],
                                              const uint32_t (&b_small)[2], const char* file, int line) {
  const unsigned me = detail::linear_thread(), lane = me % 32, base = me - lane;
  detail::Slot* s = detail::slots(me);
  for (int i = 0; i < 4; ++i) s[me].w[i] = a_big[i], s[me].w[6 + i] = a_small[i];
  s[me].w[4] = b_big[0], s[me].w[5] = b_big[1], s[me].w[10] = b_small[0], s[me].w[11] = b_small[1];
  detail::rendezvous(file, line);
  float c[4] = {corr[0], corr[1], corr[2], corr[3]}, out[4] = {d[0], d[1], d[2], d[3]};
  const detail::LaneOperands<true> big(s, base, lane, 0, 4), small(s, base, lane, 6, 10);
  detail::accumulate(c, big, small);  // a_big b_small
  detail::accumulate(c, small, big);  // a_small b_big
  detail::accumulate(out, big, big);
  for (int e = 0; e < 4; ++e) corr[e] = c[e], d[e] = out[e];
}

// cvt.rna.tf32.f32: round to 10 mantissa bits, ties away from zero (Inf/NaN kept).
inline uint32_t cvt_rna_tf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return u;
  return (u + 0x1000u) & 0xffffe000u;
}

// cp.async.cg.shared.global [dst], [src], 16, src_bytes: queued until a wait.
GPT2_EMU_PTX_UNCOUNTED inline void cp_async16(void* dst, const void* src, uint32_t src_bytes) {
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0) misaligned_access(dst, 16, "cp.async destination");
  if (src_bytes > 0 && reinterpret_cast<uintptr_t>(src) % 16 != 0) misaligned_access(src, 16, "cp.async source");
#if GPT2_EMU_PROFILE
  const void* site = __builtin_return_address(0);  // in the kernel: the wrapper is always-inline
  if (src_bytes > 0) profile::record(site, src, 16, false);
  profile::record(site, dst, 16, true);
#endif
  current_thread().async_copies.push_back(AsyncCopy{dst, src, 16, src_bytes});
}
// cp.async.commit_group: the copies issued since the last commit form a group.
inline void cp_async_commit() {
  ThreadContext& t = current_thread();
  t.async_groups.push_back(t.async_copies.size());
}
// cp.async.wait_group n: every committed group but the n newest has landed
// (copies that landed early are not copied again).
GPT2_EMU_PTX_UNCOUNTED inline void cp_async_wait_group(unsigned n) {
  ThreadContext& t = current_thread();
  if (t.async_groups.size() <= n) return;
  const size_t done_groups = t.async_groups.size() - n, end = t.async_groups[done_groups - 1];
  for (size_t i = 0; i < end; ++i)
    if (!t.async_copies[i].landed) t.async_copies[i].land();
  t.async_copies.erase(t.async_copies.begin(), t.async_copies.begin() + static_cast<std::ptrdiff_t>(end));
  t.async_groups.erase(t.async_groups.begin(), t.async_groups.begin() + static_cast<std::ptrdiff_t>(done_groups));
  for (size_t& g : t.async_groups) g -= end;
}

// A flag wait between blocks (ld.acquire spin on a GPU): blocks of a grid run
// concurrently on the emulator's workers, in launch order, so a block waits only
// for one already running. A value that never comes faults the launch after 60 s.
inline void wait_for_value(const int* flag, int want, const char* what) {
  const auto start = std::chrono::steady_clock::now();
  while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) != want) {
    std::this_thread::yield();
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(60))
      device_fault("spin wait", what, __FILE__, __LINE__);
  }
}

}  // namespace ptx
}  // namespace emu
}  // namespace gpt2

#endif  // EMU_PTX_H
