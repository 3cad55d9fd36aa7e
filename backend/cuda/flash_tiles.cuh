// Tile operations of the mma.sync flash kernels (backend/cuda/flash_mma.cuh): one
// struct per storage type with the same members, so one kernel body serves
//   Bf16Ops            bf16 storage, mma m16n8k16 (bf16 in, fp32 accumulate);
//   Tf32Ops<false>     fp32 storage, mma m16n8k8 on operands rounded to tf32
//                      (cvt.rna: 10 mantissa bits), --tf32 on;
//   Tf32Ops<true>      fp32 storage, 3xTF32: x = big + small, both tf32, and
//                      a b ~ a_big b_big + (a_big b_small + a_small b_big) (the
//                      dropped small*small term is ~2^-22 relative; the
//                      corrections summed apart): fp32 accuracy on tensor
//                      cores, --tf32 off.
// A warp's product covers G groups of 16 rows (group i at rows r0 + 16 i) and N8
// n8 tiles of columns; its fp32 accumulators are C fragments (float[G][N8][4]:
// [i][n] is group i, n8 tile n; backend/cuda/mma.cuh's C/D layout), the same for
// every type, so masks and the softmax are written once. Each B fragment read
// from shared memory serves all G groups: with A in registers, the shared reads
// per FLOP fall as 1 / G. Acc is one group's 64 columns.
//
// Members (tiles in shared memory are [64][kLd] row-major):
//   load_rows(a, tile, r0)              A fragments of G groups of rows (all 64 k)
//   mma_rows_n(acc, a, tile, n0)        acc += A tile^T, tile's rows n0.. (B^T: [n][k])
//   mma_rows_n(acc, a_tile, r0, tile, n0)   the same, A read from a_tile per k step
//   mma_c_rows_k(acc, c, tile)          acc += round(c) tile (c: C fragments used as
//                                       the A operand in registers; tile is B: [k][n]);
//                                       bf16 also takes fewer n8 tiles of c and the
//                                       k rows' start: mma_c_rows_k(acc, c, tile, k0)
//   put_t(x, c, r0, c0)                 C fragments (P^T, dS^T) to shared, rounded as
//                                       operands
//   mma_t_rows_k(acc, x, r0, tile, n0)  acc += X tile for put_t's rows r0.. (tile: [k][n])
//   mma_ds(acc, sdS, row0, sK, n0)      acc += dS K, query rows row0.. (dS^T in sdS), K's columns n0..
//   stage_c(tile, c, r0, c0, scale)     scale * C fragments in the storage type, for
//                                       store_tile
//   store_rows(dst, ...)                one group's scaled C fragments to global rows
//                                       t0.. (< T_, d < hs)
//
// Bank conflicts (32 banks of 4 bytes; docs/kernels.md has the profile):
//   bf16: 144-byte rows, every ldmatrix's 8 rows in 8 distinct 16-byte groups.
//   fp32: 272-byte rows (17 groups, odd) for ldmatrix on 8 x 4 float matrices,
//         which yields the tf32 A and B^T layouts directly. There is no
//         transposing ldmatrix for 32-bit data, so B from a [k][n] tile is read
//         by 4-byte loads, and the k order inside each k8 step is permuted:
//         step slot t <- key 2t, slot t+4 <- key 2t+1. Then a C fragment's
//         (row g, cols 2t, 2t+1) is the A fragment as it stands (no shuffles),
//         and B's loads (rows 2t, 2t+1, column g) hit banks 8t + g (+4): distinct.
//         P^T and dS^T are stored unpadded with columns XOR-swizzled by a Gray
//         code of the row, (row ^ row>>1) & 3 in column bits 3-4: the float2
//         stores of C fragments (rows g, cols 2t), the float2 A loads of their
//         rows (mma_t_rows_k) and the A loads of dS (rows 2t, column g) are all
//         conflict-free.
#ifndef BACKEND_CUDA_FLASH_TILES_CUH
#define BACKEND_CUDA_FLASH_TILES_CUH

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/pack128.cuh"

namespace gpt2 {
namespace kern {
namespace flash_mma {

#if defined(__CUDACC__)
#define FLASH_TILES_UNROLL _Pragma("unroll")
#define FLASH_TILES_NO_UNROLL _Pragma("unroll 1")
#else
#define FLASH_TILES_UNROLL
#define FLASH_TILES_NO_UNROLL
#endif

using bf16 = __nv_bfloat16;
constexpr int kTile = 64;  // query rows per block, keys per tile
constexpr int kHead = 64;  // head dimension in shared memory (hs <= kHead, zero padded)
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
using Acc = float[8][4];  // a warp's 16 x 64 fp32 accumulators: 8 n8 C fragments

// Rows [t0, t0+64) of one head's slice (src + t*row + d) into dst[64][ld], zero
// where t >= T_ or d >= hs. packed (hs == kHead, 16-byte aligned rows): cp.async,
// landing at the caller's wait; else synchronous scalar stores.
template <class T>
__device__ inline void stage_tile(T* dst, int ld, const T* src, int row, int t0, int T_, int hs, bool packed) {
  if (packed) {
    constexpr int kPer = 16 / static_cast<int>(sizeof(T)), kChunks = kHead / kPer;  // 16-byte chunks per row
    for (int i = threadIdx.x; i < kTile * kChunks; i += kThreads) {
      const int r = i / kChunks, c = (i % kChunks) * kPer;
      const bool in = t0 + r < T_;
      const int at = r * ld + c;  // offsets in int first: small, and never widened after a product
      mma::cp_async16(dst + at, in ? src + size_t(t0 + r) * row + c : src, in ? 16 : 0);
    }
    return;
  }
  for (int i = threadIdx.x; i < kTile * kHead; i += kThreads) {
    const int r = i / kHead, d = i % kHead;
    dst[r * ld + d] = (t0 + r < T_ && d < hs) ? src[size_t(t0 + r) * row + d] : from_float<T>(0.0f);
  }
}

// The block's [64][ld] staging tile to rows [t0, t0+64) of one head's slice
// (dst + t*row + d), rows < T_ and d < hs: 16-byte stores when packed, else scalars.
template <class T>
__device__ inline void store_tile(T* dst, size_t row, int t0, int T_, int hs, bool packed, const T* stage, int ld) {
  if (packed) {
    constexpr int kPer = 16 / static_cast<int>(sizeof(T)), kChunks = kHead / kPer;
    for (int i = threadIdx.x; i < kTile * kChunks; i += kThreads) {
      const int r = i / kChunks, c = (i % kChunks) * kPer;
      if (t0 + r < T_)
        *reinterpret_cast<int4*>(dst + size_t(t0 + r) * row + c) = *reinterpret_cast<const int4*>(stage + r * ld + c);
    }
    return;
  }
  for (int i = threadIdx.x; i < kTile * hs; i += kThreads) {
    const int r = i / hs, d = i % hs;
    if (t0 + r < T_) dst[size_t(t0 + r) * row + d] = stage[r * ld + d];
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

// f(row, column, x, y) for each pair of adjacent elements of a lane's C fragments
// (group i: rows r0 + 16 i + g and + 8; columns c0 + 8 n + 2 t and + 1); x and y
// are the elements themselves (f may take them by reference and change them).
template <class E, int G, int N8, class F>
__device__ inline void for_each_pair(E (&c)[G][N8][4], int r0, int c0, F&& f) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  FLASH_TILES_UNROLL
  for (int i = 0; i < G; i++)
    FLASH_TILES_UNROLL
    for (int n = 0; n < N8; n++)
      FLASH_TILES_UNROLL
      for (int r = 0; r < 2; r++) f(r0 + 16 * i + g + 8 * r, c0 + n * 8 + 2 * t, c[i][n][r + r], c[i][n][r + r + 1]);
}

// The softmax runs in base 2: exp(x) = exp2(x log2 e), and exp2f is one ex2
// instruction where expf is about ten. Scores enter as s * c with
// c = scale log2(e), formed in double and rounded once (relative error <= 2^-24),
// so an exponent is one FFMA, s * c - m. The saved lse stays in natural log units.
constexpr float kLog2e = 1.44269504f;  // fp32 log2(e) and ln(2), each within 2^-24 relative
constexpr float kLn2 = 0.693147181f;
__device__ inline float exp2_scale(float scale) {
  return static_cast<float>(static_cast<double>(scale) * 1.4426950408889634);
}

// ---- bf16 storage: m16n8k16 ------------------------------------------------------------------
struct Bf16Ops {
  using T = bf16;
  static constexpr int kLd = kHead + 8;  // 144-byte rows
  using Rows = uint32_t[4][4];           // A fragments of 16 rows: four k16 steps
  // Row groups of 16 per warp in the forward: two halve the K/V fragment reads per FLOP
  // (registers: Q 32, S 64, O 64).
  static constexpr int kForwardGroups = 2;
  // The backward keeps V's fragments and P^T in registers (flash_mma.cuh): bf16
  // operands are half of fp32's, so they fit beside K's and the accumulators.
  static constexpr bool kBackwardInRegisters = true;

  // ldmatrix addresses: lane i = lane/8 names the 8x8 matrix, j = lane%8 its row.
  // A: rows r0..r0+15, k0..k0+15 of a row-major tile.
  __device__ static void load_a(uint32_t (&a)[4], const T* tile, int r0, int k0) {
    const int lane = threadIdx.x % 32, i = lane / 8, j = lane % 8;
    const int at = (r0 + (i % 2) * 8 + j) * kLd + k0 + (i / 2) * 8;
    mma::ldmatrix_x4(a, tile + at);
  }
  // A: rows m0..m0+15, k0..k0+15 of A stored transposed ([k][m]: dS^T for dS K).
  __device__ static void load_a_transposed(uint32_t (&a)[4], const T* tile, int k0, int m0) {
    const int lane = threadIdx.x % 32, i = lane / 8, j = lane % 8;
    const int at = (k0 + (i / 2) * 8 + j) * kLd + m0 + (i % 2) * 8;
    mma::ldmatrix_x4_trans(a, tile + at);
  }
  // B of n8 tiles n0.. and n0+8.. at k0, from B^T stored row-major ([n][k]: K for Q K^T).
  __device__ static void load_b_from_rows_n(uint32_t (&b)[4], const T* tile, int n0, int k0) {
    const int lane = threadIdx.x % 32, i = lane / 8, j = lane % 8;
    const int at = (n0 + (i / 2) * 8 + j) * kLd + k0 + (i % 2) * 8;
    mma::ldmatrix_x4(b, tile + at);
  }
  // The same from B stored row-major ([k][n]: V for P V), transposed by ldmatrix.trans.
  __device__ static void load_b_from_rows_k(uint32_t (&b)[4], const T* tile, int k0, int n0) {
    const int lane = threadIdx.x % 32, i = lane / 8, j = lane % 8;
    const int at = (k0 + (i % 2) * 8 + j) * kLd + n0 + (i / 2) * 8;
    mma::ldmatrix_x4_trans(b, tile + at);
  }
  // d0 += a b[0..1] (n8 tile n0), d1 += a b[2..3] (n8 tile n0+8).
  __device__ static void mma_pair(float (&d0)[4], float (&d1)[4], const uint32_t (&a)[4], const uint32_t (&b)[4]) {
    const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
    mma::mma_bf16(d0, a, b0);
    mma::mma_bf16(d1, a, b1);
  }
  // k16 step kk of C fragments as an A fragment: n8 tiles 2kk, 2kk+1 rounded to bf16 pairs.
  template <int N8>
  __device__ static void c_to_a(uint32_t (&a)[4], const float (&c)[N8][4], int kk) {
    const int n = kk + kk;  // n8 tiles n, n+1
    a[0] = mma::pack_bf16(c[n][0], c[n][1]);          // row g, k 2t..
    a[1] = mma::pack_bf16(c[n][2], c[n][3]);          // row g+8
    a[2] = mma::pack_bf16(c[n + 1][0], c[n + 1][1]);  // row g, k 2t+8..
    a[3] = mma::pack_bf16(c[n + 1][2], c[n + 1][3]);
  }

  // G groups of 16 rows, group i at rows r0 + 16 i.
  template <int G>
  __device__ static void load_rows(Rows (&a)[G], const T* tile, int r0) {
    FLASH_TILES_UNROLL
    for (int i = 0; i < G; i++)
      FLASH_TILES_UNROLL
      for (int kk = 0; kk < 4; kk++) load_a(a[i][kk], tile, r0 + 16 * i, kk * 16);
  }
  // acc (G groups of N8 n8 tiles) += A B, B^T rows ([n][k]) n0.. of tile. Each B
  // fragment is loaded once and used by every group.
  template <int G, int N8>
  __device__ static void mma_rows_n(float (&acc)[G][N8][4], const Rows (&a)[G], const T* tile, int n0 = 0) {
    FLASH_TILES_UNROLL
    for (int nb = 0; nb < N8 / 2; nb++)
      FLASH_TILES_UNROLL
      for (int kk = 0; kk < 4; kk++) {
        uint32_t b[4];
        load_b_from_rows_n(b, tile, n0 + nb * 16, kk * 16);
        FLASH_TILES_UNROLL
        for (int i = 0; i < G; i++) mma_pair(acc[i][nb + nb], acc[i][nb + nb + 1], a[i][kk], b);  // n8 tiles 2nb, 2nb+1
      }
  }
  // acc (G x N8) += A B with both operands from shared memory, one k16 step at a time:
  // A = rows r0 + 16 i of a_tile (kATransposed: stored [k][m], read by ldmatrix.trans),
  // B = tile's columns n0.. (kBRowsK: stored [k][n]; else B^T rows [n][k]).
  template <bool kATransposed, bool kBRowsK, int G, int N8>
  __device__ static void mma_shared(float (&acc)[G][N8][4], const T* a_tile, int r0, const T* tile, int n0) {
    FLASH_TILES_UNROLL
    for (int kk = 0; kk < 4; kk++) {
      uint32_t a[G][4];
      FLASH_TILES_UNROLL
      for (int i = 0; i < G; i++)
        if constexpr (kATransposed)
          load_a_transposed(a[i], a_tile, kk * 16, r0 + 16 * i);
        else
          load_a(a[i], a_tile, r0 + 16 * i, kk * 16);
      FLASH_TILES_UNROLL
      for (int nb = 0; nb < N8 / 2; nb++) {
        uint32_t b[4];
        if constexpr (kBRowsK)
          load_b_from_rows_k(b, tile, kk * 16, n0 + nb * 16);
        else
          load_b_from_rows_n(b, tile, n0 + nb * 16, kk * 16);
        FLASH_TILES_UNROLL
        for (int i = 0; i < G; i++) mma_pair(acc[i][nb + nb], acc[i][nb + nb + 1], a[i], b);
      }
    }
  }
  // A read one k step at a time (rows r0 + 16 i of a_tile): no registers held across tiles.
  template <int G, int N8>
  __device__ static void mma_rows_n(float (&acc)[G][N8][4], const T* a_tile, int r0, const T* tile, int n0 = 0) {
    mma_shared<false, false>(acc, a_tile, r0, tile, n0);
  }
  // c holds N8 n8 tiles (k = 8 N8 columns); B = tile's rows k0.. ([k][n]), all 64 columns.
  template <int G, int N8>
  __device__ static void mma_c_rows_k(Acc (&acc)[G], const float (&c)[G][N8][4], const T* tile, int k0 = 0) {
    constexpr int K16 = N8 / 2;
    uint32_t a[G][K16][4];  // every k step's A first: c's fp32 registers are free before the products
    FLASH_TILES_UNROLL
    for (int i = 0; i < G; i++)
      FLASH_TILES_UNROLL
      for (int kk = 0; kk < K16; kk++) c_to_a(a[i][kk], c[i], kk);
    FLASH_TILES_UNROLL
    for (int nb = 0; nb < 4; nb++)
      FLASH_TILES_UNROLL
      for (int kk = 0; kk < K16; kk++) {
        uint32_t b[4];
        load_b_from_rows_k(b, tile, k0 + kk * 16, nb * 16);
        FLASH_TILES_UNROLL
        for (int i = 0; i < G; i++) mma_pair(acc[i][nb + nb], acc[i][nb + nb + 1], a[i][kk], b);
      }
  }
  // C fragments (group i: rows r0 + 16 i + g, +8; columns c0 + 8 n + 2 t) to a
  // row-major [64][kLd] tile, rounded to bf16 pairs as the operands they become.
  template <int G, int N8>
  __device__ static void put_t(T* tile, const float (&c)[G][N8][4], int r0, int c0) {
    for_each_pair(c, r0, c0, [&](int row, int col, float x, float y) {
      *reinterpret_cast<uint32_t*>(tile + (row * kLd + col)) = mma::pack_bf16(x, y);
    });
  }
  // acc (G x N8) += X B: A = rows r0 + 16 i of x (put_t's tile, k = its 64 columns),
  // B = tile ([k][n]) columns n0..
  template <int G, int N8>
  __device__ static void mma_t_rows_k(float (&acc)[G][N8][4], const T* x, int r0, const T* tile, int n0) {
    mma_shared<false, true>(acc, x, r0, tile, n0);
  }
  // scale * C fragments, rounded once to bf16, into a [64][kLd] staging tile (store_tile writes it out).
  template <int G, int N8>
  __device__ static void stage_c(T* tile, const float (&c)[G][N8][4], int r0, int c0, float scale) {
    for_each_pair(c, r0, c0, [&](int row, int col, float x, float y) {
      *reinterpret_cast<__nv_bfloat162*>(tile + (row * kLd + col)) = __floats2bfloat162_rn(x * scale, y * scale);
    });
  }
  // acc (G x N8) += dS K: query rows row0 + 16 i (dS read transposed from dS^T), K's columns n0..
  template <int G, int N8>
  __device__ static void mma_ds(float (&acc)[G][N8][4], const T* sdS, int row0, const T* sK, int n0) {
    mma_shared<true, true>(acc, sdS, row0, sK, n0);
  }
  // Through this warp's 16 rows of `stage` (a [16][kLd] tile), then 16-byte
  // global stores when packed (hs == kHead), else hs scalars per row.
  __device__ static void store_rows(T* dst, size_t row, int t0, int T_, int hs, bool packed, T* stage, const Acc& c,
                                    float scale_g, float scale_g8) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    FLASH_TILES_UNROLL
    for (int n = 0; n < 8; n++) {
      const int at = g * kLd + n * 8 + 2 * t, at8 = at + 8 * kLd;
      *reinterpret_cast<__nv_bfloat162*>(stage + at) = __floats2bfloat162_rn(c[n][0] * scale_g, c[n][1] * scale_g);
      *reinterpret_cast<__nv_bfloat162*>(stage + at8) =
          __floats2bfloat162_rn(c[n][2] * scale_g8, c[n][3] * scale_g8);
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
};

// ---- fp32 storage: m16n8k8 tf32, or 3xTF32 (kSplit) ------------------------------------------
template <bool kSplit>
struct Tf32Ops {
  using T = float;
  static constexpr int kLd = kHead + 4;  // 272-byte rows: 17 16-byte groups
  using Rows = uint32_t[8][4];           // raw fp32 bits of A fragments: eight k8 steps, rounded at use
  // One row group per warp: Q's fragments are twice bf16's and 3xTF32 keeps a second
  // accumulator set, so two groups would not fit in registers.
  static constexpr int kForwardGroups = 1;
  static constexpr bool kBackwardInRegisters = false;  // V's fragments and P^T through shared memory

  // One operand register as the tensor core takes it: big (and small = the rest).
  struct A {
    uint32_t big[4], small[4];
  };
  struct B {
    uint32_t big[2], small[2];
  };
  __device__ static void split(uint32_t raw, uint32_t& big, uint32_t& small) {
    const float x = __uint_as_float(raw);
    big = mma::to_tf32(x);
    small = kSplit ? mma::to_tf32(x - __uint_as_float(big)) : 0u;
  }
  __device__ static A prep_a(uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    A a;
    split(r0, a.big[0], a.small[0]);
    split(r1, a.big[1], a.small[1]);
    split(r2, a.big[2], a.small[2]);
    split(r3, a.big[3], a.small[3]);
    return a;
  }
  __device__ static B prep_b(uint32_t r0, uint32_t r1) {
    B b;
    split(r0, b.big[0], b.small[0]);
    split(r1, b.big[1], b.small[1]);
    return b;
  }
  // d += a_big b_big; 3xTF32: corr += a_big b_small + a_small b_big, in its own
  // accumulator (added to d once per call, finish()) so that these ~2^-11 terms
  // do not double the roundings of d's sum.
  __device__ static void mma(float (&d)[4], float (&corr)[4], const A& a, const B& b) {
    if constexpr (kSplit)
      mma::mma_tf32x3(d, corr, a.big, a.small, b.big, b.small);
    else
      mma::mma_tf32(d, a.big, b.big);
  }
  __device__ static void finish(Acc& acc, const Acc& corr) {
    if constexpr (kSplit)
      FLASH_TILES_UNROLL
      for (int n = 0; n < 8; n++)
        FLASH_TILES_UNROLL
        for (int e = 0; e < 4; e++) acc[n][e] += corr[n][e];
  }
  // The value a C fragment element stands for as an operand (what put_ds stores).
  __device__ static float rounded(float x) { return kSplit ? x : __uint_as_float(mma::to_tf32(x)); }

  // ldmatrix on fp32: an 8x8 b16 matrix is 8 rows of 4 floats, lane (g, t) gets row g, float t.
  // A: rows r0..r0+15, k0..k0+7 -> (g,t) (g+8,t) (g,t+4) (g+8,t+4), the tf32 A layout.
  __device__ static void load_a(uint32_t (&a)[4], const T* tile, int r0, int k0) {
    const int lane = threadIdx.x % 32, i = lane / 8, j = lane % 8;
    const int at = (r0 + (i % 2) * 8 + j) * kLd + k0 + (i / 2) * 4;
    mma::ldmatrix_x4(a, tile + at);
  }
  // B of n8 tiles n0.. (b[0..1]) and n0+8.. (b[2..3]) at k0 from B^T rows ([n][k]).
  __device__ static void load_b_from_rows_n(uint32_t (&b)[4], const T* tile, int n0, int k0) {
    const int lane = threadIdx.x % 32, i = lane / 8, j = lane % 8;
    const int at = (n0 + (i / 2) * 8 + j) * kLd + k0 + (i % 2) * 4;
    mma::ldmatrix_x4(b, tile + at);
  }
  // B of n8 tile n0 at the permuted k8 step k0 from B rows ([k][n]): rows k0+2t, k0+2t+1, column n0+g.
  __device__ static B load_b_from_rows_k(const T* tile, int k0, int n0) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int at = (k0 + 2 * t) * kLd + n0 + g;
    const T* p = tile + at;
    return prep_b(__float_as_uint(p[0]), __float_as_uint(p[kLd]));
  }
  // n8 tiles 2nb, 2nb+1 of every group += its A times B^T rows n0 + 16 nb.. (B loaded once).
  template <int G, int N8>
  __device__ static void mma_pair_n(float (&acc)[G][N8][4], float (&corr)[G][N8][4], int nb, const A (&a)[G],
                                    const T* tile, int n0, int k0) {
    uint32_t raw[4];
    load_b_from_rows_n(raw, tile, n0 + nb * 16, k0);
    const B b0 = prep_b(raw[0], raw[1]), b1 = prep_b(raw[2], raw[3]);
    FLASH_TILES_UNROLL
    for (int i = 0; i < G; i++) {
      mma(acc[i][nb + nb], corr[i][nb + nb], a[i], b0);
      mma(acc[i][nb + nb + 1], corr[i][nb + nb + 1], a[i], b1);
    }
  }
  template <int G, int N8>
  __device__ static void finish(float (&acc)[G][N8][4], const float (&corr)[G][N8][4]) {
    if constexpr (kSplit)
      FLASH_TILES_UNROLL
      for (int i = 0; i < G; i++)
        FLASH_TILES_UNROLL
        for (int n = 0; n < N8; n++)
          FLASH_TILES_UNROLL
          for (int e = 0; e < 4; e++) acc[i][n][e] += corr[i][n][e];
  }

  template <int G>
  __device__ static void load_rows(Rows (&a)[G], const T* tile, int r0) {
    FLASH_TILES_UNROLL
    for (int i = 0; i < G; i++)
      FLASH_TILES_UNROLL
      for (int ks = 0; ks < 8; ks++) load_a(a[i][ks], tile, r0 + 16 * i, ks * 8);
  }
  template <int G, int N8>
  __device__ static void mma_rows_n(float (&acc)[G][N8][4], const Rows (&a)[G], const T* tile, int n0 = 0) {
    float corr[G][N8][4] = {};
    FLASH_TILES_UNROLL
    for (int ks = 0; ks < 8; ks++) {
      A ap[G];
      FLASH_TILES_UNROLL
      for (int i = 0; i < G; i++) ap[i] = prep_a(a[i][ks][0], a[i][ks][1], a[i][ks][2], a[i][ks][3]);
      FLASH_TILES_UNROLL
      for (int nb = 0; nb < N8 / 2; nb++) mma_pair_n(acc, corr, nb, ap, tile, n0, ks * 8);
    }
    finish(acc, corr);
  }
  template <int G, int N8>
  __device__ static void mma_rows_n(float (&acc)[G][N8][4], const T* a_tile, int r0, const T* tile, int n0 = 0) {
    float corr[G][N8][4] = {};
    FLASH_TILES_UNROLL
    for (int ks = 0; ks < 8; ks++) {
      A ap[G];
      FLASH_TILES_UNROLL
      for (int i = 0; i < G; i++) {
        uint32_t raw[4];
        load_a(raw, a_tile, r0 + 16 * i, ks * 8);
        ap[i] = prep_a(raw[0], raw[1], raw[2], raw[3]);
      }
      FLASH_TILES_UNROLL
      for (int nb = 0; nb < N8 / 2; nb++) mma_pair_n(acc, corr, nb, ap, tile, n0, ks * 8);
    }
    finish(acc, corr);
  }
  // One permuted k8 step ks of every group's A against B = tile ([k][n]) columns n0..
  // (each B fragment loaded once for all groups).
  template <int G, int N8>
  __device__ static void mma_step_rows_k(float (&acc)[G][N8][4], float (&corr)[G][N8][4], const A (&ap)[G],
                                         const T* tile, int ks, int n0) {
    FLASH_TILES_UNROLL
    for (int nn = 0; nn < N8; nn++) {
      const B b = load_b_from_rows_k(tile, ks * 8, n0 + nn * 8);
      FLASH_TILES_UNROLL
      for (int i = 0; i < G; i++) mma(acc[i][nn], corr[i][nn], ap[i], b);
    }
  }
  // k8 step ks = C's n8 tile ks in the permuted order: slot t <- col 2t, slot t+4 <- col 2t+1.
  template <int G>
  __device__ static void mma_c_rows_k(Acc (&acc)[G], const Acc (&c)[G], const T* tile) {
    Acc corr[G] = {};
    FLASH_TILES_UNROLL
    for (int ks = 0; ks < 8; ks++) {
      A ap[G];
      FLASH_TILES_UNROLL
      for (int i = 0; i < G; i++)
        ap[i] = prep_a(__float_as_uint(c[i][ks][0]), __float_as_uint(c[i][ks][2]), __float_as_uint(c[i][ks][1]),
                       __float_as_uint(c[i][ks][3]));
      mma_step_rows_k(acc, corr, ap, tile, ks, 0);
    }
    finish(acc, corr);
  }
  // P^T and dS^T [key][query], unpadded, columns swizzled by the key's Gray code (see the opening).
  __device__ static int swizzled(int key, int col) { return key * kHead + (col ^ (((key ^ (key >> 1)) & 3) << 3)); }
  // C fragments (group i: rows r0 + 16 i + g, +8; columns c0 + 8 n + 2 t), rounded as operands.
  template <int G, int N8>
  __device__ static void put_t(T* x, const float (&c)[G][N8][4], int r0, int c0) {
    for_each_pair(c, r0, c0, [&](int row, int col, float u, float v) {
      *reinterpret_cast<float2*>(x + swizzled(row, col)) = make_float2(rounded(u), rounded(v));
    });
  }
  // acc (G x N8) += X B: A = rows r0 + 16 i of put_t's x in the permuted k order (slot t
  // <- column 2t, t+4 <- 2t+1: one float2 per row), B = tile ([k][n]) columns n0..
  template <int G, int N8>
  __device__ static void mma_t_rows_k(float (&acc)[G][N8][4], const T* x, int r0, const T* tile, int n0) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    float corr[G][N8][4] = {};
    FLASH_TILES_UNROLL
    for (int ks = 0; ks < 8; ks++) {
      A ap[G];
      FLASH_TILES_UNROLL
      for (int i = 0; i < G; i++) {
        const int key = r0 + 16 * i + g, col = ks * 8 + 2 * t;
        const float2 lo = *reinterpret_cast<const float2*>(x + swizzled(key, col));
        const float2 hi = *reinterpret_cast<const float2*>(x + swizzled(key + 8, col));
        ap[i] = prep_a(__float_as_uint(lo.x), __float_as_uint(hi.x), __float_as_uint(lo.y), __float_as_uint(hi.y));
      }
      mma_step_rows_k(acc, corr, ap, tile, ks, n0);
    }
    finish(acc, corr);
  }
  // scale * C fragments into a [64][kLd] staging tile (store_tile writes it out).
  template <int G, int N8>
  __device__ static void stage_c(T* tile, const float (&c)[G][N8][4], int r0, int c0, float scale) {
    for_each_pair(c, r0, c0, [&](int row, int col, float x, float y) {
      *reinterpret_cast<float2*>(tile + (row * kLd + col)) = make_float2(x * scale, y * scale);
    });
  }
  template <int G, int N8>
  __device__ static void mma_ds(float (&acc)[G][N8][4], const T* sdS, int row0, const T* sK, int n0) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    float corr[G][N8][4] = {};
    FLASH_TILES_UNROLL
    for (int ks = 0; ks < 8; ks++) {
      const int key = ks * 8 + 2 * t;  // slots t, t+4: keys 2t, 2t+1 (as B's rows below)
      A ap[G];
      FLASH_TILES_UNROLL
      for (int i = 0; i < G; i++) {
        const int q = row0 + 16 * i + g;
        ap[i] = prep_a(__float_as_uint(sdS[swizzled(key, q)]), __float_as_uint(sdS[swizzled(key, q + 8)]),
                       __float_as_uint(sdS[swizzled(key + 1, q)]), __float_as_uint(sdS[swizzled(key + 1, q + 8)]));
      }
      mma_step_rows_k(acc, corr, ap, sK, ks, n0);
    }
    finish(acc, corr);
  }
  // Straight from the fragments: a row's n8 tile is 32 bytes, one sector (float2
  // stores when packed, else scalars with d < hs). `stage` is not needed.
  __device__ static void store_rows(T* dst, size_t row, int t0, int T_, int hs, bool packed, T* /*stage*/,
                                    const Acc& c, float scale_g, float scale_g8) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    FLASH_TILES_UNROLL
    for (int r = 0; r < 2; r++) {
      const int q = t0 + g + 8 * r, e = r + r;
      const float s = r == 0 ? scale_g : scale_g8;
      if (q >= T_) continue;
      T* p = dst + size_t(q) * row;
      FLASH_TILES_UNROLL
      for (int n = 0; n < 8; n++) {
        const int d = n * 8 + 2 * t;
        if (packed) {
          *reinterpret_cast<float2*>(p + d) = make_float2(c[n][e] * s, c[n][e + 1] * s);
        } else {
          if (d < hs) p[d] = c[n][e] * s;
          if (d + 1 < hs) p[d + 1] = c[n][e + 1] * s;
        }
      }
    }
  }
};

}  // namespace flash_mma
}  // namespace kern
}  // namespace gpt2

#undef FLASH_TILES_UNROLL
#undef FLASH_TILES_NO_UNROLL

#endif  // BACKEND_CUDA_FLASH_TILES_CUH
