// Token + position embedding, forward and backward.
//
// forward   out = wte[token] + wpe[t]; each thread writes P consecutive columns
//           of one position: P = kPack<T> (128-bit loads of wte/wpe, 128-bit
//           store) when C % P == 0 and out, wte, wpe are 16-byte aligned, else
//           P = 1 (same arithmetic, same bits). Reads 2 elements + 1 token per P
//           elements (the token is shared by the row's threads), writes 1.
//           A token id outside [0, V) cannot be checked on the host without a
//           download, so the kernel writes NaN for that row instead: the loss
//           becomes NaN and the trainer's NaN guard stops the run.
// backward  dwpe: one thread per (t, c) sums the B rows in order (deterministic,
//           coalesced over c). dwte: one thread per (b, t, c) adds its element
//           with atomicAdd, since several positions may share a token; fp32
//           atomics make the summation order (and so the last bits) vary from
//           run to run. bf16: the touched rows are copied to an fp32 shadow
//           (workspace), accumulated there and rounded back once.
//           Out-of-range ids are skipped.
// T (float or __nv_bfloat16) is the storage type; sums are fp32.
#ifndef BACKEND_CUDA_ENCODER_CUH
#define BACKEND_CUDA_ENCODER_CUH

#include "backend/cuda/common.cuh"
#include "backend/cuda/pack128.cuh"

namespace gpt2 {
namespace kern {

// Thread i writes out[i*P, i*P + P): P columns of one position (C % P == 0).
template <class T, int P>
__global__ void encoder_forward_kernel(T* out, const int* tokens, const T* wte, const T* wpe,
                                       int B, int T_, int C, int V) {
  const size_t idx = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * P;
  if (idx >= static_cast<size_t>(B) * T_ * C) return;
  const size_t bt = idx / C;
  const int c = static_cast<int>(idx % C);
  const int t = static_cast<int>(bt % T_);
  const int token = tokens[bt];
  float x[P], y[P];
  if (token >= 0 && token < V) {
    load_floats<P>(x, wte + static_cast<size_t>(token) * C + c);  // rows of repeated tokens: cached
    load_floats<P>(y, wpe + static_cast<size_t>(t) * C + c);      // reused by all B sequences
    for (int k = 0; k < P; k++) x[k] += y[k];
  } else {
    for (int k = 0; k < P; k++) x[k] = NAN;
  }
  store_floats<P>(out + idx, x);
}

template <class T>
__global__ void encoder_backward_wpe_kernel(T* dwpe, const T* dout, int B, int T_, int C) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;  // t * C + c
  if (idx >= T_ * C) return;
  float sum = 0.0f;
  for (int b = 0; b < B; b++) sum += to_float(dout[static_cast<size_t>(b) * T_ * C + idx]);
  dwpe[idx] = from_float<T>(to_float(dwpe[idx]) + sum);
}

// acc[token - v0, c] += dout[n, c] with atomics, for tokens in [v0, v1); acc
// is dwte's rows from v0 (fp32) or their fp32 shadow (bf16, see
// embedding_backward_rows).
template <class TA, class T>
__global__ void encoder_backward_wte_kernel(TA* acc, const T* dout, const int* tokens, size_t N,
                                            int C, int v0, int v1) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= N * C) return;
  const int token = tokens[idx / C];
  if (token < v0 || token >= v1) return;
  const int c = static_cast<int>(idx % C);
  atomicAdd(&acc[static_cast<size_t>(token - v0) * C + c], from_float<TA>(to_float(dout[idx])));
}

// Copies the window's rows of the batch's tokens between dwte and its fp32
// shadow (to_shadow: dwte -> shadow, else shadow -> dwte rounded). Threads of
// positions with the same token write the same value.
template <class T>
__global__ void encoder_wte_shadow_kernel(float* shadow, T* dwte, const int* tokens, size_t N,
                                          int C, int v0, int v1, bool to_shadow) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= N * C) return;
  const int token = tokens[idx / C];
  if (token < v0 || token >= v1) return;
  const size_t i = static_cast<size_t>(token - v0) * C + idx % C;
  if (to_shadow)
    shadow[i] = to_float(dwte[i]);
  else
    dwte[i] = from_float<T>(shadow[i]);
}

template <class T>
void encoder_forward(T* out, const int* tokens, const T* wte, const T* wpe, int B, int T_, int C,
                     int V, cudaStream_t stream) {
  const int block = 256;
  const size_t n = static_cast<size_t>(B) * T_ * C;
  constexpr int P = kPack<T>;
  if (can_pack(C, P, out, wte, wpe)) {
    auto kernel = encoder_forward_kernel<T, P>;
    LAUNCH_KERNEL(kernel, ceil_div(n / P, block), block, 0, stream, out, tokens, wte, wpe, B, T_,
                  C, V);
  } else {
    auto kernel = encoder_forward_kernel<T, 1>;
    LAUNCH_KERNEL(kernel, ceil_div(n, block), block, 0, stream, out, tokens, wte, wpe, B, T_, C,
                  V);
  }
}

// dwte_rows[token - v0] += dout[n] for the tokens in [v0, v0 + rows): dwte's
// part of the encoder backward over a vocabulary window (the whole table:
// v0 = 0, rows = V). shadow: rows*C floats when T is not float (else unused):
// the rows a bf16 dwte receives are accumulated in fp32 and rounded once,
// instead of once per repeated token.
template <class T>
void embedding_backward_rows(T* dwte_rows, float* shadow, const T* dout, const int* tokens, size_t N,
                             int C, int v0, int rows, cudaStream_t stream) {
  const int block = 256;
  const size_t n = N * C;
  const int v1 = v0 + rows;
  if constexpr (std::is_same<T, float>::value) {
    auto wte_kernel = encoder_backward_wte_kernel<T, T>;
    LAUNCH_KERNEL(wte_kernel, ceil_div(n, block), block, 0, stream, dwte_rows, dout, tokens, N, C,
                  v0, v1);
  } else {
    auto shadow_kernel = encoder_wte_shadow_kernel<T>;
    auto wte_kernel = encoder_backward_wte_kernel<float, T>;
    LAUNCH_KERNEL(shadow_kernel, ceil_div(n, block), block, 0, stream, shadow, dwte_rows, tokens, N,
                  C, v0, v1, true);
    LAUNCH_KERNEL(wte_kernel, ceil_div(n, block), block, 0, stream, shadow, dout, tokens, N, C, v0,
                  v1);
    LAUNCH_KERNEL(shadow_kernel, ceil_div(n, block), block, 0, stream, shadow, dwte_rows, tokens, N,
                  C, v0, v1, false);
  }
}

// dwte may be nullptr (dwpe only); shadow as for embedding_backward_rows with rows = V.
template <class T>
void encoder_backward(T* dwte, T* dwpe, float* shadow, const T* dout, const int* tokens, int B,
                      int T_, int C, int V, cudaStream_t stream) {
  const int block = 256;
  auto wpe_kernel = encoder_backward_wpe_kernel<T>;
  LAUNCH_KERNEL(wpe_kernel, ceil_div(static_cast<size_t>(T_) * C, block), block, 0, stream, dwpe,
                dout, B, T_, C);
  if (dwte != nullptr)
    embedding_backward_rows<T>(dwte, shadow, dout, tokens, static_cast<size_t>(B) * T_, C, 0, V,
                               stream);
}

}  // namespace kern
}  // namespace gpt2

#endif  // BACKEND_CUDA_ENCODER_CUH
