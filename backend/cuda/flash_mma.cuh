// Flash attention on mma.sync: the kernels, one body per storage type over the
// tile operations of backend/cuda/flash_tiles.cuh (Bf16Ops: bf16 m16n8k16;
// Tf32Ops: fp32 storage on tf32 m16n8k8, plain or 3xTF32). 64 query rows per
// block of 4 warps, 16 per warp, key tiles of 64, hs <= 64 zero padded, lse per
// row. Only the K/V (forward) and Q/dO (backward) operands go through shared memory:
//
//   registers  Q's A fragments (loaded once), S = Q K^T in mma C fragments, the
//              online softmax on them (a row's 64 columns live in the 4 lanes of
//              a quad: two shuffles reduce it), P used as the A operand of P V
//              straight from its C fragments (bf16: rounded pairs; tf32: the
//              permuted k order), O's accumulators rescaled in place by
//              exp2(m_old - m_new) (the softmax in base 2: flash_tiles.cuh);
//   shared     Q, and K and V double-buffered: tile kt+1 is in flight (cp.async)
//              while tile kt is multiplied. Rows padded (bf16 144 bytes, fp32 272)
//              so that every ldmatrix and cp.async request is conflict-free.
//              5 tiles: bf16 45 KiB, fp32 85 KiB.
//
// Shared traffic per 64x64 tile pair and warp: K by ldmatrix, V by ldmatrix.trans
// (bf16) or 4-byte loads (fp32), K and V staging by 16-byte cp.async; every
// request at its conflict-free minimum (docs/kernels.md, profile table).
// Numerics: S, max, sum and O in fp32; P rounded to the operand type (bf16 or
// tf32; 3xTF32 keeps fp32 accuracy) relative to the running max; out = O / l
// rounded once to the storage type.
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
#else
#define FLASH_MMA_UNROLL
#endif

template <class Ops>
__host__ __device__ constexpr size_t tile_elems() { return size_t(kTile) * Ops::kLd; }  // one [64][kLd] tile
template <class Ops>
constexpr size_t forward_smem() { return 5 * tile_elems<Ops>() * sizeof(typename Ops::T); }  // Q | K, V x 2

// Tiles [t0, t0+64) of two head slices into two [64][kLd] tiles, as one cp.async group.
template <class Ops, class T>
__device__ inline void stage_pair(T* da, const T* sa, int row_a, T* db, const T* sb, int row_b, int t0, int T_,
                                  int hs, bool packed) {
  stage_tile(da, Ops::kLd, sa, row_a, t0, T_, hs, packed);
  stage_tile(db, Ops::kLd, sb, row_b, t0, T_, hs, packed);
  mma::cp_async_commit();
}

// Attention dropout on a lane's C fragments of one 64-column tile (backend.h's Z):
// fragment element [n][e] is (row r0 + 8 (e / 2), column c0 + 8 n + e % 2) with
// r0, c0 (= tile column + 2 t) bit-3 clear. One Philox call per (column pair m, c)
// gives the 2x2 block {r0, r0+8} x {col, col+8}, col = c0 + 16 m + c; kQueriesAreRows
// says whether rows are queries (forward) or keys (backward: P^T). apply(n, e, z)
// receives each element's factor z (0 or 1/(1-p)): 8 calls per lane and 64x64 tile.
template <bool kQueriesAreRows, class F>
__device__ inline void for_each_dropout_factor(const DropoutMask& drop, uint64_t row_token, int T_, int h, int r0,
                                               int c0, F&& apply) {
  const uint32_t threshold = drop.threshold();
  const float keep = drop.keep_scale();
  FLASH_MMA_UNROLL
  for (int m = 0; m < 4; m++) {
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

// grid (query blocks, B*NH), the last query block (most key tiles) first.
// kDrop: attention dropout with `drop` (backend.h); without it `drop` is unused.
template <class Ops, bool kDrop>
__global__ void __launch_bounds__(flash_mma::kThreads)
    flash_forward_mma_kernel(typename Ops::T* out, float* lse, const typename Ops::T* qkv, int T_, int C, int NH,
                             float scale, bool packed, DropoutMask drop) {
  using namespace flash_mma;
  using T = typename Ops::T;
  constexpr int kLd = Ops::kLd;
  constexpr size_t kTileElems = tile_elems<Ops>();
  DYNAMIC_SHARED(unsigned char, smem);
  T* sQ = reinterpret_cast<T*>(smem);
  T* sK[2] = {sQ + kTileElems, sQ + kTileElems * size_t{2}};
  T* sV[2] = {sQ + kTileElems * size_t{3}, sQ + kTileElems * size_t{4}};
  const int qb = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int hs = C / NH, q0 = qb * kTile, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = warp * 16, qg = q0 + row0 + lane / 4, t = lane % 4;  // this lane's rows: qg, qg + 8
  const T* base = qkv + size_t(b) * T_ * 3 * C + size_t(h) * hs;
  stage_tile(sQ, kLd, base, 3 * C, q0, T_, hs, packed);
  stage_pair<Ops>(sK[0], base + C, 3 * C, sV[0], base + size_t{2} * C, 3 * C, 0, T_, hs, packed);
  typename Ops::Rows qf;
  float o[8][4] = {};
  const float c = exp2_scale(scale);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // l: this lane's part of the row sum
  for (int kt = 0; kt <= qb; kt++) {
    if (kt < qb) {  // tile kt+1 in flight while kt is used
      stage_pair<Ops>(sK[(kt + 1) % 2], base + C, 3 * C, sV[(kt + 1) % 2], base + size_t{2} * C, 3 * C,
                      (kt + 1) * kTile, T_, hs, packed);
      mma::cp_async_wait<1>();
    } else {
      mma::cp_async_wait<0>();
    }
    __syncthreads();
    if (kt == 0) Ops::load_rows(qf, sQ, row0);
    float s[8][4] = {};
    Ops::mma_rows_n(s, qf, sK[kt % 2]);
    // mask (key > query or key >= T), row maxima of the raw scores over the quad.
    // Only the diagonal tile masks: below it every key precedes every query of the
    // block and lies before T (the block's first query does).
    const int k0 = kt * kTile;
    float mx[2] = {-INFINITY, -INFINITY};
    if (kt == qb) {
      FLASH_MMA_UNROLL
      for (int n = 0; n < 8; n++) {
        FLASH_MMA_UNROLL
        for (int e = 0; e < 4; e++) {
          const int key = k0 + n * 8 + 2 * t + e % 2, q = qg + 8 * (e / 2);
          if (!(key <= q && key < T_)) s[n][e] = -INFINITY;
          mx[e / 2] = fmaxf(mx[e / 2], s[n][e]);
        }
      }
    } else {
      FLASH_MMA_UNROLL
      for (int n = 0; n < 8; n++)
        FLASH_MMA_UNROLL
        for (int e = 0; e < 4; e++) mx[e / 2] = fmaxf(mx[e / 2], s[n][e]);
    }
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
    for (int n = 0; n < 8; n++) {
      FLASH_MMA_UNROLL
      for (int e = 0; e < 4; e++) {
        const float p = s[n][e] == -INFINITY ? 0.0f : exp2f(fmaf(s[n][e], c, neg_m[e / 2]));
        l[e / 2] += p;
        s[n][e] = p;
        o[n][e] *= alpha[e / 2];
      }
    }
    if constexpr (kDrop)  // after the row sums (they are P's): P o Z multiplies V
      for_each_dropout_factor<true>(drop, drop.token0 + size_t(b) * T_, T_, h, qg, k0 + 2 * t,
                                    [&](int n, int e, float z) { s[n][e] *= z; });
    Ops::mma_c_rows_k(o, s, sV[kt % 2]);
    __syncthreads();  // every warp is done with buffer kt%2 before tile kt+2 is staged into it
  }
  // out = O / l (rows staged through this warp's rows of sQ, free since kt = 0).
  // lse = (m + log2 l) ln 2, natural log units. Its roundings (the add, ln 2 and
  // the product) are relative to lse itself. m ln 2 + log l would round m ln 2
  // relative to |m|, which is larger than |lse| when m and log l nearly cancel.
  const float l0 = quad_sum(l[0]), l8 = quad_sum(l[1]);
  if (t == 0 && qg < T_) lse[size_t(bh) * T_ + qg] = (m[0] + log2f(l0)) * kLn2;
  if (t == 0 && qg + 8 < T_) lse[size_t(bh) * T_ + qg + 8] = (m[1] + log2f(l8)) * kLn2;
  Ops::store_rows(out + size_t(b) * T_ * C + size_t(h) * hs, C, q0 + row0, T_, hs, packed, sQ + size_t(row0) * kLd,
                  o, 1.0f / l0, 1.0f / l8);
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
template <class Ops>  // K V | Q dO x 2 | dS | lse D x 2
constexpr size_t backward_smem() { return 7 * tile_elems<Ops>() * sizeof(typename Ops::T) + sizeof(float) * 4 * kTile; }

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
template <class Ops, bool kDrop>
__global__ void __launch_bounds__(flash_mma::kThreads)
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
  T* sQ[2] = {sK + kTileElems * size_t{2}, sK + kTileElems * size_t{3}};
  T* sdO[2] = {sK + kTileElems * size_t{4}, sK + kTileElems * size_t{5}};
  T* sdS = sK + kTileElems * size_t{6};                                // dS^T [key][query]
  float* sLD = reinterpret_cast<float*>(sK + kTileElems * size_t{7});  // [buffer][-lse log2 e 64 | D 64]
  const int nqb = gridDim.x, kb = nqb - 1 - blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int hs = C / NH, k0 = kb * kTile, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = warp * 16, g = lane / 4, t = lane % 4, kg = k0 + row0 + g;  // this lane's keys: kg, kg + 8
  const size_t heads = size_t(gridDim.y);
  const float* dsum = scratch;
  float* dq_acc = scratch + heads * T_ + size_t(bh) * nqb * kTile * kHead;  // [tile][64][64]
  int* turns = reinterpret_cast<int*>(scratch + heads * T_ + heads * nqb * kTile * kHead) + size_t(bh) * nqb;
  const T* base = qkv + size_t(b) * T_ * 3 * C + size_t(h) * hs;
  const T* dbase = dout + size_t(b) * T_ * C + size_t(h) * hs;
  T* drow = dqkv + size_t(b) * T_ * 3 * C + size_t(h) * hs;
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
  stage_pair<Ops>(sQ[kb % 2], base, 3 * C, sdO[kb % 2], dbase, C, k0, T_, hs, packed);
  stage_rows(kb);
  typename Ops::Rows kf;  // K's A fragments stay in registers; V's are read per tile (register pressure)
  float dk[8][4] = {}, dv[8][4] = {};
  for (int qt = kb; qt < nqb; qt++) {
    if (qt + 1 < nqb) {
      stage_pair<Ops>(sQ[(qt + 1) % 2], base, 3 * C, sdO[(qt + 1) % 2], dbase, C, (qt + 1) * kTile, T_, hs, packed);
      stage_rows(qt + 1);
      mma::cp_async_wait<1>();
    } else {
      mma::cp_async_wait<0>();
    }
    __syncthreads();
    if (qt == kb) Ops::load_rows(kf, sK, row0);
    const T* Q = sQ[qt % 2];
    const T* dO = sdO[qt % 2];
    const float* L = sLD + size_t(qt % 2) * 2 * kTile;
    float p[8][4] = {}, ds[8][4] = {};
    Ops::mma_rows_n(p, kf, Q);          // S^T
    Ops::mma_rows_n(ds, sV, row0, dO);  // dP^T
    // Only the diagonal tile (keys after queries) and the last one (queries at or past T) mask.
    const bool masked = qt == kb || qt == nqb - 1;
    FLASH_MMA_UNROLL
    for (int n = 0; n < 8; n++)
      FLASH_MMA_UNROLL
      for (int e = 0; e < 4; e++) {
        const int col = n * 8 + 2 * t + e % 2, q = qt * kTile + col, key = kg + 8 * (e / 2);
        p[n][e] = (!masked || (key <= q && q < T_)) ? exp2f(fmaf(p[n][e], c, L[col])) : 0.0f;
        if constexpr (!kDrop) ds[n][e] = p[n][e] * (ds[n][e] - L[kTile + col]);  // dS^T
      }
    if constexpr (kDrop)
      for_each_dropout_factor<false>(drop, drop.token0 + size_t(b) * T_, T_, h, kg, qt * kTile + 2 * t,
                                     [&](int n, int e, float z) {
                                       ds[n][e] = p[n][e] * (ds[n][e] * z - L[kTile + n * 8 + 2 * t + e % 2]);
                                       p[n][e] *= z;
                                     });
    Ops::mma_c_rows_k(dv, p, dO);
    Ops::mma_c_rows_k(dk, ds, Q);
    // dS^T (rounded as for the product above) to shared; dq's part: dS K, 16 query rows per warp
    Ops::put_ds(sdS, ds, row0);
    __syncthreads();
    float dq[8][4] = {};
    Ops::mma_ds(dq, sdS, row0, sK);
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
      Ops::store_rows(drow, size_t(3) * C, qt * kTile + row0, T_, hs, packed, sdS + size_t(row0) * kLd, dq, scale,
                      scale);
    } else {
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) pass_turn(turns + qt, turn + 1);
    }
    __syncthreads();  // buffers qt%2 and dS are free for the next tile
  }
  Ops::store_rows(drow + C, size_t(3) * C, k0 + row0, T_, hs, packed, sK + size_t(row0) * kLd, dk, scale, scale);
  Ops::store_rows(drow + size_t{2} * C, size_t(3) * C, k0 + row0, T_, hs, packed, sV + size_t(row0) * kLd, dv, 1.0f,
                  1.0f);
}

}  // namespace kern
}  // namespace gpt2

#undef FLASH_MMA_UNROLL

#endif  // BACKEND_CUDA_FLASH_MMA_CUH
