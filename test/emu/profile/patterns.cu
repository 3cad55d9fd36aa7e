// Kernels whose memory transactions are known exactly, for the profile build
// (emu/profile.h; checked by test/emu/profile/profile_patterns_test.sh, which
// holds the expected counts). One warp per block unless a kernel says otherwise;
// every kernel ends by writing out[t] (one coalesced 4-byte global store
// request: 4 sectors) unless it writes wider.
#include "test/emu/cuda.cuh"

namespace {

constexpr int kWarp = 32;

// s[t]: consecutive words, one per bank: 1 wavefront per request.
__global__ void shared_conflict_free(float* out) {
  __shared__ float s[kWarp];
  const int t = threadIdx.x;
  s[t] = static_cast<float>(t);
  __syncthreads();
  out[t] = s[t];
}

// s[32 t]: every lane in bank 0, distinct words: 32-way.
__global__ void shared_stride32(float* out) {
  __shared__ float s[kWarp * kWarp];
  const int t = threadIdx.x;
  s[t * kWarp] = static_cast<float>(t);
  __syncthreads();
  out[t] = s[t * kWarp];
}

// s[2 t]: two lanes per bank: 2-way.
__global__ void shared_stride2(float* out) {
  __shared__ float s[2 * kWarp];
  const int t = threadIdx.x;
  s[2 * t] = static_cast<float>(t);
  __syncthreads();
  out[t] = s[2 * t];
}

// A column of a 32 x 33 tile (the padding column): row stride 33 words, conflict-free.
__global__ void shared_padded_column(float* out) {
  __shared__ float tile[kWarp][kWarp + 1];
  const int t = threadIdx.x;
  tile[t][0] = static_cast<float>(t);
  __syncthreads();
  out[t] = tile[t][0];
}

// Every lane reads the same word: a broadcast, 1 wavefront.
__global__ void shared_broadcast(float* out) {
  __shared__ float s[kWarp];
  const int t = threadIdx.x;
  s[t] = static_cast<float>(t);
  __syncthreads();
  out[t] = s[0];
}

// float4 per lane, consecutive: 4 quarter-warps of 128 bytes, 4 wavefronts per
// request; out4 written as float4: 512 bytes, 16 sectors.
__global__ void shared_vector16(float4* out4) {
  __shared__ float4 s4[kWarp];
  const int t = threadIdx.x;
  s4[t] = make_float4(t, t + 1, t + 2, t + 3);
  __syncthreads();
  const float4 v = s4[t];
  out4[t] = v;
}

// float4 at a 32-byte stride: each quarter-warp covers 256 bytes, 2 words per
// bank: 8 wavefronts per request.
__global__ void shared_vector16_stride2(float4* out4) {
  __shared__ float4 s4[2 * kWarp];
  const int t = threadIdx.x;
  s4[2 * t] = make_float4(t, t + 1, t + 2, t + 3);
  __syncthreads();
  const float4 v = s4[2 * t];
  out4[t] = v;
}

// float2 per lane, consecutive: 2 half-warps of 128 bytes, 2 wavefronts per request.
__global__ void shared_vector8(float2* out2) {
  __shared__ float2 s2[kWarp];
  const int t = threadIdx.x;
  s2[t] = make_float2(t, t + 1);
  __syncthreads();
  const float2 v = s2[t];
  out2[t] = v;
}

// Four executions of one site per lane between two barriers: 4 requests.
__global__ void shared_loop(float* out) {
  __shared__ float s[4 * kWarp];
  const int t = threadIdx.x;
  for (int i = 0; i < 4; ++i) s[t + kWarp * i] = static_cast<float>(i);
  __syncthreads();
  out[t] = s[t];
}

// Only even lanes store: one request of 16 lanes, 1 wavefront.
__global__ void shared_divergent(float* out) {
  __shared__ float s[kWarp];
  const int t = threadIdx.x;
  if (t % 2 == 0) s[t] = static_cast<float>(t);
  __syncthreads();
  out[t] = s[t & ~1];
}

// Dynamic shared memory, two warps: a request per warp.
__global__ void shared_dynamic_two_warps(float* out) {
  DYNAMIC_SHARED(float, s);
  const int t = threadIdx.x;
  s[t] = static_cast<float>(t);
  __syncthreads();
  out[t] = s[t];
}

// Coalesced 4-byte global load: 4 sectors, like the store.
__global__ void global_coalesced(const float* in, float* out) {
  const int t = threadIdx.x;
  out[t] = in[t];
}

// Global load at a 128-byte stride: 32 sectors (4 would do).
__global__ void global_strided(const float* in, float* out) {
  const int t = threadIdx.x;
  out[t] = in[t * kWarp];
}

// Global load shifted by one float: 128 bytes over 5 sectors.
__global__ void global_misaligned(const float* in, float* out) {
  const int t = threadIdx.x;
  out[t] = in[t + 1];
}

// ---- tensor-core tiles (emu/wmma.h's model: ldmatrix.x4 pieces, the mma C layout) ----
namespace w = nvcuda::wmma;

// A 16x16 bf16 tile, row-major, rows LD elements apart: 8 rows of 16 bytes per
// quarter-warp. LD 16 (32-byte rows): 2 rows per bank group, 2-way; LD 64
// (128-byte rows): 8-way; LD 72 (144 bytes: the padded layout): conflict-free.
template <int LD>
__device__ void load_tile(float* out) {
  __shared__ __align__(32) __nv_bfloat16 tile[16 * LD];
  w::fragment<w::matrix_a, 16, 16, 16, __nv_bfloat16, w::row_major> a;
  w::load_matrix_sync(a, tile, LD);
  out[threadIdx.x] = 0.0f;
}
__global__ void wmma_load_ld16(float* out) { load_tile<16>(out); }
__global__ void wmma_load_ld64(float* out) { load_tile<64>(out); }
__global__ void wmma_load_ld72(float* out) { load_tile<72>(out); }

// A 16x16 fp32 accumulator stored row-major: four 8x8 blocks, one 8-byte store per
// lane each; per half-warp rows g = 0..3 at 2t columns. LD 16 (64-byte rows):
// rows 0 and 2 share banks, 2-way; LD 24 (96-byte rows): conflict-free.
template <int LD>
__device__ void store_accumulator(float* out) {
  __shared__ __align__(32) float tile[16 * LD];
  w::fragment<w::accumulator, 16, 16, 16, float> c;
  w::fill_fragment(c, 1.0f);
  w::store_matrix_sync(tile, c, LD, w::mem_row_major);
  out[threadIdx.x] = 0.0f;
}
__global__ void wmma_store_ld16(float* out) { store_accumulator<16>(out); }
__global__ void wmma_store_ld24(float* out) { store_accumulator<24>(out); }

}  // namespace

int main() {
  float *in = nullptr, *out = nullptr;
  CUDA_CHECK(cudaMalloc(&in, kWarp * kWarp * sizeof(float) + 64));
  CUDA_CHECK(cudaMalloc(&out, 2 * kWarp * sizeof(float4)));
  CUDA_CHECK(cudaMemset(in, 0, kWarp * kWarp * sizeof(float) + 64));
  float4* out4 = reinterpret_cast<float4*>(out);
  float2* out2 = reinterpret_cast<float2*>(out);
  LAUNCH_KERNEL(shared_conflict_free, 1, kWarp, 0, nullptr, out);
  LAUNCH_KERNEL(shared_stride32, 1, kWarp, 0, nullptr, out);
  LAUNCH_KERNEL(shared_stride2, 1, kWarp, 0, nullptr, out);
  LAUNCH_KERNEL(shared_padded_column, 1, kWarp, 0, nullptr, out);
  LAUNCH_KERNEL(shared_broadcast, 1, kWarp, 0, nullptr, out);
  LAUNCH_KERNEL(shared_vector16, 1, kWarp, 0, nullptr, out4);
  LAUNCH_KERNEL(shared_vector16_stride2, 1, kWarp, 0, nullptr, out4);
  LAUNCH_KERNEL(shared_vector8, 1, kWarp, 0, nullptr, out2);
  LAUNCH_KERNEL(shared_loop, 1, kWarp, 0, nullptr, out);
  LAUNCH_KERNEL(shared_divergent, 1, kWarp, 0, nullptr, out);
  LAUNCH_KERNEL(shared_dynamic_two_warps, 1, 2 * kWarp, 2 * kWarp * sizeof(float), nullptr, out);
  LAUNCH_KERNEL(global_coalesced, 1, kWarp, 0, nullptr, in, out);
  LAUNCH_KERNEL(global_strided, 1, kWarp, 0, nullptr, in, out);
  LAUNCH_KERNEL(global_misaligned, 1, kWarp, 0, nullptr, in, out);
  LAUNCH_KERNEL(wmma_load_ld16, 1, kWarp, 0, nullptr, out);
  LAUNCH_KERNEL(wmma_load_ld64, 1, kWarp, 0, nullptr, out);
  LAUNCH_KERNEL(wmma_load_ld72, 1, kWarp, 0, nullptr, out);
  LAUNCH_KERNEL(wmma_store_ld16, 1, kWarp, 0, nullptr, out);
  LAUNCH_KERNEL(wmma_store_ld24, 1, kWarp, 0, nullptr, out);
  // Twice, on 3 blocks: counts sum over blocks and launches.
  for (int i = 0; i < 2; ++i) LAUNCH_KERNEL(shared_stride2, 3, kWarp, 0, nullptr, out);
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaFree(in));
  CUDA_CHECK(cudaFree(out));
  return 0;
}
