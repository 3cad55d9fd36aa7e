// Flash attention on mma.sync (bf16 storage): the forward kernel. Same contract,
// work split and rounding points as backend/cuda/flash_attention.cuh (64 query
// rows per block of 4 warps, 16 per warp, key tiles of 64, hs <= 64 zero padded,
// lse per row), but nothing but the K/V operands goes through shared memory:
//
//   registers  Q's A fragments (loaded once), S = Q K^T in mma C fragments, the
//              online softmax on them (a row's 64 columns live in the 4 lanes of
//              a quad: two shuffles reduce it), P rounded to bf16 pairs that are
//              directly the A fragments of P V (backend/cuda/mma.cuh), O's
//              accumulators rescaled in place by exp(m_old - m_new);
//   shared     Q, and K and V double-buffered: tile kt+1 is in flight (cp.async)
//              while tile kt is multiplied. Rows padded to 72 bf16 (144 bytes):
//              the 8 rows of every ldmatrix matrix fall in 8 distinct 16-byte bank
//              groups, and a quarter-warp's 16-byte cp.async stores cover one row.
//              5 tiles x 9 KiB = 45 KiB.
//
// Shared traffic per 64x64 tile pair and warp: K by ldmatrix (16 x4 requests),
// V by ldmatrix.trans (16), K and V staging (2 x 512 16-byte stores per block);
// every request at its conflict-free minimum (docs/kernels.md, profile table).
// Numerics as the WMMA kernel: S, max, sum and O in fp32, P rounded to bf16
// relative to the running max, out = O / l rounded once.
#ifndef BACKEND_CUDA_FLASH_MMA_CUH
#define BACKEND_CUDA_FLASH_MMA_CUH

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/pack128.cuh"

namespace gpt2 {
namespace kern {
namespace flash_mma {

#if defined(__CUDACC__)
#define FLASH_MMA_UNROLL _Pragma("unroll")
#else
#define FLASH_MMA_UNROLL
#endif

using bf16 = __nv_bfloat16;
constexpr int kTile = 64;             // query rows per block, keys per tile
constexpr int kHead = 64;             // head dimension in shared memory (hs <= kHead)
constexpr int kLd = kHead + 8;        // padded row: 144 bytes
constexpr int kWarps = 4;             // 16 query rows each
constexpr int kThreads = kWarps * 32;
constexpr size_t kTileElems = size_t(kTile) * kLd;  // one [64][kLd] tile
constexpr size_t kTileBytes = kTileElems * sizeof(bf16);
constexpr size_t forward_smem() { return 5 * kTileBytes; }  // Q | K, V x 2 buffers

// Rows [t0, t0+64) of one head's slice (src + t*row + d) into dst[64][kLd], zero
// where t >= T_ or d >= hs. packed (hs == kHead, 16-byte aligned rows): cp.async,
// landing at the caller's wait; else synchronous scalar stores.
__device__ inline void stage_tile(bf16* dst, const bf16* src, int row, int t0, int T_, int hs, bool packed) {
  if (packed) {
    constexpr int kChunks = kHead / 8;  // 16-byte chunks per row
    for (int i = threadIdx.x; i < kTile * kChunks; i += kThreads) {
      const int r = i / kChunks, c = (i % kChunks) * 8;
      const bool in = t0 + r < T_;
      const int at = r * kLd + c;  // offsets in int first: small, and never widened after a product
      mma::cp_async16(dst + at, in ? src + size_t(t0 + r) * row + c : src, in ? 16 : 0);
    }
    return;
  }
  for (int i = threadIdx.x; i < kTile * kHead; i += kThreads) {
    const int r = i / kHead, d = i % kHead;
    dst[r * kLd + d] = (t0 + r < T_ && d < hs) ? src[size_t(t0 + r) * row + d] : __float2bfloat16(0.0f);
  }
}

// ---- fragment loads from a [64][kLd] tile (lane i = lane/8 names the 8x8 matrix, j = lane%8 its row)
// A operand: rows r0..r0+15, k0..k0+15 of a row-major tile.
__device__ inline void load_a(uint32_t (&a)[4], const bf16* tile, int r0, int k0) {
  const int lane = threadIdx.x % 32, i = lane / 8, j = lane % 8;
  const int at = (r0 + (i % 2) * 8 + j) * kLd + k0 + (i / 2) * 8;
  mma::ldmatrix_x4(a, tile + at);
}
// A operand: rows m0..m0+15, k0..k0+15 of A stored transposed ([k][m]: dS^T for dS K), by ldmatrix.trans.
__device__ inline void load_a_transposed(uint32_t (&a)[4], const bf16* tile, int k0, int m0) {
  const int lane = threadIdx.x % 32, i = lane / 8, j = lane % 8;
  const int at = (k0 + (i / 2) * 8 + j) * kLd + m0 + (i % 2) * 8;
  mma::ldmatrix_x4_trans(a, tile + at);
}
// B operands of n8 tiles n0.. and n0+8.. at k0, from B^T stored row-major ([n][k]: K for Q K^T).
__device__ inline void load_b_from_rows_n(uint32_t (&b)[4], const bf16* tile, int n0, int k0) {
  const int lane = threadIdx.x % 32, i = lane / 8, j = lane % 8;
  const int at = (n0 + (i / 2) * 8 + j) * kLd + k0 + (i % 2) * 8;
  mma::ldmatrix_x4(b, tile + at);
}
// The same from B stored row-major ([k][n]: V for P V), transposed by ldmatrix.trans.
__device__ inline void load_b_from_rows_k(uint32_t (&b)[4], const bf16* tile, int k0, int n0) {
  const int lane = threadIdx.x % 32, i = lane / 8, j = lane % 8;
  const int at = (k0 + (i % 2) * 8 + j) * kLd + n0 + (i / 2) * 8;
  mma::ldmatrix_x4_trans(b, tile + at);
}
// d0 += a b[0..1] (n8 tile n0), d1 += a b[2..3] (n8 tile n0+8).
__device__ inline void mma_pair(float (&d0)[4], float (&d1)[4], const uint32_t (&a)[4], const uint32_t (&b)[4]) {
  const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
  mma::mma_bf16(d0, a, b0);
  mma::mma_bf16(d1, a, b1);
}
// acc[16 x 64] += A[16 x 64] (four k16 A fragments) B[64 x 64] from a [k][n] tile.
__device__ inline void mma_rows_k(float (&acc)[8][4], const uint32_t (&a)[4][4], const bf16* tile) {
  FLASH_MMA_UNROLL
  for (int kk = 0; kk < 4; kk++) {
    FLASH_MMA_UNROLL
    for (int nb = 0; nb < 4; nb++) {
      uint32_t b[4];
      load_b_from_rows_k(b, tile, kk * 16, nb * 16);
      mma_pair(acc[nb + nb], acc[nb + nb + 1], a[kk], b);  // n8 tiles 2nb, 2nb+1
    }
  }
}
// acc[16 x 64] += A[16 x 64] B[64 x 64] where B^T is a [n][k] tile.
__device__ inline void mma_rows_n(float (&acc)[8][4], const uint32_t (&a)[4][4], const bf16* tile) {
  FLASH_MMA_UNROLL
  for (int kk = 0; kk < 4; kk++) {
    FLASH_MMA_UNROLL
    for (int nb = 0; nb < 4; nb++) {
      uint32_t b[4];
      load_b_from_rows_n(b, tile, nb * 16, kk * 16);
      mma_pair(acc[nb + nb], acc[nb + nb + 1], a[kk], b);  // n8 tiles 2nb, 2nb+1
    }
  }
}
// The same with A's 16 rows read from rows r0.. of a shared tile one k step at a
// time (16 registers fewer than resident fragments, 4 ldmatrix more).
__device__ inline void mma_rows_n(float (&acc)[8][4], const bf16* a_tile, int r0, const bf16* tile) {
  FLASH_MMA_UNROLL
  for (int kk = 0; kk < 4; kk++) {
    uint32_t a[4];
    load_a(a, a_tile, r0, kk * 16);
    FLASH_MMA_UNROLL
    for (int nb = 0; nb < 4; nb++) {
      uint32_t b[4];
      load_b_from_rows_n(b, tile, nb * 16, kk * 16);
      mma_pair(acc[nb + nb], acc[nb + nb + 1], a, b);
    }
  }
}
// C fragments of a 16 x 64 fp32 tile (8 n8 tiles) -> A fragments of four k16 steps, rounded to bf16.
__device__ inline void to_a_fragments(uint32_t (&a)[4][4], const float (&c)[8][4]) {
  FLASH_MMA_UNROLL
  for (int n = 0; n < 8; n++) {
    const int half = (n % 2) + (n % 2);  // registers 0, 1 (n even) or 2, 3 (n odd) of k step n/2
    a[n / 2][half] = mma::pack_bf16(c[n][0], c[n][1]);      // row g
    a[n / 2][half + 1] = mma::pack_bf16(c[n][2], c[n][3]);  // row g+8
  }
}
// Sum (max) over the 4 lanes of a quad: the lanes that hold one row of a C fragment.
__device__ inline float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ inline float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// A warp's 16 x 64 fp32 C fragments, scaled per row (rows g, g+8), to rows of a
// [16][kLd] bf16 tile, then to global rows (t = t0 + r < T_) of `row` stride:
// 16-byte stores when packed (hs == kHead), else hs scalars.
__device__ inline void store_rows(bf16* dst, size_t row, int t0, int T_, int hs, bool packed, bf16* stage,
                                  const float (&c)[8][4], float scale_g, float scale_g8) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  FLASH_MMA_UNROLL
  for (int n = 0; n < 8; n++) {
    const int at = g * kLd + n * 8 + 2 * t, at8 = at + 8 * kLd;
    *reinterpret_cast<__nv_bfloat162*>(stage + at) = __floats2bfloat162_rn(c[n][0] * scale_g, c[n][1] * scale_g);
    *reinterpret_cast<__nv_bfloat162*>(stage + at8) = __floats2bfloat162_rn(c[n][2] * scale_g8, c[n][3] * scale_g8);
  }
  __syncwarp();
  if (packed) {
    for (int i = lane; i < 16 * (kHead / 8); i += 32) {
      const int r = i / (kHead / 8), d = (i % (kHead / 8)) * 8;
      const int at = r * kLd + d;
      if (t0 + r < T_)
        *reinterpret_cast<int4*>(dst + size_t(t0 + r) * row + d) = *reinterpret_cast<const int4*>(stage + at);
    }
  } else {
    for (int i = lane; i < 16 * hs; i += 32) {
      const int r = i / hs, d = i % hs;
      if (t0 + r < T_) dst[size_t(t0 + r) * row + d] = stage[r * kLd + d];
    }
  }
  __syncwarp();
}

// Tiles [t0, t0+64) of two head slices into two [64][kLd] tiles, as one cp.async group.
__device__ inline void stage_pair(bf16* da, const bf16* sa, int row_a, bf16* db, const bf16* sb, int row_b, int t0,
                                  int T_, int hs, bool packed) {
  stage_tile(da, sa, row_a, t0, T_, hs, packed);
  stage_tile(db, sb, row_b, t0, T_, hs, packed);
  mma::cp_async_commit();
}
// Four k16 A fragments of this warp's 16 rows of a tile.
__device__ inline void load_rows(uint32_t (&a)[4][4], const bf16* tile, int r0) {
  FLASH_MMA_UNROLL
  for (int kk = 0; kk < 4; kk++) load_a(a[kk], tile, r0, kk * 16);
}

}  // namespace flash_mma

// grid (query blocks, B*NH), the last query block (most key tiles) first.
__global__ void __launch_bounds__(flash_mma::kThreads)
    flash_forward_mma_kernel(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int T_, int C, int NH,
                             float scale, bool packed) {
  using namespace flash_mma;
  DYNAMIC_SHARED(unsigned char, smem);
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sK[2] = {sQ + kTileElems, sQ + kTileElems * size_t{2}};
  bf16* sV[2] = {sQ + kTileElems * size_t{3}, sQ + kTileElems * size_t{4}};
  const int qb = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int hs = C / NH, q0 = qb * kTile, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = warp * 16, qg = q0 + row0 + lane / 4, t = lane % 4;  // this lane's rows: qg, qg + 8
  const bf16* base = qkv + size_t(b) * T_ * 3 * C + size_t(h) * hs;
  stage_tile(sQ, base, 3 * C, q0, T_, hs, packed);
  stage_tile(sK[0], base + C, 3 * C, 0, T_, hs, packed);
  stage_tile(sV[0], base + size_t{2} * C, 3 * C, 0, T_, hs, packed);
  mma::cp_async_commit();
  uint32_t qf[4][4];
  float o[8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // l: this lane's part of the row sum
  for (int kt = 0; kt <= qb; kt++) {
    if (kt < qb) {  // tile kt+1 in flight while kt is used
      stage_tile(sK[(kt + 1) % 2], base + C, 3 * C, (kt + 1) * kTile, T_, hs, packed);
      stage_tile(sV[(kt + 1) % 2], base + size_t{2} * C, 3 * C, (kt + 1) * kTile, T_, hs, packed);
      mma::cp_async_commit();
      mma::cp_async_wait<1>();
    } else {
      mma::cp_async_wait<0>();
    }
    __syncthreads();
    if (kt == 0) {
      FLASH_MMA_UNROLL
      for (int kk = 0; kk < 4; kk++) load_a(qf[kk], sQ, row0, kk * 16);
    }
    float s[8][4] = {};
    mma_rows_n(s, qf, sK[kt % 2]);
    // scale and mask (key > query or key >= T), row maxima over the quad
    const int k0 = kt * kTile;
    float mx[2] = {-INFINITY, -INFINITY};
    FLASH_MMA_UNROLL
    for (int n = 0; n < 8; n++) {
      FLASH_MMA_UNROLL
      for (int e = 0; e < 4; e++) {
        const int key = k0 + n * 8 + 2 * t + e % 2, q = qg + 8 * (e / 2);
        s[n][e] = (key <= q && key < T_) ? s[n][e] * scale : -INFINITY;
        mx[e / 2] = fmaxf(mx[e / 2], s[n][e]);
      }
    }
    float alpha[2];
    FLASH_MMA_UNROLL
    for (int r = 0; r < 2; r++) {
      const float m_new = fmaxf(m[r], quad_max(mx[r]));  // finite: key 0 is in tile 0
      alpha[r] = expf(m[r] - m_new);
      m[r] = m_new;
      l[r] *= alpha[r];
    }
    FLASH_MMA_UNROLL
    for (int n = 0; n < 8; n++) {
      FLASH_MMA_UNROLL
      for (int e = 0; e < 4; e++) {
        const float p = s[n][e] == -INFINITY ? 0.0f : expf(s[n][e] - m[e / 2]);
        l[e / 2] += p;
        s[n][e] = p;
        o[n][e] *= alpha[e / 2];
      }
    }
    uint32_t pf[4][4];
    to_a_fragments(pf, s);
    mma_rows_k(o, pf, sV[kt % 2]);
    __syncthreads();  // every warp is done with buffer kt%2 before tile kt+2 is staged into it
  }
  // out = O / l (rows staged through this warp's rows of sQ, free since kt = 0); lse = m + log l
  const float l0 = quad_sum(l[0]), l8 = quad_sum(l[1]);
  if (t == 0 && qg < T_) lse[size_t(bh) * T_ + qg] = m[0] + logf(l0);
  if (t == 0 && qg + 8 < T_) lse[size_t(bh) * T_ + qg + 8] = m[1] + logf(l8);
  store_rows(out + size_t(b) * T_ * C + size_t(h) * hs, C, q0 + row0, T_, hs, packed, sQ + size_t(row0) * kLd, o,
             1.0f / l0, 1.0f / l8);
}

// ---- backward ---------------------------------------------------------------------------------
// FlashAttention-2's order: D = rowsum(dO o O) once per row (the forward's out),
// then one kernel per key block over the query tiles at or below the diagonal,
// five tile products per tile pair: S^T = K Q^T, dP^T = V dO^T, dv += P^T dO,
// dk += dS^T Q, and dq's part dS K. dq of a query tile collects parts from
// every key block at or above it; they are added in a fixed order (the
// diagonal block first, then descending key blocks) into an fp32 accumulator
// in scratch, each block waiting for its turn on a per-tile counter, and the
// last one (key block 0) stores dq = scale * sum in bf16. No atomics on data:
// deterministic. Blocks are numbered so that the block a block waits for has
// the lower linear index (launched earlier) and reaches the tile one tile
// earlier, so waits are short and cannot deadlock.

// D[bh, t] = sum_d dO[b, t, h, d] out[b, t, h, d] (fp32 sums of exact bf16 products), 8 lanes per row.
__global__ void __launch_bounds__(128)
    flash_backward_dsum_kernel(float* dsum, const __nv_bfloat16* dout, const __nv_bfloat16* out, int B, int T_, int C,
                               int NH, bool packed) {
  const int hs = C / NH, lane8 = threadIdx.x % 8;
  const size_t row = size_t(blockIdx.x) * 16 + threadIdx.x / 8;  // (b*NH + h)*T + t
  const bool valid = row < size_t(B) * NH * T_;                   // all lanes stay for the shuffles
  const int t = static_cast<int>(row % T_), bh = static_cast<int>(row / T_), b = bh / NH, h = bh % NH;
  const size_t off = (size_t(b) * T_ + t) * C + size_t(h) * hs;
  float acc = 0.0f;
  if (!valid) {
  } else if (packed) {  // hs == 64: one 16-byte load of each per lane
    float x[8], y[8];
    load_floats<8>(x, dout + off + size_t(lane8) * 8);
    load_floats<8>(y, out + off + size_t(lane8) * 8);
    for (int e = 0; e < 8; e++) acc += x[e] * y[e];
  } else {
    for (int d = lane8; d < hs; d += 8) acc += __bfloat162float(dout[off + d]) * __bfloat162float(out[off + d]);
  }
  acc += __shfl_xor_sync(0xffffffffu, acc, 1);
  acc += __shfl_xor_sync(0xffffffffu, acc, 2);
  acc += __shfl_xor_sync(0xffffffffu, acc, 4);
  if (valid && lane8 == 0) dsum[row] = acc;
}

namespace flash_mma {
// Scratch of the backward (fp32 words): D (B*NH*T), the dq accumulator
// (B*NH x tiles x 64 rows x 64), one turn counter per (head, query tile).
inline size_t backward_tiles(int T_) { return static_cast<size_t>((T_ + kTile - 1) / kTile); }
inline size_t backward_scratch_floats(int B, int T_, int NH) {
  const size_t heads = static_cast<size_t>(B) * NH, tiles = backward_tiles(T_);
  return heads * T_ + heads * tiles * kTile * kHead + heads * tiles;
}
constexpr size_t backward_smem() { return 7 * kTileBytes + sizeof(float) * 4 * kTile; }  // K V | Q dO x 2 | dS | lse D x 2

// Waits until *turn == want (thread 0; the block then passes a __syncthreads).
// A turn that never comes (a block not scheduled, a bug) ends the launch with an
// error after ~30 s instead of hanging.
__device__ inline void wait_for_turn(const int* turn, int want) {
#if defined(__CUDA_ARCH__)
  const long long start = clock64();
  int now;
  for (;;) {
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(now) : "l"(turn) : "memory");
    if (now == want) break;
    __nanosleep(64);
    if (clock64() - start > 60LL * 1000 * 1000 * 1000) __trap();
  }
#elif GPT2_EMULATED
  emu::ptx::wait_for_value(turn, want, "flash backward: a key block's turn on a dq tile never came");
#endif
}
__device__ inline void pass_turn(int* turn, int next) {
#if defined(__CUDA_ARCH__)
  asm volatile("st.release.gpu.global.s32 [%0], %1;\n" ::"l"(turn), "r"(next) : "memory");
#elif GPT2_EMULATED
  __atomic_store_n(turn, next, __ATOMIC_RELEASE);
#endif
}
}  // namespace flash_mma

// grid (key blocks, B*NH); block x holds key block nkb-1-x (the last key block first).
__global__ void __launch_bounds__(flash_mma::kThreads)
    flash_backward_mma_kernel(__nv_bfloat16* dqkv, float* scratch, const __nv_bfloat16* dout,
                              const __nv_bfloat16* qkv, const float* lse, int T_, int C, int NH, float scale,
                              bool packed) {
  using namespace flash_mma;
  DYNAMIC_SHARED(unsigned char, smem);
  bf16* sK = reinterpret_cast<bf16*>(smem);
  bf16* sV = sK + kTileElems;
  bf16* sQ[2] = {sK + kTileElems * size_t{2}, sK + kTileElems * size_t{3}};
  bf16* sdO[2] = {sK + kTileElems * size_t{4}, sK + kTileElems * size_t{5}};
  bf16* sdS = sK + kTileElems * size_t{6};                              // dS^T [key][query]
  float* sLD = reinterpret_cast<float*>(sK + kTileElems * size_t{7});  // [buffer][lse 64 | D 64]
  const int nqb = gridDim.x, kb = nqb - 1 - blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int hs = C / NH, k0 = kb * kTile, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = warp * 16, g = lane / 4, t = lane % 4, kg = k0 + row0 + g;  // this lane's keys: kg, kg + 8
  const size_t heads = size_t(gridDim.y);
  const float* dsum = scratch;
  float* dq_acc = scratch + heads * T_ + size_t(bh) * nqb * kTile * kHead;  // [tile][64][64]
  int* turns = reinterpret_cast<int*>(scratch + heads * T_ + heads * nqb * kTile * kHead) + size_t(bh) * nqb;
  const bf16* base = qkv + size_t(b) * T_ * 3 * C + size_t(h) * hs;
  const bf16* dbase = dout + size_t(b) * T_ * C + size_t(h) * hs;
  bf16* drow = dqkv + size_t(b) * T_ * 3 * C + size_t(h) * hs;
  auto stage_rows = [&](int qt) {  // lse and D of query tile qt (plain loads: rows of T_ floats are unaligned)
    for (int i = threadIdx.x; i < 2 * kTile; i += kThreads) {
      const int q = qt * kTile + i % kTile;
      sLD[(qt % 2) * 2 * kTile + i] = q < T_ ? (i < kTile ? lse : dsum)[size_t(bh) * T_ + q] : 0.0f;
    }
  };
  stage_tile(sK, base + C, 3 * C, k0, T_, hs, packed);
  stage_tile(sV, base + size_t{2} * C, 3 * C, k0, T_, hs, packed);
  stage_pair(sQ[kb % 2], base, 3 * C, sdO[kb % 2], dbase, C, k0, T_, hs, packed);
  stage_rows(kb);
  uint32_t kf[4][4];  // K's A fragments stay in registers; V's are read per tile (register pressure)
  float dk[8][4] = {}, dv[8][4] = {};
  for (int qt = kb; qt < nqb; qt++) {
    if (qt + 1 < nqb) {
      stage_pair(sQ[(qt + 1) % 2], base, 3 * C, sdO[(qt + 1) % 2], dbase, C, (qt + 1) * kTile, T_, hs, packed);
      stage_rows(qt + 1);
      mma::cp_async_wait<1>();
    } else {
      mma::cp_async_wait<0>();
    }
    __syncthreads();
    if (qt == kb) load_rows(kf, sK, row0);
    const bf16* Q = sQ[qt % 2];
    const bf16* dO = sdO[qt % 2];
    const float* L = sLD + size_t(qt % 2) * 2 * kTile;
    float p[8][4] = {}, ds[8][4] = {};
    mma_rows_n(p, kf, Q);    // S^T
    mma_rows_n(ds, sV, row0, dO);  // dP^T
    FLASH_MMA_UNROLL
    for (int n = 0; n < 8; n++)
      FLASH_MMA_UNROLL
      for (int e = 0; e < 4; e++) {
        const int c = n * 8 + 2 * t + e % 2, q = qt * kTile + c, key = kg + 8 * (e / 2);
        p[n][e] = (key <= q && q < T_) ? expf(p[n][e] * scale - L[c]) : 0.0f;
        ds[n][e] = p[n][e] * (ds[n][e] - L[kTile + c]);  // dS^T
      }
    uint32_t pf[4][4], dsf[4][4];
    to_a_fragments(pf, p);
    to_a_fragments(dsf, ds);
    mma_rows_k(dv, pf, dO);
    mma_rows_k(dk, dsf, Q);
    // dS^T (bf16, as rounded for the products above) to shared; dq's part: dS K, 16 query rows per warp
    FLASH_MMA_UNROLL
    for (int kk = 0; kk < 4; kk++) {
      const int at = (row0 + g) * kLd + kk * 16 + 2 * t, at8 = at + 8 * kLd;
      *reinterpret_cast<uint32_t*>(sdS + at) = dsf[kk][0];
      *reinterpret_cast<uint32_t*>(sdS + at8) = dsf[kk][1];
      *reinterpret_cast<uint32_t*>(sdS + at + 8) = dsf[kk][2];
      *reinterpret_cast<uint32_t*>(sdS + at8 + 8) = dsf[kk][3];
    }
    __syncthreads();
    float dq[8][4] = {};
    uint32_t af[4][4];
    FLASH_MMA_UNROLL
    for (int kk = 0; kk < 4; kk++) load_a_transposed(af[kk], sdS, kk * 16, row0);
    mma_rows_k(dq, af, sK);
    // add this part to the tile's sum in turn: diagonal block first, key block 0 last
    const int turn = qt - kb;
    if (threadIdx.x == 0 && turn > 0) wait_for_turn(turns + qt, turn);
    __syncthreads();
    float* acc = dq_acc + size_t(qt) * kTile * kHead + size_t(row0) * kHead;
    FLASH_MMA_UNROLL
    for (int n = 0; n < 8; n++)
      FLASH_MMA_UNROLL
      for (int r = 0; r < 2; r++) {
        const int at = (g + 8 * r) * kHead + n * 8 + 2 * t, e = r + r;  // e: this row's pair in the fragment
        float2* cell = reinterpret_cast<float2*>(acc + at);
        float2 v = make_float2(dq[n][e], dq[n][e + 1]);
        if (turn > 0) {
          const float2 old = __ldcg(cell);
          v.x = old.x + v.x, v.y = old.y + v.y;
        }
        dq[n][e] = v.x, dq[n][e + 1] = v.y;
        if (kb > 0) __stcg(cell, v);
      }
    if (kb == 0) {  // the last part: dq = scale * sum, stored once
      store_rows(drow, size_t(3) * C, qt * kTile + row0, T_, hs, packed, sdS + size_t(row0) * kLd, dq, scale, scale);
    } else {
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) pass_turn(turns + qt, turn + 1);
    }
    __syncthreads();  // buffers qt%2 and dS are free for the next tile
  }
  store_rows(drow + C, size_t(3) * C, k0 + row0, T_, hs, packed, sK + size_t(row0) * kLd, dk, scale, scale);
  store_rows(drow + size_t{2} * C, size_t(3) * C, k0 + row0, T_, hs, packed, sV + size_t(row0) * kLd, dv, 1.0f,
             1.0f);
}

}  // namespace kern
}  // namespace gpt2

#undef FLASH_MMA_UNROLL

#endif  // BACKEND_CUDA_FLASH_MMA_CUH
