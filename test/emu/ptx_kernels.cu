// Self-test kernels of backend/cuda/mma.cuh (one warp each); see ptx_kernels.h.
#include "test/emu/ptx_kernels.h"

#include "backend/cuda/mma.cuh"

namespace gpt2 {
namespace emu_test {
namespace {

using namespace kern::mma;

// Stores a warp's two 16x8 accumulator tiles (n8 tiles 0 and 1) into c[16][16].
__device__ void store_c(float* c, const float (&d)[2][4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  for (int nt = 0; nt < 2; ++nt) {
    c[g * 16 + nt * 8 + 2 * t] = d[nt][0];
    c[g * 16 + nt * 8 + 2 * t + 1] = d[nt][1];
    c[(g + 8) * 16 + nt * 8 + 2 * t] = d[nt][2];
    c[(g + 8) * 16 + nt * 8 + 2 * t + 1] = d[nt][3];
  }
}

// Rows padded by 8 bf16 (16 bytes): the 8 rows of an ldmatrix matrix fall in distinct banks.
template <bool kBt>
__global__ void ptx_gemm_bf16_kernel(const uint16_t* a, const uint16_t* b, float* c) {
  constexpr int K = 32;
  __shared__ __align__(16) uint16_t sA[16][K + 8];
  __shared__ __align__(16) uint16_t sB[kBt ? 16 : K][(kBt ? K : 16) + 8];
  const int lane = threadIdx.x, i = lane / 8, j = lane % 8;
  for (int e = lane; e < 16 * K; e += 32) sA[e / K][e % K] = a[e];
  for (int e = lane; e < 16 * K; e += 32) {
    if (kBt) sB[e / K][e % K] = b[e];
    else sB[e / 16][e % 16] = b[e];
  }
  __syncwarp();
  float d[2][4] = {};
  for (int k0 = 0; k0 < K; k0 += 16) {
    uint32_t af[4], bq[4];
    ldmatrix_x4(af, &sA[(i % 2) * 8 + j][k0 + (i / 2) * 8]);
    if (kBt) ldmatrix_x4(bq, &sB[(i / 2) * 8 + j][k0 + (i % 2) * 8]);
    else ldmatrix_x4_trans(bq, &sB[k0 + (i % 2) * 8 + j][(i / 2) * 8]);
    const uint32_t b0[2] = {bq[0], bq[1]}, b1[2] = {bq[2], bq[3]};
    mma_bf16(d[0], af, b0);
    mma_bf16(d[1], af, b1);
  }
  store_c(c, d);
}

// fp32 rows padded to 20 floats (80 bytes: 8 rows in distinct 16-byte bank groups).
constexpr int kTf32K = 16;
// A and B^T ([16][16] fp32) into rows padded to 20 floats, by the warp.
__device__ void stage_tf32(float (&sA)[16][kTf32K + 4], float (&sBt)[16][kTf32K + 4], const float* a, const float* bt) {
  for (int e = threadIdx.x; e < 16 * kTf32K; e += 32) {
    sA[e / kTf32K][e % kTf32K] = a[e];
    sBt[e / kTf32K][e % kTf32K] = bt[e];
  }
  __syncwarp();
}

__global__ void ptx_gemm_tf32_kernel(const float* a, const float* bt, float* c) {
  constexpr int K = kTf32K;
  __shared__ __align__(16) float sA[16][K + 4];
  __shared__ __align__(16) float sBt[16][K + 4];
  const int lane = threadIdx.x, i = lane / 8, j = lane % 8;
  stage_tf32(sA, sBt, a, bt);
  float d[2][4] = {};
  for (int k0 = 0; k0 < K; k0 += 8) {
    uint32_t af[4], bq[4];
    ldmatrix_x4(af, &sA[(i % 2) * 8 + j][k0 + (i / 2) * 4]);
    ldmatrix_x4(bq, &sBt[(i / 2) * 8 + j][k0 + (i % 2) * 4]);
    for (uint32_t& w : af) w = to_tf32(__uint_as_float(w));
    for (uint32_t& w : bq) w = to_tf32(__uint_as_float(w));
    const uint32_t b0[2] = {bq[0], bq[1]}, b1[2] = {bq[2], bq[3]};
    mma_tf32(d[0], af, b0);
    mma_tf32(d[1], af, b1);
  }
  store_c(c, d);
}

// 3xTF32 of the same product: c[0..255] from mma_tf32x3 (d + corr), c[256..511]
// from the three mma_tf32 it stands for, called one by one.
__global__ void ptx_gemm_3xtf32_kernel(const float* a, const float* bt, float* c) {
  constexpr int K = kTf32K;
  __shared__ __align__(16) float sA[16][K + 4];
  __shared__ __align__(16) float sBt[16][K + 4];
  const int lane = threadIdx.x, i = lane / 8, j = lane % 8;
  stage_tf32(sA, sBt, a, bt);
  float d[2][4] = {}, corr[2][4] = {}, d3[2][4] = {}, corr3[2][4] = {};
  auto split = [](uint32_t w, uint32_t& big, uint32_t& small) {
    big = to_tf32(__uint_as_float(w));
    small = to_tf32(__uint_as_float(w) - __uint_as_float(big));
  };
  for (int k0 = 0; k0 < K; k0 += 8) {
    uint32_t af[4], bq[4], ab[4], as[4], bb[4], bs[4];
    ldmatrix_x4(af, &sA[(i % 2) * 8 + j][k0 + (i / 2) * 4]);
    ldmatrix_x4(bq, &sBt[(i / 2) * 8 + j][k0 + (i % 2) * 4]);
    for (int r = 0; r < 4; ++r) split(af[r], ab[r], as[r]), split(bq[r], bb[r], bs[r]);
    for (int nt = 0; nt < 2; ++nt) {
      const uint32_t b_big[2] = {bb[2 * nt], bb[2 * nt + 1]}, b_small[2] = {bs[2 * nt], bs[2 * nt + 1]};
      mma_tf32x3(d[nt], corr[nt], ab, as, b_big, b_small);
      mma_tf32(corr3[nt], ab, b_small);
      mma_tf32(corr3[nt], as, b_big);
      mma_tf32(d3[nt], ab, b_big);
    }
  }
  for (int nt = 0; nt < 2; ++nt)
    for (int e = 0; e < 4; ++e) d[nt][e] += corr[nt][e], d3[nt][e] += corr3[nt][e];
  store_c(c, d);
  store_c(c + 256, d3);
}

__global__ void ptx_cp_async_kernel(const float* in, float* out, int mode) {
  __shared__ __align__(16) float s[2][128];
  const int lane = threadIdx.x;
  for (int e = lane; e < 256; e += 32) s[e / 128][e % 128] = -1.0f;
  __syncthreads();
  cp_async16(&s[0][4 * lane], in + 4 * lane, mode == 2 ? 0 : 16);
  cp_async_commit();
  if (mode == 3) {
    cp_async16(&s[1][4 * lane], in + 128 + 4 * lane, 16);
    cp_async_commit();
    cp_async_wait<1>();
  } else if (mode != 1) {
    cp_async_wait<0>();
  }
  __syncthreads();
  for (int e = lane; e < 256; e += 32) out[e] = s[e / 128][e % 128];
  if (mode == 3) {
    __syncthreads();  // every lane has read the pending group's (stale) words
    cp_async_wait<0>();
    __syncthreads();
    for (int e = lane; e < 128; e += 32) out[256 + e] = s[1][e];
  }
}

// A double-buffered cp.async pipeline over `tiles` tiles of 256 floats on 64
// threads (two warps): each thread stages its own 16-byte chunk of tile kt+1
// while it reads another warp's chunk of tile kt. mode bit 0 drops the barrier
// after the reads (the race: tile kt+2 is staged into a buffer the other warp
// may still read); bit 1 puts a warp operation after the reads, as an mma
// follows its ldmatrix, so that warps kept in step would all read first.
__global__ void ptx_cp_async_pipeline_kernel(const float* in, float* out, int tiles, int mode) {
  __shared__ __align__(16) float buf[2][256];
  const int me = threadIdx.x, other = (me + 33) % 64;
  cp_async16(&buf[0][4 * me], in + 4 * me, 16);
  cp_async_commit();
  for (int kt = 0; kt < tiles; ++kt) {
    if (kt + 1 < tiles) {
      cp_async16(&buf[(kt + 1) % 2][4 * me], in + (kt + 1) * 256 + 4 * me, 16);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    float v[4];
    for (int e = 0; e < 4; ++e) v[e] = buf[kt % 2][4 * other + e];
    if (mode & 2) __syncwarp();
    for (int e = 0; e < 4; ++e) out[kt * 256 + 4 * me + e] = v[e];
    if (!(mode & 1)) __syncthreads();  // every thread has read buffer kt%2 before tile kt+2 goes there
  }
}

template <class T>
T* upload(const std::vector<T>& host) {
  T* p = nullptr;
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p), host.size() * sizeof(T)));
  CUDA_CHECK(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}
std::vector<float> download_and_free(float* p, size_t n) {
  std::vector<float> host(n);
  CUDA_CHECK(cudaMemcpy(host.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaFree(p));
  return host;
}

}  // namespace

std::vector<float> ptx_gemm_bf16(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, bool b_transposed) {
  uint16_t* d_a = upload(a);
  uint16_t* d_b = upload(b);
  float* d_c = upload(std::vector<float>(256, 0.0f));
  if (b_transposed) LAUNCH_KERNEL(ptx_gemm_bf16_kernel<true>, 1, 32, 0, 0, d_a, d_b, d_c);
  else LAUNCH_KERNEL(ptx_gemm_bf16_kernel<false>, 1, 32, 0, 0, d_a, d_b, d_c);
  CUDA_CHECK(cudaFree(d_a));
  CUDA_CHECK(cudaFree(d_b));
  return download_and_free(d_c, 256);
}

std::vector<float> ptx_gemm_tf32(const std::vector<float>& a, const std::vector<float>& bt) {
  float* d_a = upload(a);
  float* d_b = upload(bt);
  float* d_c = upload(std::vector<float>(256, 0.0f));
  LAUNCH_KERNEL(ptx_gemm_tf32_kernel, 1, 32, 0, 0, d_a, d_b, d_c);
  CUDA_CHECK(cudaFree(d_a));
  CUDA_CHECK(cudaFree(d_b));
  return download_and_free(d_c, 256);
}

std::vector<float> ptx_gemm_3xtf32(const std::vector<float>& a, const std::vector<float>& bt) {
  float* d_a = upload(a);
  float* d_b = upload(bt);
  float* d_c = upload(std::vector<float>(512, 0.0f));
  LAUNCH_KERNEL(ptx_gemm_3xtf32_kernel, 1, 32, 0, 0, d_a, d_b, d_c);
  CUDA_CHECK(cudaFree(d_a));
  CUDA_CHECK(cudaFree(d_b));
  return download_and_free(d_c, 512);
}

std::vector<float> ptx_cp_async(const std::vector<float>& in, int mode) {
  float* d_in = upload(in);
  float* d_out = upload(std::vector<float>(384, 0.0f));
  LAUNCH_KERNEL(ptx_cp_async_kernel, 1, 32, 0, 0, d_in, d_out, mode);
  CUDA_CHECK(cudaFree(d_in));
  return download_and_free(d_out, 384);
}

std::vector<float> ptx_cp_async_pipeline(const std::vector<float>& in, int mode) {
  const int tiles = static_cast<int>(in.size() / 256);
  float* d_in = upload(in);
  float* d_out = upload(std::vector<float>(in.size(), 0.0f));
  LAUNCH_KERNEL(ptx_cp_async_pipeline_kernel, 1, 64, 0, 0, d_in, d_out, tiles, mode);
  CUDA_CHECK(cudaFree(d_in));
  return download_and_free(d_out, in.size());
}

}  // namespace emu_test
}  // namespace gpt2
