// Fused causal attention, flash-style (FlashAttention-2's order of work), for
// head sizes hs <= 64 (padded with zeros to 64 in shared memory): the launchers.
// The kernels are backend/cuda/flash_mma.cuh's, on tensor cores (mma.sync) for
// both storage types through backend/cuda/flash_tiles.cuh:
//   bf16 storage   bf16 operands, fp32 accumulators;
//   fp32 storage   tf32 operands when the backend runs TF32 (--tf32 on), else
//                  3xTF32 (each operand split into two tf32 parts, three
//                  products): fp32 accuracy, comparable with the CPU backend.
//
// Reads q, k, v in place from qkv[B,T,3C] and writes out[B,T,C] directly; no
// [T,T] matrix ever reaches global memory. `saved` keeps only the per-row
// log-sum-exp lse = m + log(l) of the scaled scores, in natural log units (fp32,
// B*NH*T; cuDNN's fused attention writes the same statistic); the backward
// recomputes P = exp(s - lse), as exp2 of s scale log2(e) - lse log2(e).
//
// Backward = two kernels, both deterministic (no atomics on data):
//   flash_backward_dsum_kernel  D = rowsum(dout * out), once per row;
//   flash_backward_mma_kernel   per key block, over query tiles at or below the
//                               diagonal: dv = sum P^T dO, dk = scale sum dS^T q,
//                               and dq's parts dS k added in a fixed order
// Scratch (fp32): D, the dq accumulator and one turn counter per (head, query tile).
// Tile products: forward 2 (S, P V), backward 5 per tile pair.
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

inline bool flash_attention_applies(int C, int NH) { return C / NH <= flash_mma::kHead; }
inline size_t flash_lse_floats(int B, int T_, int NH) { return static_cast<size_t>(B) * NH * T_; }
// D, the dq accumulator (B*NH x tiles x 64 x 64) and the turn counters, in fp32 words.
inline size_t flash_scratch_floats(int B, int T_, int NH) { return flash_mma::backward_scratch_floats(B, T_, NH); }

template <class K>
inline void flash_allow_smem(K kernel, size_t bytes) {
  if (bytes > size_t{48} * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}
// 128-bit tile loads and stores: hs == 64 and 16-byte aligned rows and bases.
template <class T>
inline bool flash_packed(int C, int NH, const T* a, const T* b, const T* c) {
  return C / NH == flash_mma::kHead && C % kPack<T> == 0 && aligned16(a) && aligned16(b) && aligned16(c);
}

// grid (query or key blocks of `rows`, B*NH): gridDim.y is limited to 65535 heads.
inline dim3 flash_grid(int B, int T_, int NH, int rows) {
  if (static_cast<long long>(B) * NH > 65535)
    throw std::runtime_error("flash attention: B*NH = " + std::to_string(static_cast<long long>(B) * NH) +
                             " exceeds gridDim.y (65535)");
  return dim3(ceil_div(T_, rows), B * NH);
}

// Calls f(Ops{}) with the tile operations for storage T (fp32: tf32 or 3xTF32).
template <class T, class F>
inline void with_flash_ops(bool tf32, F&& f) {
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    (void)tf32;
    f(flash_mma::Bf16Ops{});
  } else if (tf32) {
    f(flash_mma::Tf32Ops<false>{});
  } else {
    f(flash_mma::Tf32Ops<true>{});
  }
}

// Calls f(std::integral_constant<bool, drop.p > 0>): the kernels without dropout
// never see it (bitwise the kernels before it, and no registers spent on it).
template <class F>
inline void with_dropout(const DropoutMask& drop, F&& f) {
  if (drop.p > 0.0f)
    f(std::true_type{});
  else
    f(std::false_type{});
}

// lse: B*NH*T floats. tf32: fp32 storage multiplies tf32 operands (else 3xTF32).
// drop: attention dropout (backend.h; p == 0: none).
template <class T>
void flash_attention_forward(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, bool tf32,
                             const DropoutMask& drop, cudaStream_t stream) {
  const float scale = 1.0f / sqrtf(static_cast<float>(C / NH));
  const bool packed = flash_packed<T>(C, NH, qkv, out, qkv);
  with_flash_ops<T>(tf32, [&](auto ops) {
    with_dropout(drop, [&](auto dropping) {
      auto kernel = flash_forward_mma_kernel<decltype(ops), decltype(dropping)::value>;
      const dim3 grid = flash_grid(B, T_, NH, flash_mma::forward_rows<decltype(ops)>());
      const size_t smem = flash_mma::forward_smem<decltype(ops)>();
      flash_allow_smem(kernel, smem);
      LAUNCH_KERNEL(kernel, grid, flash_mma::kThreads, smem, stream, out, lse, qkv, T_, C, NH, scale, packed, drop);
    });
  });
}

// scratch: flash_scratch_floats(B, T, NH) floats; out: the forward's output (D =
// rowsum(dout out), FlashAttention-2's); dqkv overwritten.
template <class T>
void flash_attention_backward(T* dqkv, float* scratch, const T* dout, const T* out, const T* qkv, const float* lse,
                              int B, int T_, int C, int NH, bool tf32, const DropoutMask& drop, cudaStream_t stream) {
  const float scale = 1.0f / sqrtf(static_cast<float>(C / NH));
  const dim3 grid = flash_grid(B, T_, NH, flash_mma::kTile);
  const bool packed = flash_packed<T>(C, NH, qkv, dout, dqkv) && aligned16(out);
  const size_t rows = static_cast<size_t>(B) * NH * T_, heads = static_cast<size_t>(B) * NH;
  LAUNCH_KERNEL(flash_backward_dsum_kernel<T>, static_cast<unsigned>(ceil_div(rows, size_t{16})), 128, 0, stream,
                scratch, dout, out, B, T_, C, NH, packed);
  const size_t tiles = flash_mma::backward_tiles(T_);
  int* turns = reinterpret_cast<int*>(scratch + rows + heads * tiles * flash_mma::kTile * flash_mma::kHead);
  CUDA_CHECK(cudaMemsetAsync(turns, 0, heads * tiles * sizeof(int), stream));
  with_flash_ops<T>(tf32, [&](auto ops) {
    with_dropout(drop, [&](auto dropping) {
      auto kernel = flash_backward_mma_kernel<decltype(ops), decltype(dropping)::value>;
      const size_t smem = flash_mma::backward_smem<decltype(ops)>();
      flash_allow_smem(kernel, smem);
      LAUNCH_KERNEL(kernel, grid, flash_mma::kThreads, smem, stream, dqkv, scratch, dout, qkv, lse, T_, C, NH, scale,
                    packed, drop);
    });
  });
}

}  // namespace kern
}  // namespace gpt2

#endif  // BACKEND_CUDA_FLASH_ATTENTION_CUH
