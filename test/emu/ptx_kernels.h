// Host entry points of the PTX-wrapper self-test kernels (test/emu/ptx_kernels.cu):
// backend/cuda/mma.cuh's ldmatrix, mma.sync and cp.async on one warp.
#ifndef TEST_EMU_PTX_KERNELS_H
#define TEST_EMU_PTX_KERNELS_H

#include <cstdint>
#include <vector>

namespace gpt2 {
namespace emu_test {

// C[16 x 16] = A[16 x 32] B[32 x 16] on one warp: A by ldmatrix, B by
// ldmatrix.trans from row-major [32][16] or by ldmatrix from B^T ([16][32],
// b_transposed), two mma.m16n8k16 per k step; a/b hold bf16 bits.
std::vector<float> ptx_gemm_bf16(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, bool b_transposed);
// C[16 x 16] = A[16 x 16] B[16 x 16] with fp32 A and B^T ([16][16]) loaded by
// ldmatrix, rounded by cvt.rna.tf32, two mma.m16n8k8 per k step.
std::vector<float> ptx_gemm_tf32(const std::vector<float>& a, const std::vector<float>& bt);
// The same product in 3xTF32 (A and B^T split into big + small tf32 parts):
// [0, 256) by mma_tf32x3, [256, 512) by its three mma_tf32 one by one.
std::vector<float> ptx_gemm_3xtf32(const std::vector<float>& a, const std::vector<float>& bt);
// cp.async of 512 bytes (32 lanes x 16) into shared memory initialised to -1,
// then copied out. mode 0: wait_group 0; 1: no wait; 2: src_bytes 0 (zero
// fill); 3: a second group of 512 bytes, wait_group 1, read both, then
// wait_group 0 and read the second again (out: 3 x 128 floats).
std::vector<float> ptx_cp_async(const std::vector<float>& in, int mode);
// A double-buffered cp.async pipeline over in.size() / 256 tiles on 64 threads:
// out[256 kt + 4 j + e] = tile kt's float 4 ((j + 33) % 64) + e, read from shared
// memory. mode bit 0: no barrier between the reads of a buffer and the staging
// of tile kt+2 into it (a race); bit 1: a __syncwarp after the reads.
std::vector<float> ptx_cp_async_pipeline(const std::vector<float>& in, int mode);

}  // namespace emu_test
}  // namespace gpt2

#endif  // TEST_EMU_PTX_KERNELS_H
