// Fused causal attention, flash-style (FlashAttention-2 order of work), for
// head sizes hs <= 64 (padded with zeros to kHead = 64 in shared memory).
//
// Reads q, k, v in place from qkv[B,T,3C] and writes out[B,T,C] directly; no
// [T,T] matrix ever reaches global memory. `saved` keeps only the per-row
// log-sum-exp lse = m + log(l) (fp32, B*NH*T); the backward recomputes
// P = exp(s - lse). Scratch: D = rowsum(P * dP) (fp32, B*NH*T).
//
// Work split: 64 query rows (forward, dq pass) or 64 keys (dk/dv pass) per
// block of 4 warps; each warp owns 16 of those rows, so the softmax statistics
// of a row never leave its warp (a pair of lanes per row). Tiles of the other
// side (64 keys or 64 queries) are staged in shared memory by the whole block.
// Causal: key tiles above the diagonal are never visited.
//
// Which kernels run: bf16 storage launches the mma.sync kernels of
// backend/cuda/flash_mma.cuh (the launchers below dispatch; this file's
// kernels are then not instantiated for bf16, and the backward there follows
// FlashAttention-2: D = rowsum(dout out), five tile products). fp32 storage
// runs this file's kernels with the tile products as fp32 FMAs
// (WarpMma<float>), comparable with the CPU backend. WarpMma<__nv_bfloat16>
// (WMMA) and the bf16 numerics below describe the WMMA path these kernels
// still take if instantiated for bf16.
//
// Numerics (bf16): scores, softmax statistics, D and every accumulator fp32;
// what is rounded to bf16 is P (forward: relative to the running max of the
// tiles seen so far, before P V; backward: the exact P, before P^T dO) and
// dS = P (dP - D) (before dS K and dS^T Q); out, dq, dk, dv round once when
// stored. dq and dk are multiplied by the scale after their fp32 sums.
//
// Backward = two kernels, both deterministic (no atomics):
//   flash_backward_dq_kernel   per query block: pass 1 over its key tiles
//                              D = sum_j P dP (S and dP recomputed), written to
//                              scratch; pass 2 dq = scale * sum_j dS k
//   flash_backward_dkdv_kernel per key block, over query tiles at or below the
//                              diagonal: dv = sum P^T dO, dk = scale sum dS^T q
// GEMM tiles: forward 2 (S, P V), backward 2 (D pass) + 3 (dq) + 4 (dk, dv).
#ifndef BACKEND_CUDA_FLASH_ATTENTION_CUH
#define BACKEND_CUDA_FLASH_ATTENTION_CUH

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/flash_mma.cuh"
#include "backend/cuda/pack128.cuh"

namespace gpt2 {
namespace kern {
namespace flash {

// Fixed-count loops over fragments must unroll (a dynamically indexed array spills).
#if defined(__CUDACC__)
#define FLASH_UNROLL _Pragma("unroll")
#define FLASH_NO_UNROLL _Pragma("unroll 1")
#else
#define FLASH_UNROLL
#define FLASH_NO_UNROLL
#endif

constexpr int kTile = 64;          // query rows per block and keys per tile (both sides)
constexpr int kHead = 64;          // head dimension in shared memory (hs <= kHead, zero padded)
constexpr int kWarps = 4;          // 16 rows each
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kRowsPerWarp = kTile / kWarps;
static_assert(kTile == kHead, "the tile products assume K = kTile = kHead");

// ---- warp tile products: C[16 x 16*NB] += A[16 x K] B[K x 16*NB], A row-major in shared
// memory, B row-major ([K][ldb]) or column-major (B^T stored row-major: [N][ldb]).
template <class T>
struct WarpMma;

template <>
struct WarpMma<__nv_bfloat16> {
  using Acc = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;
  __device__ static void zero(Acc& c) { nvcuda::wmma::fill_fragment(c, 0.0f); }
  template <bool kBCol, int NB>
  __device__ static void mma(Acc (&c)[NB], const __nv_bfloat16* a, int lda, const __nv_bfloat16* b,
                             int ldb) {
    constexpr int K = kTile;  // = kHead: every product sums over 64 keys, queries or head dims
    namespace w = nvcuda::wmma;
    using BL = typename std::conditional<kBCol, w::col_major, w::row_major>::type;
    FLASH_NO_UNROLL  // unrolled, ptxas hoists fragment loads and spills (sm_90)
    for (int k0 = 0; k0 < K; k0 += 16) {
      w::fragment<w::matrix_a, 16, 16, 16, __nv_bfloat16, w::row_major> fa;
      w::load_matrix_sync(fa, a + k0, lda);
      FLASH_UNROLL
      for (int n = 0; n < NB; n++) {
        w::fragment<w::matrix_b, 16, 16, 16, __nv_bfloat16, BL> fb;
        w::load_matrix_sync(fb, kBCol ? b + size_t(n) * 16 * ldb + k0 : b + size_t(k0) * ldb + size_t(n) * 16, ldb);
        w::mma_sync(c[n], fa, fb, c[n]);
      }
    }
  }
  __device__ static void store(float* p, int ld, const Acc& c) {
    nvcuda::wmma::store_matrix_sync(p, c, ld, nvcuda::wmma::mem_row_major);
  }
  __device__ static void load(Acc& c, const float* p, int ld) {
    nvcuda::wmma::load_matrix_sync(c, p, ld, nvcuda::wmma::mem_row_major);
  }
};

// fp32: element e of a lane is tile position e*32 + lane (row 2e + lane/16, column lane%16).
template <>
struct WarpMma<float> {
  struct Acc {
    float x[8];
  };
  __device__ static void zero(Acc& c) {
    FLASH_UNROLL
    for (int e = 0; e < 8; e++) c.x[e] = 0.0f;
  }
  template <bool kBCol, int NB>
  __device__ static void mma(Acc (&c)[NB], const float* a, int lda, const float* b, int ldb) {
    constexpr int K = kTile;  // = kHead: every product sums over 64 keys, queries or head dims
    const int lane = threadIdx.x % kWarpSize, col = lane % 16, r0 = lane / 16;
    for (int k = 0; k < K; k++) {
      float bk[NB];
      FLASH_UNROLL
      for (int n = 0; n < NB; n++) bk[n] = kBCol ? b[(n * 16 + col) * ldb + k] : b[k * ldb + n * 16 + col];
      FLASH_UNROLL
      for (int e = 0; e < 8; e++) {
        const float ak = a[(2 * e + r0) * lda + k];
        FLASH_UNROLL
        for (int n = 0; n < NB; n++) c[n].x[e] += ak * bk[n];
      }
    }
  }
  __device__ static void store(float* p, int ld, const Acc& c) {
    const int lane = threadIdx.x % kWarpSize;
    FLASH_UNROLL
    for (int e = 0; e < 8; e++) p[(2 * e + lane / 16) * ld + lane % 16] = c.x[e];
  }
  __device__ static void load(Acc& c, const float* p, int ld) {
    const int lane = threadIdx.x % kWarpSize;
    FLASH_UNROLL
    for (int e = 0; e < 8; e++) c.x[e] = p[(2 * e + lane / 16) * ld + lane % 16];
  }
};

// A warp's 16 x 64 product of two shared-memory operands, stored to an fp32 tile (ld 64).
template <class T, bool kBCol>
__device__ inline void warp_product(float* c, const T* a, int lda, const T* b, int ldb) {
  using M = WarpMma<T>;
  typename M::Acc acc[kTile / 16];
  FLASH_UNROLL
  for (auto& f : acc) M::zero(f);
  M::template mma<kBCol>(acc, a, lda, b, ldb);
  FLASH_UNROLL
  for (int n = 0; n < kTile / 16; n++) M::store(c + size_t(n) * 16, kTile, acc[n]);
}

// ---- staging: rows [t0, t0+64) of one head's slice of a token-major tensor
// (src + (b*T + t)*row + d) into dst[64][kHead] of T, zero outside t < T_, d < hs.
// `packed`: hs == kHead, row and src 16-byte aligned (128-bit loads).
template <class T>
__device__ inline void load_tile(T* dst, const T* src, int row, int t0, int T_, int hs, bool packed) {
  if (packed) {
    constexpr int P = kPack<T>, per_row = kHead / P;
    for (int i = threadIdx.x; i < kTile * per_row; i += kThreads) {
      const int r = i / per_row, d = (i % per_row) * P;
      int4 v = make_int4(0, 0, 0, 0);  // zero bits: 0.0 in fp32 and bf16
      if (t0 + r < T_) {
        const T* g = src + static_cast<size_t>(t0 + r) * row + d;
        GPT2_CHECK_ALIGNED(g, 16, "flash load_tile");
        v = *reinterpret_cast<const int4*>(g);
      }
      *reinterpret_cast<int4*>(dst + size_t(r) * kHead + d) = v;
    }
    return;
  }
  for (int i = threadIdx.x; i < kTile * kHead; i += kThreads) {
    const int r = i / kHead, d = i % kHead;
    dst[i] = (t0 + r < T_ && d < hs) ? src[static_cast<size_t>(t0 + r) * row + d] : from_float<T>(0.0f);
  }
}

// Shared-memory carve-up: 128-byte aligned pieces (WMMA needs 32-byte aligned
// fragment pointers). The base is aligned up at run time, so every launch asks
// for kSmemSlack bytes more than the pieces take.
constexpr size_t kSmemSlack = 128;
struct Carve {
  unsigned char* p;
  __device__ explicit Carve(unsigned char* base)
      : p(base + (kSmemSlack - reinterpret_cast<uintptr_t>(base) % kSmemSlack) % kSmemSlack) {}
  template <class U>
  __device__ U* take(int n) {
    U* r = reinterpret_cast<U*>(p);
    p += (static_cast<size_t>(n) * sizeof(U) + 127) / 128 * 128;
    return r;
  }
};
template <class T>
constexpr size_t carve_bytes(int n) {
  return (static_cast<size_t>(n) * sizeof(T) + 127) / 128 * 128;
}
// Tiles of T, fp32 tiles, and (bf16 only) tiles of T for the rounded operands.
template <class T>
constexpr size_t smem_bytes(int t_tiles, int f_tiles, int rounded_tiles) {
  return kSmemSlack + t_tiles * carve_bytes<T>(kTile * kHead) + f_tiles * carve_bytes<float>(kTile * kTile) +
         (sizeof(T) == sizeof(float) ? 0 : rounded_tiles * carve_bytes<T>(kTile * kTile));
}
template <class T>
constexpr size_t forward_smem() { return smem_bytes<T>(3, 2, 1); }  // Q K V | S O | P
template <class T>
constexpr size_t dq_smem() { return smem_bytes<T>(4, 2, 1); }       // Q dO K V | S dP | dS
template <class T>
constexpr size_t dkdv_smem() { return smem_bytes<T>(4, 2, 2) + 2 * carve_bytes<float>(kTile); }  // K V Q dO | S dP | P dS | lse D

}  // namespace flash

// ---- forward -------------------------------------------------------------------------------
// grid (query blocks, B*NH), the last query block (most key tiles) first.
template <class T>
__global__ void __launch_bounds__(flash::kThreads)
    flash_forward_kernel(T* out, float* lse, const T* qkv, int T_, int C, int NH, float scale, bool packed) {
  using namespace flash;
  DYNAMIC_SHARED(unsigned char, smem);
  Carve cv(smem);
  T* sQ = cv.take<T>(kTile * kHead);
  T* sK = cv.take<T>(kTile * kHead);
  T* sV = cv.take<T>(kTile * kHead);
  float* sS = cv.take<float>(kTile * kTile);
  float* sO = cv.take<float>(kTile * kHead);
  // fp32: P overwrites S in place (each lane rewrites what it read)
  T* sP = sizeof(T) == sizeof(float) ? reinterpret_cast<T*>(sS) : cv.take<T>(kTile * kTile);
  const int qb = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int hs = C / NH, q0 = qb * kTile, warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const T* base = qkv + static_cast<size_t>(b) * T_ * 3 * C + static_cast<size_t>(h) * hs;
  load_tile(sQ, base, 3 * C, q0, T_, hs, packed);
  for (int i = threadIdx.x; i < kTile * kHead; i += kThreads) sO[i] = 0.0f;
  // row r = warp*16 + lane/2 of this block; the lane pair splits its 64 columns
  const int r = warp * kRowsPerWarp + lane / 2, half = (lane % 2) * (kTile / 2), t = q0 + r;
  float m = -INFINITY, l = 0.0f;
  const size_t wo = static_cast<size_t>(warp) * kRowsPerWarp;
  float* wS = sS + wo * kTile;
  T* wP = sP + wo * kTile;
  for (int kt = 0; kt <= qb; kt++) {
    const int k0 = kt * kTile;
    __syncthreads();  // the previous tile's K, V are no longer read
    load_tile(sK, base + C, 3 * C, k0, T_, hs, packed);
    load_tile(sV, base + 2 * C, 3 * C, k0, T_, hs, packed);
    __syncthreads();
    warp_product<T, true>(wS, sQ + wo * kHead, kHead, sK, kHead);
    __syncwarp();
    // online softmax of this row's 32 columns; masked: key > query or key >= T
    float* srow = sS + size_t(r) * kTile + half;
    float mx = -INFINITY;
    for (int j = 0; j < kTile / 2; j++) {
      const int key = k0 + half + j;
      const float s = (key <= t && key < T_) ? srow[j] * scale : -INFINITY;
      srow[j] = s;
      mx = fmaxf(mx, s);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m, mx), alpha = expf(m - m_new);  // m_new is finite: key 0 is in tile 0
    float sum = 0.0f;
    T* prow = sP + size_t(r) * kTile + half;
    for (int j = 0; j < kTile / 2; j++) {
      const float p = srow[j] == -INFINITY ? 0.0f : expf(srow[j] - m_new);
      sum += p;
      prow[j] = from_float<T>(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * alpha + sum;
    m = m_new;
    float* orow = sO + size_t(r) * kHead + size_t(lane % 2) * (kHead / 2);
    for (int d = 0; d < kHead / 2; d++) orow[d] *= alpha;
    __syncwarp();
    // O[16 x 64] += P[16 x 64] V[64 x 64], accumulators round-trip through shared memory
    using M = WarpMma<T>;
    typename M::Acc acc[kHead / 16];
    float* wO = sO + wo * kHead;
    FLASH_UNROLL
    for (int n = 0; n < kHead / 16; n++) M::load(acc[n], wO + size_t(n) * 16, kHead);
    M::template mma<false>(acc, wP, kTile, sV, kHead);
    FLASH_UNROLL
    for (int n = 0; n < kHead / 16; n++) M::store(wO + size_t(n) * 16, kHead, acc[n]);
    __syncwarp();
  }
  // out = O / l; lse = m + log l (the pair holds the same m, l)
  if (lane % 2 == 0 && t < T_) lse[static_cast<size_t>(bh) * T_ + t] = m + logf(l);
  sS[size_t(r) * kTile] = 1.0f / l;  // column 0 of S is free now; both lanes write the same value
  __syncwarp();
  for (int i = lane; i < kRowsPerWarp * hs; i += kWarpSize) {
    const int rr = static_cast<int>(wo) + i / hs, d = i % hs;
    if (q0 + rr < T_)
      out[(static_cast<size_t>(b) * T_ + q0 + rr) * C + static_cast<size_t>(h) * hs + d] =
          from_float<T>(sO[size_t(rr) * kHead + d] * sS[size_t(rr) * kTile]);
  }
}

// ---- backward: dq (and D) per query block ---------------------------------------------------
// S = Q K^T, dP = dO V^T for this warp's 16 rows against one key tile.
template <class T>
__device__ inline void scores_and_dp(float* wS, float* wdP, const T* wQ, const T* wdO, const T* sK, const T* sV) {
  using namespace flash;
  warp_product<T, true>(wS, wQ, kHead, sK, kHead);
  warp_product<T, true>(wdP, wdO, kHead, sV, kHead);
  __syncwarp();
}

template <class T>
__global__ void __launch_bounds__(flash::kThreads)
    flash_backward_dq_kernel(T* dqkv, float* dsum, const T* dout, const T* qkv, const float* lse, int T_, int C,
                             int NH, float scale, bool packed) {
  using namespace flash;
  DYNAMIC_SHARED(unsigned char, smem);
  Carve cv(smem);
  T* sQ = cv.take<T>(kTile * kHead);
  T* sdO = cv.take<T>(kTile * kHead);
  T* sK = cv.take<T>(kTile * kHead);
  T* sV = cv.take<T>(kTile * kHead);
  float* sS = cv.take<float>(kTile * kTile);
  float* sdP = cv.take<float>(kTile * kTile);
  T* sdS = sizeof(T) == sizeof(float) ? reinterpret_cast<T*>(sdP) : cv.take<T>(kTile * kTile);
  const int qb = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int hs = C / NH, q0 = qb * kTile, warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const T* base = qkv + static_cast<size_t>(b) * T_ * 3 * C + static_cast<size_t>(h) * hs;
  load_tile(sQ, base, 3 * C, q0, T_, hs, packed);
  load_tile(sdO, dout + static_cast<size_t>(b) * T_ * C + static_cast<size_t>(h) * hs, C, q0, T_, hs, packed);
  const int r = warp * kRowsPerWarp + lane / 2, half = (lane % 2) * (kTile / 2), t = q0 + r;
  const float row_lse = t < T_ ? lse[static_cast<size_t>(bh) * T_ + t] : 0.0f;
  const int wo = warp * kRowsPerWarp;
  const size_t wo_s = static_cast<size_t>(wo) * kTile, wo_h = static_cast<size_t>(wo) * kHead;
  float* wS = sS + wo_s;
  float* wdP = sdP + wo_s;
  // pass 1: D = sum_j P dP over this row's keys
  float dot = 0.0f;
  for (int kt = 0; kt <= qb; kt++) {
    const int k0 = kt * kTile;
    __syncthreads();
    load_tile(sK, base + C, 3 * C, k0, T_, hs, packed);
    load_tile(sV, base + 2 * C, 3 * C, k0, T_, hs, packed);
    __syncthreads();
    scores_and_dp(wS, wdP, sQ + wo_h, sdO + wo_h, sK, sV);
    for (int j = 0; j < kTile / 2; j++) {
      const int key = k0 + half + j;
      const size_t e = size_t(r) * kTile + half + j;
      if (key <= t && t < T_) dot += expf(sS[e] * scale - row_lse) * sdP[e];
    }
    __syncwarp();
  }
  const float D = dot + __shfl_xor_sync(0xffffffffu, dot, 1);
  if (lane % 2 == 0 && t < T_) dsum[static_cast<size_t>(bh) * T_ + t] = D;
  // pass 2: dq = scale * sum_j dS k, dS = P (dP - D) rounded to T
  using M = WarpMma<T>;
  typename M::Acc acc[kHead / 16];
  FLASH_UNROLL
  for (auto& f : acc) M::zero(f);
  for (int kt = 0; kt <= qb; kt++) {
    const int k0 = kt * kTile;
    __syncthreads();
    load_tile(sK, base + C, 3 * C, k0, T_, hs, packed);
    load_tile(sV, base + 2 * C, 3 * C, k0, T_, hs, packed);
    __syncthreads();
    scores_and_dp(wS, wdP, sQ + wo_h, sdO + wo_h, sK, sV);
    for (int j = 0; j < kTile / 2; j++) {
      const int key = k0 + half + j;
      const size_t e = size_t(r) * kTile + half + j;
      const float p = (key <= t && t < T_) ? expf(sS[e] * scale - row_lse) : 0.0f;
      sdS[e] = from_float<T>(p * (sdP[e] - D));
    }
    __syncwarp();
    M::template mma<false>(acc, sdS + wo_s, kTile, sK, kHead);
  }
  __syncwarp();
  FLASH_UNROLL
  for (int n = 0; n < kHead / 16; n++) M::store(wS + size_t(n) * 16, kTile, acc[n]);  // 16 x 64 fp32, ld 64
  __syncwarp();
  for (int i = lane; i < kRowsPerWarp * hs; i += kWarpSize) {
    const int rr = i / hs, d = i % hs;
    if (q0 + wo + rr < T_)
      dqkv[(static_cast<size_t>(b) * T_ + q0 + wo + rr) * 3 * C + static_cast<size_t>(h) * hs + d] =
          from_float<T>(wS[size_t(rr) * kTile + d] * scale);
  }
}

// ---- backward: dk, dv per key block -----------------------------------------------------------
// Each warp owns 16 keys; S^T = K Q^T and dP^T = V dO^T against one query tile.
template <class T>
__global__ void __launch_bounds__(flash::kThreads)
    flash_backward_dkdv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* dsum,
                               int T_, int C, int NH, float scale, bool packed) {
  using namespace flash;
  DYNAMIC_SHARED(unsigned char, smem);
  Carve cv(smem);
  T* sK = cv.take<T>(kTile * kHead);
  T* sV = cv.take<T>(kTile * kHead);
  T* sQ = cv.take<T>(kTile * kHead);
  T* sdO = cv.take<T>(kTile * kHead);
  float* sS = cv.take<float>(kTile * kTile);
  float* sdP = cv.take<float>(kTile * kTile);
  const bool f32 = sizeof(T) == sizeof(float);
  T* sP = f32 ? reinterpret_cast<T*>(sS) : cv.take<T>(kTile * kTile);
  T* sdS = f32 ? reinterpret_cast<T*>(sdP) : cv.take<T>(kTile * kTile);
  float* sL = cv.take<float>(kTile);
  float* sD = cv.take<float>(kTile);
  const int nqb = gridDim.x, kb = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int hs = C / NH, k0 = kb * kTile, warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const T* base = qkv + static_cast<size_t>(b) * T_ * 3 * C + static_cast<size_t>(h) * hs;
  const T* dbase = dout + static_cast<size_t>(b) * T_ * C + static_cast<size_t>(h) * hs;
  load_tile(sK, base + C, 3 * C, k0, T_, hs, packed);
  load_tile(sV, base + 2 * C, 3 * C, k0, T_, hs, packed);
  const int wo = warp * kRowsPerWarp, r = wo + lane / 2, half = (lane % 2) * (kTile / 2), key = k0 + r;
  const size_t wo_s = static_cast<size_t>(wo) * kTile, wo_h = static_cast<size_t>(wo) * kHead;
  using M = WarpMma<T>;
  typename M::Acc dk[kHead / 16], dv[kHead / 16];
  FLASH_UNROLL
  for (auto& f : dk) M::zero(f);
  FLASH_UNROLL
  for (auto& f : dv) M::zero(f);
  for (int qt = kb; qt < nqb; qt++) {
    const int q0 = qt * kTile;
    __syncthreads();
    load_tile(sQ, base, 3 * C, q0, T_, hs, packed);
    load_tile(sdO, dbase, C, q0, T_, hs, packed);
    for (int i = threadIdx.x; i < kTile; i += kThreads) {
      const bool in = q0 + i < T_;
      sL[i] = in ? lse[static_cast<size_t>(bh) * T_ + q0 + i] : 0.0f;
      sD[i] = in ? dsum[static_cast<size_t>(bh) * T_ + q0 + i] : 0.0f;
    }
    __syncthreads();
    warp_product<T, true>(sS + wo_s, sK + wo_h, kHead, sQ, kHead);
    warp_product<T, true>(sdP + wo_s, sV + wo_h, kHead, sdO, kHead);
    __syncwarp();
    for (int j = 0; j < kTile / 2; j++) {
      const int c = half + j, q = q0 + c;
      const size_t e = size_t(r) * kTile + c;
      const float p = (key <= q && q < T_) ? expf(sS[e] * scale - sL[c]) : 0.0f;
      const float ds = p * (sdP[e] - sD[c]);
      sP[e] = from_float<T>(p);  // fp32: in place of S[e], read above by this lane only
      sdS[e] = from_float<T>(ds);
    }
    __syncwarp();
    M::template mma<false>(dv, sP + wo_s, kTile, sdO, kHead);
    M::template mma<false>(dk, sdS + wo_s, kTile, sQ, kHead);
  }
  __syncwarp();
  float* wK = sS + wo_s;
  float* wV = sdP + wo_s;
  FLASH_UNROLL
  for (int n = 0; n < kHead / 16; n++) M::store(wK + size_t(n) * 16, kTile, dk[n]);
  FLASH_UNROLL
  for (int n = 0; n < kHead / 16; n++) M::store(wV + size_t(n) * 16, kTile, dv[n]);
  __syncwarp();
  for (int i = lane; i < kRowsPerWarp * hs; i += kWarpSize) {
    const int rr = i / hs, d = i % hs;
    if (k0 + wo + rr >= T_) continue;
    T* row = dqkv + (static_cast<size_t>(b) * T_ + k0 + wo + rr) * 3 * C + static_cast<size_t>(h) * hs + d;
    row[C] = from_float<T>(wK[size_t(rr) * kTile + d] * scale);
    row[2 * static_cast<size_t>(C)] = from_float<T>(wV[size_t(rr) * kTile + d]);
  }
}

// ---- launchers ----------------------------------------------------------------------------
inline bool flash_attention_applies(int C, int NH) { return C / NH <= flash::kHead; }
inline size_t flash_lse_floats(int B, int T_, int NH) { return static_cast<size_t>(B) * NH * T_; }

template <class K>
inline void flash_allow_smem(K kernel, size_t bytes) {
  if (bytes > size_t{48} * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}
// 128-bit tile loads: hs == kHead and 16-byte aligned rows and bases.
template <class T>
inline bool flash_packed(const T* qkv, const T* dout, int C, int NH) {
  const size_t P = kPack<T>;
  return C / NH == flash::kHead && C % P == 0 && aligned16(qkv) && (dout == nullptr || aligned16(dout));
}

// grid (query or key blocks, B*NH): gridDim.y is limited to 65535 heads.
inline dim3 flash_grid(int B, int T_, int NH) {
  if (static_cast<long long>(B) * NH > 65535)
    throw std::runtime_error("flash attention: B*NH = " + std::to_string(static_cast<long long>(B) * NH) +
                             " exceeds gridDim.y (65535)");
  return dim3(ceil_div(T_, flash::kTile), B * NH);
}

// lse: B*NH*T floats.
template <class T>
void flash_attention_forward(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, cudaStream_t stream) {
  const float scale = 1.0f / sqrtf(static_cast<float>(C / NH));
  const dim3 grid = flash_grid(B, T_, NH);
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {  // mma.sync (backend/cuda/flash_mma.cuh)
    const size_t smem = flash_mma::forward_smem();
    flash_allow_smem(flash_forward_mma_kernel, smem);
    LAUNCH_KERNEL(flash_forward_mma_kernel, grid, flash_mma::kThreads, smem, stream, out, lse, qkv, T_, C, NH, scale,
                  flash_packed<T>(qkv, nullptr, C, NH) && aligned16(out));
    return;
  }
  const size_t smem = flash::forward_smem<T>();
  auto kernel = flash_forward_kernel<T>;
  flash_allow_smem(kernel, smem);
  LAUNCH_KERNEL(kernel, grid, flash::kThreads, smem, stream, out, lse, qkv, T_, C, NH, scale,
                flash_packed<T>(qkv, nullptr, C, NH));
}

// scratch: flash_scratch_floats<T>(B, T, NH) floats (bf16: D, the dq accumulator and
// turn counters; fp32: D = rowsum(P dP)); out: the forward's output (bf16: D =
// rowsum(dout out), FlashAttention-2's; fp32 recomputes D from P and dP); dqkv overwritten.
template <class T>
inline size_t flash_scratch_floats(int B, int T_, int NH) {
  return std::is_same<T, __nv_bfloat16>::value ? flash_mma::backward_scratch_floats(B, T_, NH)
                                                : flash_lse_floats(B, T_, NH);
}
template <class T>
void flash_attention_backward(T* dqkv, float* scratch, const T* dout, const T* out, const T* qkv, const float* lse,
                              int B, int T_, int C, int NH, cudaStream_t stream) {
  const float scale = 1.0f / sqrtf(static_cast<float>(C / NH));
  const dim3 grid = flash_grid(B, T_, NH);
  const bool packed = flash_packed<T>(qkv, dout, C, NH);
  float* dsum = scratch;
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {  // mma.sync (backend/cuda/flash_mma.cuh)
    const bool packed_io = packed && aligned16(out) && aligned16(dqkv);
    const size_t rows = static_cast<size_t>(B) * NH * T_, heads = static_cast<size_t>(B) * NH;
    LAUNCH_KERNEL(flash_backward_dsum_kernel, static_cast<unsigned>(ceil_div(rows, size_t{16})), 128, 0, stream, dsum,
                  dout, out, B, T_, C, NH, packed_io);
    int* turns = reinterpret_cast<int*>(scratch + rows + heads * flash_mma::backward_tiles(T_) * flash::kTile *
                                                          flash::kHead);
    CUDA_CHECK(cudaMemsetAsync(turns, 0, heads * flash_mma::backward_tiles(T_) * sizeof(int), stream));
    flash_allow_smem(flash_backward_mma_kernel, flash_mma::backward_smem());
    LAUNCH_KERNEL(flash_backward_mma_kernel, grid, flash_mma::kThreads, flash_mma::backward_smem(), stream, dqkv,
                  scratch, dout, qkv, lse, T_, C, NH, scale, packed_io);
    return;
  }
  (void)out;
  auto dq = flash_backward_dq_kernel<T>;
  flash_allow_smem(dq, flash::dq_smem<T>());
  LAUNCH_KERNEL(dq, grid, flash::kThreads, flash::dq_smem<T>(), stream, dqkv, dsum, dout, qkv, lse, T_, C, NH,
                scale, packed);
  auto dkdv = flash_backward_dkdv_kernel<T>;
  flash_allow_smem(dkdv, flash::dkdv_smem<T>());
  LAUNCH_KERNEL(dkdv, grid, flash::kThreads, flash::dkdv_smem<T>(), stream, dqkv, dout, qkv, lse, dsum, T_, C,
                NH, scale, packed);
}

}  // namespace kern
}  // namespace gpt2

#undef FLASH_UNROLL
#undef FLASH_NO_UNROLL

#endif  // BACKEND_CUDA_FLASH_ATTENTION_CUH
