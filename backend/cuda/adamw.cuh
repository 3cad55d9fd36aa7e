// AdamW (decoupled weight decay), P parameters per thread (P = kPack<T> with
// 128-bit accesses when n % P == 0 and every array is 16-byte aligned, else 1),
// one fused pass:
// read p (or its fp32 master copy), g, m, v; write p, m, v (and the master).
// The bias corrections 1 / (1 - beta^t) are computed once on the host in fp64
// and passed as floats, the same expressions as the CPU backend:
//   g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2
//   p -= lr * (m / (1-b1^t) / (sqrt(v / (1-b2^t)) + eps) + wd * p)
// With a master copy the update runs on the fp32 master and params receive
// its value rounded to their type T (float or __nv_bfloat16): bf16 params never
// accumulate their own rounding errors. Moments are always fp32.
#ifndef BACKEND_CUDA_ADAMW_CUH
#define BACKEND_CUDA_ADAMW_CUH

#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/pack128.cuh"

namespace gpt2 {
namespace kern {

struct AdamWScalars {
  float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, inv_bias1, inv_bias2, eps,
      weight_decay, grad_scale;
};

inline AdamWScalars adamw_scalars(float lr, float beta1, float beta2, float eps,
                                  float weight_decay, float grad_scale, int t) {
  AdamWScalars s;
  s.lr = lr;
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.one_minus_beta1 = static_cast<float>(1.0 - static_cast<double>(beta1));
  s.one_minus_beta2 = static_cast<float>(1.0 - static_cast<double>(beta2));
  s.inv_bias1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta1), t)));
  s.inv_bias2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta2), t)));
  s.eps = eps;
  s.weight_decay = weight_decay;
  s.grad_scale = grad_scale;
  return s;
}

// One element's update; p is the master value (or the param) in fp32. Every
// product and sum is rounded on its own (no FMA contraction, which nvcc does
// by default), and sqrtf and the division are IEEE (no fast math): the CPU
// backend's arithmetic bit for bit, so --offload-optimizer cpu updates the
// same weights as this kernel.
__device__ inline float adamw_step(float p, float g, float& m, float& v, const AdamWScalars& s) {
  g = __fmul_rn(g, s.grad_scale);
  m = __fadd_rn(__fmul_rn(s.beta1, m), __fmul_rn(s.one_minus_beta1, g));
  v = __fadd_rn(__fmul_rn(s.beta2, v), __fmul_rn(__fmul_rn(s.one_minus_beta2, g), g));
  const float mhat = __fmul_rn(m, s.inv_bias1);
  const float vhat = __fmul_rn(v, s.inv_bias2);
  const float step = __fadd_rn(mhat / __fadd_rn(sqrtf(vhat), s.eps), __fmul_rn(s.weight_decay, p));
  return __fsub_rn(p, __fmul_rn(s.lr, step));
}

// Thread i updates [i*P, i*P + P) (n % P == 0). Every array is read once and
// written once: streaming loads and stores (the step touches 12-18 B/param,
// far more than L2 holds, and nothing reads them until the next step).
// clip (optional): clip[1] replaces s.grad_scale, and NaN there (a non-finite
// gradient norm, global_norm.cuh) leaves every array untouched.
template <class T, int P>
__global__ void adamw_kernel(T* params, float* master, const T* grads, float* m, float* v,
                             size_t n, AdamWScalars s, const double* clip) {
  const size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * P;
  if (i >= n) return;
  if (clip != nullptr) {
    const double scale = clip[1];
    if (isnan(scale)) return;
    s.grad_scale = static_cast<float>(scale);
  }
  float g[P], mi[P], vi[P], p[P];
  load_floats<P, true>(g, grads + i);
  load_floats<P, true>(mi, m + i);
  load_floats<P, true>(vi, v + i);
  if (master != nullptr)
    load_floats<P, true>(p, master + i);
  else
    load_floats<P, true>(p, params + i);
  for (int k = 0; k < P; k++) p[k] = adamw_step(p[k], g[k], mi[k], vi[k], s);
  store_floats<P, true>(m + i, mi);
  store_floats<P, true>(v + i, vi);
  if (master != nullptr) store_floats<P, true>(master + i, p);
  store_floats<P, true>(params + i, p);
}

template <class T>
void adamw_update(T* params, float* master, const T* grads, float* m, float* v, size_t n,
                  const AdamWScalars& s, const double* clip, cudaStream_t stream) {
  const int block = 256;
  constexpr int P = kPack<T>;  // 8 for bf16: the fp32 arrays take two 128-bit accesses
  if (can_pack(n, P, params, grads) && can_pack(n, P, master, m, v)) {
    auto kernel = adamw_kernel<T, P>;
    LAUNCH_KERNEL(kernel, ceil_div(n / P, block), block, 0, stream, params, master, grads, m, v,
                  n, s, clip);
  } else {
    auto kernel = adamw_kernel<T, 1>;
    LAUNCH_KERNEL(kernel, ceil_div(n, block), block, 0, stream, params, master, grads, m, v, n,
                  s, clip);
  }
}

}  // namespace kern
}  // namespace gpt2

#endif  // BACKEND_CUDA_ADAMW_CUH
