// Flash attention on mma.sync: the kernels, one body per storage type over the
// tile operations of backend/cuda/flash_tiles.cuh (Bf16Ops: bf16 m16n8k16;
// Tf32Ops: fp32 storage on tf32 m16n8k8, plain or 3xTF32). Key tiles of 64,
// hs <= 64 zero padded, lse per row, blocks of 4 warps.
//
// Geometry: a product's B operand is read from shared memory by every warp that
// uses it, so the shared traffic per FLOP falls with the rows a warp owns. The
// bf16 forward gives each warp 32 query rows (two 16-row groups sharing every K
// and V fragment), 128 per block: registers Q 32, S 64, O 64 (255 in all, 2 blocks
// per SM). fp32 keeps 16 rows per warp (64 per block): its fragments are twice
// as wide. The backward (one block per 64 keys) splits each 64 x 64 tile pair
// into a 2 x 2 grid of 32 keys x 32 queries per warp; bf16 then keeps P^T in
// registers as the A operand of dv (each warp sums its queries' part of dv).
//
// Forward, per key tile:
//   registers  Q's A fragments (loaded once), S = Q K^T in mma C fragments, the
//              online softmax on them (a row's 64 columns live in the 4 lanes of
//              a quad: two shuffles reduce it), P used as the A operand of P V
//              straight from its C fragments (bf16: rounded pairs; tf32: the
//              permuted k order), O's accumulators rescaled in place by
//              exp2(m_old - m_new) (the softmax in base 2: flash_tiles.cuh);
//   shared     Q, and K and V double-buffered: after the tile's one barrier the
//              next tile is staged (cp.async) into the buffer every warp is done
//              with, while this one is multiplied. Rows padded (bf16 144 bytes,
//              fp32 272) so that every ldmatrix and cp.async request is
//              conflict-free. bf16 54 KiB, fp32 85 KiB.
// Shared traffic per 64x64 tile pair (bf16): ~361 wavefronts against 1,048,576
// tensor-core FLOPs, every request at its conflict-free minimum (docs/kernels.md,
// profile table). Numerics: S, max, sum and O in fp32; P rounded to the operand
// type (bf16 or tf32; 3xTF32 keeps fp32 accuracy) relative to the running max;
// out = O / l rounded once to the storage type. Each row visits the same key
// tiles in the same order with any rows per warp: the bits do not depend on it.
#ifndef BACKEND_CUDA_FLASH_MMA_CUH
#define BACKEND_CUDA_FLASH_MMA_CUH

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/flash_tiles.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/pack128.cuh"
#include "util/philox.h"

namespace gpt2 {
namespace kern {
namespace flash_mma {

#if defined(__CUDACC__)
#define FLASH_MMA_UNROLL _Pragma("unroll")
#define FLASH_MMA_NO_UNROLL _Pragma("unroll 1")
#else
#define FLASH_MMA_UNROLL
#define FLASH_MMA_NO_UNROLL
#endif

template <class Ops>
__host__ __device__ constexpr size_t tile_elems() { return size_t(kTile) * Ops::kLd; }  // one [64][kLd] tile
template <class Ops>
__host__ __device__ constexpr int forward_rows() { return kWarps * 16 * Ops::kForwardGroups; }  // per block
template <class Ops>  // Q (forward_rows) | K, V x 2
constexpr size_t forward_smem() {
  return (size_t(forward_rows<Ops>()) * Ops::kLd + 4 * tile_elems<Ops>()) * sizeof(typename Ops::T);
}

// Tiles [t0, t0+64) of two head slices into two [64][kLd] tiles, as one cp.async group.
template <class Ops, class T>
__device__ inline void stage_pair(T* da, const T* sa, int row_a, T* db, const T* sb, int row_b, int t0, int T_,
                                  int hs, bool packed) {
  stage_tile(da, Ops::kLd, sa, row_a, t0, T_, hs, packed);
  stage_tile(db, Ops::kLd, sb, row_b, t0, T_, hs, packed);
  mma::cp_async_commit();
}

// Attention dropout on a lane's C fragments of N8 n8 tiles (backend.h's Z):
// fragment element [n][e] is (row r0 + 8 (e / 2), column c0 + 8 n + e % 2) with
// r0, c0 (= the tiles' first column + 2 t) bit-3 clear. One Philox call per (column
// pair m, c) gives the 2x2 block {r0, r0+8} x {col, col+8}, col = c0 + 16 m + c;
// kQueriesAreRows says whether rows are queries (forward) or keys (backward: P^T).
// apply(n, e, z) receives each element's factor z (0 or 1/(1-p)): N8 calls per lane.
template <bool kQueriesAreRows, int N8 = 8, class F>
__device__ inline void for_each_dropout_factor(const DropoutMask& drop, uint64_t row_token, int T_, int h, int r0,
                                               int c0, F&& apply) {
  const uint32_t threshold = drop.threshold();
  const float keep = drop.keep_scale();
  FLASH_MMA_UNROLL
  for (int m = 0; m < N8 / 2; m++) {
    FLASH_MMA_UNROLL
    for (int c = 0; c < 2; c++) {
      const int col = c0 + 16 * m + c;
      // words: 2 * (query bit 3) + (key bit 3); rows bit 3 is e / 2, columns bit 3 is n % 2
      const Philox4 d = kQueriesAreRows ? drop.attention_draws(row_token, T_, h, r0, col)
                                        : drop.attention_draws(row_token, T_, h, col, r0);
      FLASH_MMA_UNROLL
      for (int w = 0; w < 4; w++) {
        const int row_hi = kQueriesAreRows ? w / 2 : w % 2, col_hi = kQueriesAreRows ? w % 2 : w / 2;
        apply(2 * m + col_hi, 2 * row_hi + c, d.v[w] >= threshold ? keep : 0.0f);
      }
    }
  }
}

}  // namespace flash_mma

namespace flash_mma {
// One key tile of the online softmax for one 16-row group: s (raw scores) becomes
// P = exp2(s c - m_new), m and l move to the new running max, o is rescaled.
// diag: the tile of the group's own rows, masked (key > query or key >= T); below
// it every key precedes every query of the group and lies before T.
__device__ inline void softmax_tile(Acc& s, Acc& o, float (&m)[2], float (&l)[2], float c, bool diag, int k0, int qg,
                                    int t, int T_) {
  if (diag)
    FLASH_MMA_UNROLL
    for (int n = 0; n < 8; n++)
      FLASH_MMA_UNROLL
      for (int e = 0; e < 4; e++) {
        const int key = k0 + n * 8 + 2 * t + e % 2, q = qg + 8 * (e / 2);
        if (!(key <= q && key < T_)) s[n][e] = -INFINITY;
      }
  float mx[2] = {-INFINITY, -INFINITY};
  FLASH_MMA_UNROLL
  for (int n = 0; n < 8; n++)
    FLASH_MMA_UNROLL
    for (int e = 0; e < 4; e++) mx[e / 2] = fmaxf(mx[e / 2], s[n][e]);
  // m is the running max of the rounded s * c, in log2 units: c > 0 and rounding
  // is monotone, so the rounded product of the raw max is that max.
  float alpha[2], neg_m[2];
  FLASH_MMA_UNROLL
  for (int r = 0; r < 2; r++) {
    const float m_new = fmaxf(m[r], quad_max(mx[r]) * c);  // finite: key 0 is in tile 0
    alpha[r] = exp2f(m[r] - m_new);
    m[r] = m_new;
    neg_m[r] = -m_new;
    l[r] *= alpha[r];
  }
  FLASH_MMA_UNROLL
  for (int n = 0; n < 8; n++)
    FLASH_MMA_UNROLL
    for (int e = 0; e < 4; e++) {
      const float p = s[n][e] == -INFINITY ? 0.0f : exp2f(fmaf(s[n][e], c, neg_m[e / 2]));
      l[e / 2] += p;
      s[n][e] = p;
      o[n][e] *= alpha[e / 2];
    }
}
}  // namespace flash_mma

// grid (query blocks of forward_rows<Ops>(), B*NH), the last query block (most key tiles) first.
// kDrop: attention dropout with `drop` (backend.h); without it `drop` is unused.
template <class Ops, bool kDrop>
__global__ void __launch_bounds__(flash_mma::kThreads, 2)
    flash_forward_mma_kernel(typename Ops::T* out, float* lse, const typename Ops::T* qkv, int T_, int C, int NH,
                             float scale, bool packed, DropoutMask drop) {
  using namespace flash_mma;
  using T = typename Ops::T;
  constexpr int kLd = Ops::kLd, G = Ops::kForwardGroups, kRows = forward_rows<Ops>();
  constexpr size_t kTileElems = tile_elems<Ops>();
  DYNAMIC_SHARED(unsigned char, smem);
  // [kRows][kLd] Q, then buffer j of K at sKV + 2 j kTileElems and of V one tile after
  // it (offsets, not an array of pointers: a run-time index into one would live on the stack)
  T* sQ = reinterpret_cast<T*>(smem);
  T* sKV = sQ + size_t(kRows) * kLd;
  auto sK = [&](int kt) { return sKV + size_t(kt % 2) * 2 * kTileElems; };
  auto sV = [&](int kt) { return sK(kt) + kTileElems; };
  const int qb = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int hs = C / NH, q0 = qb * kRows, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = warp * 16 * G, qw = q0 + row0, qg = qw + lane / 4, t = lane % 4;  // group i: qg + 16 i, +8
  // The block's key tiles end at its last query before T. A warp's rows lie in one
  // 64-key tile (16 G divides 64), `mine`: the tiles after it are all masked for the
  // warp, which skips them (it still stages and meets the barriers).
  const int last = (min(q0 + kRows, T_) - 1) / kTile, mine = min(qw / kTile, last);
  const T* base = qkv + size_t(b) * T_ * 3 * C + size_t(h) * hs;
  for (int r = 0; r < kRows; r += kTile) stage_tile(sQ + size_t(r) * kLd, kLd, base, 3 * C, q0 + r, T_, hs, packed);
  stage_pair<Ops>(sK(0), base + C, 3 * C, sV(0), base + size_t{2} * C, 3 * C, 0, T_, hs, packed);  // with Q's
  typename Ops::Rows qf[G];
  Acc o[G] = {};
  const float c = exp2_scale(scale);
  float m[G][2], l[G][2];  // l: this lane's part of the row sum
  FLASH_MMA_UNROLL
  for (int i = 0; i < G; i++) m[i][0] = m[i][1] = -INFINITY, l[i][0] = l[i][1] = 0.0f;
  for (int kt = 0; kt <= last; kt++) {
    // One barrier per tile: tile kt has landed for every thread, and every warp is
    // done with tile kt-1, whose buffer then takes tile kt+1 while kt is used.
    mma::cp_async_wait<0>();
    __syncthreads();
    if (kt < last)
      stage_pair<Ops>(sK(kt + 1), base + C, 3 * C, sV(kt + 1), base + size_t{2} * C, 3 * C, (kt + 1) * kTile, T_,
                      hs, packed);
    if (kt == 0) Ops::load_rows(qf, sQ, row0);
    if (kt > mine) continue;
    Acc s[G] = {};
    Ops::mma_rows_n(s, qf, sK(kt));
    const int k0 = kt * kTile;
    FLASH_MMA_UNROLL
    for (int i = 0; i < G; i++) {
      softmax_tile(s[i], o[i], m[i], l[i], c, kt == mine, k0, qg + 16 * i, t, T_);
      if constexpr (kDrop)  // after the row sums (they are P's): P o Z multiplies V
        for_each_dropout_factor<true>(drop, drop.token0 + size_t(b) * T_, T_, h, qg + 16 * i, k0 + 2 * t,
                                      [&](int n, int e, float z) { s[i][n][e] *= z; });
    }
    Ops::mma_c_rows_k(o, s, sV(kt));
  }
  // out = O / l (rows staged through this warp's own rows of sQ, read only at kt = 0).
  // lse = (m + log2 l) ln 2, natural log units. Its roundings (the add, ln 2 and
  // the product) are relative to lse itself. m ln 2 + log l would round m ln 2
  // relative to |m|, which is larger than |lse| when m and log l nearly cancel.
  FLASH_MMA_UNROLL
  for (int i = 0; i < G; i++) {
    const int q = qg + 16 * i;
    const float l0 = quad_sum(l[i][0]), l8 = quad_sum(l[i][1]);
    if (t == 0 && q < T_) lse[size_t(bh) * T_ + q] = (m[i][0] + log2f(l0)) * kLn2;
    if (t == 0 && q + 8 < T_) lse[size_t(bh) * T_ + q + 8] = (m[i][1] + log2f(l8)) * kLn2;
    Ops::store_rows(out + size_t(b) * T_ * C + size_t(h) * hs, C, qw + 16 * i, T_, hs, packed,
                    sQ + size_t(row0 + 16 * i) * kLd, o[i], 1.0f / l0, 1.0f / l8);
  }
}

// ---- backward ---------------------------------------------------------------------------------
// FlashAttention-2's order: D = rowsum(dO o O) once per row (the forward's out),
// then one kernel per key block over the query tiles at or below the diagonal,
// five tile products per tile pair: S^T = K Q^T, dP^T = V dO^T, dv += P^T dO,
// dk += dS^T Q, and dq's part dS K. dq of a query tile collects parts from
// every key block at or above it; they are added in a fixed order (the
// diagonal block first, then descending key blocks) into an fp32 accumulator
// in scratch, each block waiting for its turn on a per-tile counter, and the
// last one (key block 0) stores dq = scale * sum in the storage type. No atomics on data:
// deterministic. Blocks are numbered so that the block a block waits for has
// the lower linear index (launched earlier) and reaches the tile one tile
// earlier, so waits are short and cannot deadlock.
// Per tile pair: S^T and dP^T per warp on 32 keys x 32 queries (K's fragments in
// registers, V's read per tile: registers), dS^T rounded to the operand type into
// shared memory (dk and dq need all 64 queries of a warp's keys, all 64 keys of a
// warp's queries), then dk per warp on 32 keys x 32 of d and dq's part on 32
// queries x 32 of d. dv, bf16: P^T's C fragments are the A operand as they stand
// (rounded pairs), so each warp adds P^T dO over its own 32 queries for all 64 of
// d (B: its 32 rows of dO), and the two query halves of a key's dv are added once
// at the end (fp32, through shared memory): no P^T trip, and dv reads half the
// shared bytes, for 32 more accumulator registers. fp32 (twice the registers per
// fragment) writes P^T to shared memory too and splits dv as dk.
// ~1,397 shared wavefronts against 2.58 MFLOP (bf16). Two barriers: one before
// the tile is used (staging, the previous tile's dq turn passed on) and one after
// dS^T (and fp32's P^T) is written (also the wait for this block's dq turn).

// D[bh, t] = sum_d dO[b, t, h, d] out[b, t, h, d] in fp32 (bf16: sums of exact products), 8 lanes per row.
template <class T>
__global__ void __launch_bounds__(128)
    flash_backward_dsum_kernel(float* dsum, const T* dout, const T* out, int B, int T_, int C, int NH, bool packed) {
  const int hs = C / NH, lane8 = threadIdx.x % 8;
  const size_t row = size_t(blockIdx.x) * 16 + threadIdx.x / 8;  // (b*NH + h)*T + t
  const bool valid = row < size_t(B) * NH * T_;                   // all lanes stay for the shuffles
  const int t = static_cast<int>(row % T_), bh = static_cast<int>(row / T_), b = bh / NH, h = bh % NH;
  const size_t off = (size_t(b) * T_ + t) * C + size_t(h) * hs;
  float acc = 0.0f;
  if (!valid) {
  } else if (packed) {  // hs == 64: 16-byte chunks lane8, lane8 + 8 (fp32), so a request covers whole rows
    constexpr int P = kPack<T>;
    for (int j = 0; j < 8 / P; j++) {
      float x[P], y[P];
      const size_t at = off + size_t(lane8 + 8 * j) * P;
      load_floats<P>(x, dout + at);
      load_floats<P>(y, out + at);
      for (int e = 0; e < P; e++) acc += x[e] * y[e];
    }
  } else {
    for (int d = lane8; d < hs; d += 8) acc += to_float(dout[off + d]) * to_float(out[off + d]);
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
template <class Ops>  // K V | Q dO x 2 | P^T (bf16: key block 0's dq staging) dS^T | lse D x 2
constexpr size_t backward_smem() { return 8 * tile_elems<Ops>() * sizeof(typename Ops::T) + sizeof(float) * 4 * kTile; }

// P^T and dS^T of one warp's 32 keys x 8 N8 queries from S^T (in p) and dP^T (in ds):
// P = exp2(s c - lse log2 e), dS = P (dP - D). L: the query tile's -lse log2 e (64)
// then D (64); col0 the warp's first query column in the tile, q0 the tile's first
// query. masked: the diagonal or the last tile (keys after queries, queries at or past T).
template <bool kDrop, int N8>
__device__ inline void grad_tile(float (&p)[2][N8][4], float (&ds)[2][N8][4], const float* L, float c, bool masked,
                                 int kg, int q0, int col0, int t, int T_, const DropoutMask& drop, uint64_t row_token,
                                 int h) {
  FLASH_MMA_UNROLL
  for (int n = 0; n < N8; n++) {
    const int col = col0 + n * 8 + 2 * t;  // and col + 1: one 8-byte load each of -lse and D
    const float2 neg_lse = *reinterpret_cast<const float2*>(L + col), D = *reinterpret_cast<const float2*>(L + kTile + col);
    FLASH_MMA_UNROLL
    for (int i = 0; i < 2; i++)
      FLASH_MMA_UNROLL
      for (int e = 0; e < 4; e++) {
        const int q = q0 + col + e % 2, key = kg + 16 * i + 8 * (e / 2);
        const float nl = e % 2 ? neg_lse.y : neg_lse.x, d = e % 2 ? D.y : D.x;
        p[i][n][e] = (!masked || (key <= q && q < T_)) ? exp2f(fmaf(p[i][n][e], c, nl)) : 0.0f;
        if constexpr (!kDrop) ds[i][n][e] = p[i][n][e] * (ds[i][n][e] - d);
      }
  }
  if constexpr (kDrop)
    FLASH_MMA_UNROLL
    for (int i = 0; i < 2; i++)
      for_each_dropout_factor<false, N8>(drop, row_token, T_, h, kg + 16 * i, q0 + col0 + 2 * t,
                                        [&](int n, int e, float z) {
                                          const float D = L[kTile + col0 + n * 8 + 2 * t + e % 2];
                                          ds[i][n][e] = p[i][n][e] * (ds[i][n][e] * z - D);
                                          p[i][n][e] *= z;
                                        });
}

// Waits until *turn == want (thread 0; the block then passes a __syncthreads).
// A turn that never comes (a block not scheduled, a bug) ends the launch with an
// error instead of hanging (mma::wait_acquire).
__device__ inline void wait_for_turn(const int* turn, int want) {
  mma::wait_acquire(turn, want, "flash backward: a key block's turn on a dq tile never came");
}
__device__ inline void pass_turn(int* turn, int next) { mma::store_release(turn, next); }
}  // namespace flash_mma

// grid (key blocks, B*NH); block x holds key block nkb-1-x (the last key block first).
// kDrop: the forward's dropout drawn again: dP^T o Z^T, and P^T o Z^T for dv.
// Warps: S^T, dP^T, P^T, dS^T as a 2 x 2 grid of 32 keys x 32 queries (warp w: keys
// 32 (w / 2), queries 32 (w % 2)); dk as 32 keys x 32 of d (the same keys, d 32 (w %
// 2)), dv so too (fp32) or as the warp's queries' part for 64 of d (bf16); dq's part
// as 32 queries x 32 of d (queries 32 (w / 2), d 32 (w % 2)).
template <class Ops, bool kDrop>
__global__ void __launch_bounds__(flash_mma::kThreads, 2)
    flash_backward_mma_kernel(typename Ops::T* dqkv, float* scratch, const typename Ops::T* dout,
                              const typename Ops::T* qkv, const float* lse, int T_, int C, int NH, float scale,
                              bool packed, DropoutMask drop) {
  using namespace flash_mma;
  using T = typename Ops::T;
  constexpr int kLd = Ops::kLd;
  constexpr size_t kTileElems = tile_elems<Ops>();
  DYNAMIC_SHARED(unsigned char, smem);
  T* sK = reinterpret_cast<T*>(smem);
  T* sV = sK + kTileElems;
  T* sQdO = sK + kTileElems * size_t{2};  // buffer j: Q at 2 j tiles, dO one tile after
  T* sPt = sK + kTileElems * size_t{6};   // P^T [key][query]
  T* sdSt = sK + kTileElems * size_t{7};  // dS^T [key][query]
  float* sLD = reinterpret_cast<float*>(sK + kTileElems * size_t{8});  // [buffer][-lse log2 e 64 | D 64]
  auto sQ = [&](int qt) { return sQdO + size_t(qt % 2) * 2 * kTileElems; };  // offsets: no pointer array on the stack
  auto sdO = [&](int qt) { return sQ(qt) + kTileElems; };
  const int nqb = gridDim.x, kb = nqb - 1 - blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int hs = C / NH, k0 = kb * kTile, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4, kr0 = 32 * (warp / 2), col0 = 32 * (warp % 2);
  const int qr0 = kr0, dc0 = col0;  // dq's part: queries qr0.., d dc0..
  const int kg = k0 + kr0 + g;  // this lane's keys: kg + 16 i, + 8
  const size_t heads = size_t(gridDim.y);
  const float* dsum = scratch;
  float* dq_acc = scratch + heads * T_ + size_t(bh) * nqb * kTile * kHead;  // [tile][64][64]
  int* turns = reinterpret_cast<int*>(scratch + heads * T_ + heads * nqb * kTile * kHead) + size_t(bh) * nqb;
  const T* base = qkv + size_t(b) * T_ * 3 * C + size_t(h) * hs;
  const T* dbase = dout + size_t(b) * T_ * C + size_t(h) * hs;
  T* drow = dqkv + size_t(b) * T_ * 3 * C + size_t(h) * hs;
  const uint64_t row_token = drop.token0 + size_t(b) * T_;
  // -lse in log2 units (-lse log2 e, once per row: the exponent is then one FFMA)
  // and D of query tile qt (plain loads: rows of T_ floats are unaligned)
  auto stage_rows = [&](int qt) {
    for (int i = threadIdx.x; i < 2 * kTile; i += kThreads) {
      const int q = qt * kTile + i % kTile;
      float v = 0.0f;
      if (q < T_) v = i < kTile ? -(lse[size_t(bh) * T_ + q] * kLog2e) : dsum[size_t(bh) * T_ + q];
      sLD[(qt % 2) * 2 * kTile + i] = v;
    }
  };
  const float c = exp2_scale(scale);
  stage_tile(sK, kLd, base + C, 3 * C, k0, T_, hs, packed);
  stage_tile(sV, kLd, base + size_t{2} * C, 3 * C, k0, T_, hs, packed);
  stage_pair<Ops>(sQ(kb), base, 3 * C, sdO(kb), dbase, C, k0, T_, hs, packed);
  stage_rows(kb);
  // K's A fragments stay in registers; V's are read per tile (registers).
  // dv: kRegs, this warp's part over its 32 queries for all 64 of d (the two
  // query halves are added at the end); else its 32 keys x 32 of d.
  // kRegs with dropout: the warp's 32 queries in two passes of 16, so that S^T
  // and dP^T take half the registers beside Philox's state (V's fragments are
  // then read twice per tile; K's are in registers and Q's rows are split).
  constexpr bool kRegs = Ops::kBackwardInRegisters;
  constexpr int kPasses = kRegs && kDrop ? 2 : 1, kPassCols = 32 / kPasses;
  typename Ops::Rows kf[2];
  float dk[2][4][4] = {}, dv[2][kRegs ? 8 : 4][4] = {};
  for (int qt = kb; qt < nqb; qt++) {
    // Barrier 1: tile qt has landed for every thread; every warp is done with tile
    // qt-1 (its Q/dO buffer, which takes tile qt+1 now, P^T, dS^T), and every
    // thread has written and fenced its part of dq tile qt-1, whose turn passes on.
    mma::cp_async_wait<0>();
    __syncthreads();
    if (threadIdx.x == 0 && kb > 0 && qt > kb) pass_turn(turns + qt - 1, qt - kb);
    if (qt + 1 < nqb) {
      stage_pair<Ops>(sQ(qt + 1), base, 3 * C, sdO(qt + 1), dbase, C, (qt + 1) * kTile, T_, hs, packed);
      stage_rows(qt + 1);
    }
    if (qt == kb) Ops::load_rows(kf, sK, kr0);
    const T* Q = sQ(qt);
    const T* dO = sdO(qt);
    // On the diagonal, keys 32..63 against queries 0..31 are all masked: no products.
    const bool live = !(qt == kb && kr0 > col0);
    FLASH_MMA_NO_UNROLL
    for (int pass = 0; pass < kPasses; pass++) {
      const int cq = col0 + pass * kPassCols;  // the pass's first query column
      float p[2][kPassCols / 8][4] = {}, ds[2][kPassCols / 8][4] = {};
      if (live) {
        Ops::mma_rows_n(p, kf, Q, cq);  // S^T
        Ops::mma_rows_n(ds, sV, kr0, dO, cq);  // dP^T
      }
      grad_tile<kDrop>(p, ds, sLD + size_t(qt % 2) * 2 * kTile, c, qt == kb || qt == nqb - 1, kg, qt * kTile, cq, t,
                       T_, drop, row_token, h);
      Ops::put_t(sdSt, ds, kr0, cq);
      if constexpr (kRegs) {
        if (live) Ops::mma_c_rows_k(dv, p, dO, cq);  // dv's part: P^T from registers, dO's rows cq..
      } else {
        Ops::put_t(sPt, p, kr0, cq);
      }
    }
    // Barrier 2: dS^T (and fp32's P^T) complete, and this block's turn on dq tile qt (the
    // diagonal block first, then descending, key block 0 last) has come.
    const int turn = qt - kb;
    if (threadIdx.x == 0 && turn > 0) wait_for_turn(turns + qt, turn);
    __syncthreads();
    if constexpr (!kRegs) Ops::mma_t_rows_k(dv, sPt, kr0, dO, col0);
    Ops::mma_t_rows_k(dk, sdSt, kr0, Q, col0);
    float dq[2][4][4] = {};  // queries qr0.. (two groups of 16), d dc0..
    float* acc = dq_acc + size_t(qt) * kTile * kHead;
    Ops::mma_ds(dq, sdSt, qr0, sK, dc0);
    for_each_pair(dq, qr0, dc0, [&](int row, int col, float& x, float& y) {  // the sum so far, then this part
      float2* cell = reinterpret_cast<float2*>(acc + (row * kHead + col));
      if (turn > 0) {
        const float2 old = __ldcg(cell);
        x = old.x + x, y = old.y + y;
      }
      if (kb > 0) __stcg(cell, make_float2(x, y));
    });
    if (kb == 0) {  // the last part: dq = scale * sum, stored once, staged in P^T's tile
      if constexpr (!kRegs) __syncthreads();  // every warp is past its reads of P^T
      Ops::stage_c(sPt, dq, qr0, dc0, scale);
      __syncthreads();
      store_tile(drow, size_t(3) * C, qt * kTile, T_, hs, packed, sPt, kLd);
    } else {
      __threadfence();  // before barrier 1 passes the turn
    }
  }
  // Every warp is done with K and V (they stage dk and dv now) and has fenced dq's last part.
  __syncthreads();
  if (threadIdx.x == 0 && kb > 0) pass_turn(turns + nqb - 1, nqb - kb);
  if constexpr (kRegs) {
    // dv = the query halves' parts added: odd warps hand theirs over in fp32
    // through the Q/dO buffers (free now), rows of kPartLd floats: each float2
    // request of a C fragment's rows then takes its minimum of 2 wavefronts.
    constexpr int kPartLd = kHead + 8;
    static_assert(size_t(kTile) * kPartLd * sizeof(float) <= 4 * kTileElems * sizeof(T), "dv's part fits");
    float* part = reinterpret_cast<float*>(sQdO);
    if (warp % 2 == 1)
      for_each_pair(dv, kr0, 0, [&](int row, int col, float x, float y) {
        *reinterpret_cast<float2*>(part + (row * kPartLd + col)) = make_float2(x, y);
      });
    __syncthreads();
    if (warp % 2 == 0) {
      for_each_pair(dv, kr0, 0, [&](int row, int col, float& x, float& y) {
        const float2 o = *reinterpret_cast<const float2*>(part + (row * kPartLd + col));
        x += o.x, y += o.y;
      });
      Ops::stage_c(sV, dv, kr0, 0, 1.0f);
    }
  } else {
    Ops::stage_c(sV, dv, kr0, col0, 1.0f);
  }
  Ops::stage_c(sK, dk, kr0, col0, scale);
  __syncthreads();
  store_tile(drow + C, size_t(3) * C, k0, T_, hs, packed, sK, kLd);
  store_tile(drow + size_t{2} * C, size_t(3) * C, k0, T_, hs, packed, sV, kLd);
}

}  // namespace kern
}  // namespace gpt2

#undef FLASH_MMA_UNROLL
#undef FLASH_MMA_NO_UNROLL

#endif  // BACKEND_CUDA_FLASH_MMA_CUH
