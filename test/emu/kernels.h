// Host entry points of the emulator's self-test kernels (test/emu/kernels.cu).
// Each takes host data, runs its kernel through LAUNCH_KERNEL (on the emulator
// under g++, on a GPU under nvcc) and returns host results; failures throw.
#ifndef TEST_EMU_KERNELS_H
#define TEST_EMU_KERNELS_H

#include <cstdint>
#include <vector>

namespace gpt2 {
namespace emu_test {

// Per-block sums with a shared-memory tree (static __shared__, __syncthreads).
std::vector<float> block_sums(const std::vector<float>& in, int block_size);
// The same tree with the barrier inside the loop left out (a race).
std::vector<float> block_sums_missing_sync(const std::vector<float>& in, int block_size);
// out[t] = in[(t+1) % n] staged through dynamic shared memory, without the barrier.
std::vector<float> rotate_missing_sync(const std::vector<float>& in);
// Warp sums with __shfl_xor_sync / __shfl_down_sync, combined per block via
// dynamic shared memory.
std::vector<float> warp_shuffle_block_sums(const std::vector<float>& in, int block_size);
// Layernorm-like: one warp per row of C channels, mean and rstd by warp
// reductions (cg::reduce); out = (x - mean) * rstd, plus mean/rstd per row.
void warp_layernorm(const std::vector<float>& in, int rows, int channels, std::vector<float>& out,
                    std::vector<float>& mean, std::vector<float>& rstd);
// Row softmax, one block per row, max and sum reduced in dynamic shared memory
// (bf16 input, fp32 output).
std::vector<float> block_softmax(const std::vector<uint16_t>& in_bf16, int rows, int cols, int block_size);
// Atomics: histogram (atomicAdd int), total (atomicAdd float), atomicMax/Min,
// atomicCAS-built counter, atomicInc wrap-around.
struct AtomicResults {
  std::vector<int> histogram;
  float total = 0;
  int max_value = 0, min_value = 0;
  unsigned cas_counter = 0, inc_counter = 0;
};
AtomicResults atomics(const std::vector<int>& values, int bins, unsigned inc_limit);
// Warp intrinsics, one row of 32 results per lane per probe (see kernels.cu).
std::vector<int> warp_probe(int block_size);
// Indices of a 3D grid of 3D blocks: per thread its (tx,ty,tz,bx,by,bz) and the
// global linear id it computed.
std::vector<int> index_probe(int gx, int gy, int gz, int bx, int by, int bz);
// cooperative groups: per thread thread_rank, meta_group_rank, meta_group_size,
// tile sum (cg::reduce plus), tile max (cg::reduce greater), block thread_rank.
std::vector<int> cg_probe(int block_size);
// C[M,N] = A[M,K] (row-major) * B (row-major [K,N] or column-major) with WMMA
// 16x16x16 tiles, fp32 accumulate; a/b hold bf16 bits, or fp16 bits if half_inputs.
std::vector<float> wmma_gemm(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, int M, int N, int K,
                             bool b_col_major, bool half_inputs);
// 16-byte vector loads/stores with cache hints (__ldg, __ldcs, __stcs, __stcg on
// float4 and int4) and bf16 packing; out = in * 2 + 1 elementwise.
std::vector<float> vector_hints(const std::vector<float>& in);
// Math intrinsics on each input: __expf, rsqrtf, __float_as_uint round trip,
// fmaf, tanhf, __fdividef, __saturatef, __float2int_rn (8 outputs per input).
std::vector<float> math_probe(const std::vector<float>& in);
// Launch with dynamic shared memory: fills smem with a pattern and sums it.
float big_shared_sum(int bytes, bool opt_in);
// Kernels that break the rules; each launch must fail with a message.
void launch_divergent_barrier();
void launch_early_exit_before_barrier();
void launch_shuffle_with_exited_lane();
void launch_mismatched_warp_ops();
void launch_device_assert(int bad_index);
// Reads dynamic shared memory that nobody wrote: returns what it found (NaN in
// emulation, which poisons it).
float read_uninitialised_shared();

// Launches a kernel declared __launch_bounds__(256) (bound 256) or
// __launch_bounds__(128, 2) (bound 128) with `block_size` threads; returns the
// block size the kernel saw. Throws when the launch is refused.
int run_bounded_kernel(int bound, int block_size);
// cudaFuncGetAttributes(...).maxThreadsPerBlock of those kernels.
int bounded_kernel_max_threads(int bound);
// Per 4-float pack sums of in[offset_floats...]: raw float4 loads or kern::load128.
std::vector<float> pack_sums(const std::vector<float>& in, int offset_floats, bool helper);

}  // namespace emu_test
}  // namespace gpt2

#endif  // TEST_EMU_KERNELS_H
