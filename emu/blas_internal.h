// What the emulated cuBLAS (emu/cublas.cpp) and cuBLASLt (emu/cublaslt.cpp) share:
// element access for the storage types, and the fp32 GEMM core. Not for kernel or
// host code.
#ifndef EMU_BLAS_INTERNAL_H
#define EMU_BLAS_INTERNAL_H

#include <cublas_api.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <vector>

namespace gpt2 {
namespace emu {

inline bool supported_storage(cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_16BF || t == CUDA_R_16F; }
inline size_t type_bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

inline float load(cudaDataType t, const void* base, int64_t index) {
  switch (t) {
    case CUDA_R_32F: return static_cast<const float*>(base)[index];
    case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
    default: return __half2float(static_cast<const __half*>(base)[index]);
  }
}

inline void store(cudaDataType t, void* base, int64_t index, float v) {
  switch (t) {
    case CUDA_R_32F: static_cast<float*>(base)[index] = v; break;
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16(v); break;
    default: static_cast<__half*>(base)[index] = __float2half(v); break;
  }
}

inline bool is_transposed(cublasOperation_t op) { return op == CUBLAS_OP_T || op == CUBLAS_OP_C; }
inline bool valid_op(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

// Every fp32 compute type (the emulator computes all of them in plain fp32).
bool fp32_compute(cublasComputeType_t t);

// Type combinations cuBLAS(Lt) offers with fp32 compute: A and B of one type, C of
// that type or fp32.
bool supported_combination(cudaDataType a, cudaDataType b, cudaDataType c);

// A stored column-major matrix: element (r, c) of batch b is at
// ptr[b*batch_stride + r + c*ld].
struct Matrix {
  const void* ptr;
  cudaDataType type;
  int64_t ld;
  int64_t batch_stride;
};

// c (row-major m x n) = alpha * a (m x k) b (k x n), each element one fma chain over
// k in ascending order from 0 (emu/gemm.cpp): the same bits on every CPU and for
// every shape.
void fixed_order_sgemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b, float* c);

// The GEMM core: acc (row-major m x n) = alpha * op(A) op(B) + beta * C (C not read
// when beta == 0 or c == nullptr). The buffers are scratch, reused between calls.
void gemm_batch(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const Matrix& a,
                const Matrix& b, float beta, const Matrix* c, int64_t batch, std::vector<float>& a_buf,
                std::vector<float>& b_buf, std::vector<float>& acc);

// TF32 (CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_TF32_TENSOR_OP_MATH): the inputs rounded
// to a 10-bit mantissa, nearest, ties away from zero; accumulation stays fp32.
float round_to_tf32(float x);
// gemm_batch with the inputs rounded to TF32 when `tf32`.
void gemm_batch_tf32(bool tf32, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const Matrix& a, const Matrix& b, float beta, const Matrix* c, int64_t batch,
                     std::vector<float>& a_buf, std::vector<float>& b_buf, std::vector<float>& acc);

}  // namespace emu
}  // namespace gpt2

#endif  // EMU_BLAS_INTERNAL_H
