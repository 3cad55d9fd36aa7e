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
// A warp owns 16 rows of a 64 x 64 product; its fp32 accumulators are 8 C
// fragments (Acc: c[n] is n8 tile n, backend/cuda/mma.cuh's C/D layout), the
// same for every type, so masks and the softmax are written once.
//
// Members (tiles in shared memory are [64][kLd] row-major):
//   load_rows(a, tile, r0)         A fragments of rows r0..r0+15 (all 64 k)
//   mma_rows_n(acc, a, tile)       acc += A tile^T        (tile holds B^T: [n][k])
//   mma_rows_n(acc, a_tile, r0, tile)   the same, A read from a_tile per k step
//   mma_c_rows_k(acc, c, tile)     acc += round(c) tile   (c: C fragments used as
//                                  the A operand in registers; tile is B: [k][n])
//   put_ds(sdS, ds, row0)          dS^T's rows row0.. (C fragments) to shared, rounded
//                                  as mma_c_rows_k rounds them
//   mma_ds(acc, sdS, row0, sK)     acc += dS K for query rows row0.. (dS^T in sdS)
//   store_rows(dst, ...)           scaled C fragments to global rows t0.. (< T_, d < hs)
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
//         dS^T is stored unpadded with columns XOR-swizzled by a Gray code of the
//         row, (row ^ row>>1) & 3 in column bits 3-4: the float2 stores of C
//         fragments (rows g, cols 2t) and the A loads (rows 2t, column g) are
//         both conflict-free.
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
#else
#define FLASH_TILES_UNROLL
#endif

using bf16 = __nv_bfloat16;
constexpr int kTile = 64;  // query rows per block, keys per tile
constexpr int kHead = 64;  // head dimension in shared memory (hs <= kHead, zero padded)
constexpr int kWarps = 4;  // 16 rows each
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

// Sum (max) over the 4 lanes of a quad: the lanes that hold one row of a C fragment.
__device__ inline float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ inline float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
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
  __device__ static void c_to_a(uint32_t (&a)[4], const Acc& c, int kk) {
    const int n = kk + kk;  // n8 tiles n, n+1
    a[0] = mma::pack_bf16(c[n][0], c[n][1]);          // row g, k 2t..
    a[1] = mma::pack_bf16(c[n][2], c[n][3]);          // row g+8
    a[2] = mma::pack_bf16(c[n + 1][0], c[n + 1][1]);  // row g, k 2t+8..
    a[3] = mma::pack_bf16(c[n + 1][2], c[n + 1][3]);
  }

  __device__ static void load_rows(Rows& a, const T* tile, int r0) {
    FLASH_TILES_UNROLL
    for (int kk = 0; kk < 4; kk++) load_a(a[kk], tile, r0, kk * 16);
  }
  __device__ static void mma_rows_n(Acc& acc, const Rows& a, const T* tile) {
    FLASH_TILES_UNROLL
    for (int kk = 0; kk < 4; kk++)
      FLASH_TILES_UNROLL
      for (int nb = 0; nb < 4; nb++) {
        uint32_t b[4];
        load_b_from_rows_n(b, tile, nb * 16, kk * 16);
        mma_pair(acc[nb + nb], acc[nb + nb + 1], a[kk], b);  // n8 tiles 2nb, 2nb+1
      }
  }
  // A read one k step at a time: 16 registers fewer than resident fragments, 4 ldmatrix more.
  __device__ static void mma_rows_n(Acc& acc, const T* a_tile, int r0, const T* tile) {
    FLASH_TILES_UNROLL
    for (int kk = 0; kk < 4; kk++) {
      uint32_t a[4];
      load_a(a, a_tile, r0, kk * 16);
      FLASH_TILES_UNROLL
      for (int nb = 0; nb < 4; nb++) {
        uint32_t b[4];
        load_b_from_rows_n(b, tile, nb * 16, kk * 16);
        mma_pair(acc[nb + nb], acc[nb + nb + 1], a, b);
      }
    }
  }
  __device__ static void mma_c_rows_k(Acc& acc, const Acc& c, const T* tile) {
    FLASH_TILES_UNROLL
    for (int kk = 0; kk < 4; kk++) {
      uint32_t a[4];
      c_to_a(a, c, kk);
      FLASH_TILES_UNROLL
      for (int nb = 0; nb < 4; nb++) {
        uint32_t b[4];
        load_b_from_rows_k(b, tile, kk * 16, nb * 16);
        mma_pair(acc[nb + nb], acc[nb + nb + 1], a, b);
      }
    }
  }
  __device__ static void put_ds(T* sdS, const Acc& ds, int row0) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    FLASH_TILES_UNROLL
    for (int kk = 0; kk < 4; kk++) {
      uint32_t a[4];
      c_to_a(a, ds, kk);
      const int at = (row0 + g) * kLd + kk * 16 + 2 * t, at8 = at + 8 * kLd;
      *reinterpret_cast<uint32_t*>(sdS + at) = a[0];
      *reinterpret_cast<uint32_t*>(sdS + at8) = a[1];
      *reinterpret_cast<uint32_t*>(sdS + at + 8) = a[2];
      *reinterpret_cast<uint32_t*>(sdS + at8 + 8) = a[3];
    }
  }
  __device__ static void mma_ds(Acc& acc, const T* sdS, int row0, const T* sK) {
    FLASH_TILES_UNROLL
    for (int kk = 0; kk < 4; kk++) {
      uint32_t a[4];
      load_a_transposed(a, sdS, kk * 16, row0);
      FLASH_TILES_UNROLL
      for (int nb = 0; nb < 4; nb++) {
        uint32_t b[4];
        load_b_from_rows_k(b, sK, kk * 16, nb * 16);
        mma_pair(acc[nb + nb], acc[nb + nb + 1], a, b);
      }
    }
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
  // n8 tiles 2nb, 2nb+1 += a B^T rows.
  __device__ static void mma_pair_n(Acc& acc, Acc& corr, int nb, const A& a, const T* tile, int k0) {
    uint32_t b[4];
    load_b_from_rows_n(b, tile, nb * 16, k0);
    mma(acc[nb + nb], corr[nb + nb], a, prep_b(b[0], b[1]));
    mma(acc[nb + nb + 1], corr[nb + nb + 1], a, prep_b(b[2], b[3]));
  }

  __device__ static void load_rows(Rows& a, const T* tile, int r0) {
    FLASH_TILES_UNROLL
    for (int ks = 0; ks < 8; ks++) load_a(a[ks], tile, r0, ks * 8);
  }
  __device__ static void mma_rows_n(Acc& acc, const Rows& a, const T* tile) {
    Acc corr = {};
    FLASH_TILES_UNROLL
    for (int ks = 0; ks < 8; ks++) {
      const A ap = prep_a(a[ks][0], a[ks][1], a[ks][2], a[ks][3]);
      FLASH_TILES_UNROLL
      for (int nb = 0; nb < 4; nb++) mma_pair_n(acc, corr, nb, ap, tile, ks * 8);
    }
    finish(acc, corr);
  }
  __device__ static void mma_rows_n(Acc& acc, const T* a_tile, int r0, const T* tile) {
    Acc corr = {};
    FLASH_TILES_UNROLL
    for (int ks = 0; ks < 8; ks++) {
      uint32_t raw[4];
      load_a(raw, a_tile, r0, ks * 8);
      const A ap = prep_a(raw[0], raw[1], raw[2], raw[3]);
      FLASH_TILES_UNROLL
      for (int nb = 0; nb < 4; nb++) mma_pair_n(acc, corr, nb, ap, tile, ks * 8);
    }
    finish(acc, corr);
  }
  // k8 step ks = C's n8 tile ks in the permuted order: slot t <- col 2t, slot t+4 <- col 2t+1.
  __device__ static void mma_c_rows_k(Acc& acc, const Acc& c, const T* tile) {
    Acc corr = {};
    FLASH_TILES_UNROLL
    for (int ks = 0; ks < 8; ks++) {
      const A ap = prep_a(__float_as_uint(c[ks][0]), __float_as_uint(c[ks][2]), __float_as_uint(c[ks][1]),
                          __float_as_uint(c[ks][3]));
      FLASH_TILES_UNROLL
      for (int nn = 0; nn < 8; nn++) mma(acc[nn], corr[nn], ap, load_b_from_rows_k(tile, ks * 8, nn * 8));
    }
    finish(acc, corr);
  }
  // dS^T [key][query], unpadded, columns swizzled by the key's Gray code (see the opening).
  __device__ static int swizzled(int key, int col) { return key * kHead + (col ^ (((key ^ (key >> 1)) & 3) << 3)); }
  __device__ static void put_ds(T* sdS, const Acc& ds, int row0) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    FLASH_TILES_UNROLL
    for (int n = 0; n < 8; n++)
      FLASH_TILES_UNROLL
      for (int r = 0; r < 2; r++) {
        const int key = row0 + g + 8 * r, e = r + r;
        *reinterpret_cast<float2*>(sdS + swizzled(key, n * 8 + 2 * t)) =
            make_float2(rounded(ds[n][e]), rounded(ds[n][e + 1]));
      }
  }
  __device__ static void mma_ds(Acc& acc, const T* sdS, int row0, const T* sK) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    Acc corr = {};
    FLASH_TILES_UNROLL
    for (int ks = 0; ks < 8; ks++) {
      const int key = ks * 8 + 2 * t;  // slots t, t+4: keys 2t, 2t+1 (as B's rows below)
      const A ap = prep_a(__float_as_uint(sdS[swizzled(key, row0 + g)]),
                          __float_as_uint(sdS[swizzled(key, row0 + g + 8)]),
                          __float_as_uint(sdS[swizzled(key + 1, row0 + g)]),
                          __float_as_uint(sdS[swizzled(key + 1, row0 + g + 8)]));
      FLASH_TILES_UNROLL
      for (int nn = 0; nn < 8; nn++) mma(acc[nn], corr[nn], ap, load_b_from_rows_k(sK, ks * 8, nn * 8));
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

#endif  // BACKEND_CUDA_FLASH_TILES_CUH
