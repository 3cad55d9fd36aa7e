// GELU, GPT-2's tanh approximation:
//   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
// evaluated through the identity 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)):
//   gelu(x)  = x * sg,  sg = 1 / (1 + exp(-2u))
//   gelu'(x) = sg + x * sg (1 - sg) * 2 u'(x),  u' = sqrt(2/pi) (1 + 3*0.044715 x^2)
// with sg (1 - sg) = e sg^2, e = exp(-2u), evaluated as (e sg) sg: no 1 - sg
// cancellation for large x, no sg^2 underflow for very negative x.
// Same function, fewer roundings: 1 + tanh(u) cancels catastrophically for
// negative x (x = -3 loses ~9 bits in fp32), the sigmoid form does not. exp is
// vexp (vmath.h), so both loops vectorise; no libm call per element.
// Traffic: forward read n + write n; backward read 2n + write n (dinp may alias
// dout, which the model uses to reuse the buffer).
#include <algorithm>

#include "backend/cpu/ops.h"
#include "backend/cpu/vmath.h"

namespace gpt2 {
namespace cpu {

namespace {
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluCubic = 0.044715;

// The elementwise loops over one block, compiled for AVX-512 too (vmath.h).
template <class S>
inline __attribute__((always_inline)) void gelu_forward_block(S* out, const S* inp, size_t n) {
  const S k0 = static_cast<S>(kSqrt2OverPi);
  const S k1 = static_cast<S>(kSqrt2OverPi * kGeluCubic);
#pragma omp simd
  for (size_t i = 0; i < n; i++) {
    const S x = inp[i];
    const S u = x * (k0 + k1 * x * x);
    const S sg = static_cast<S>(1) / (static_cast<S>(1) + vexp(static_cast<S>(-2) * u));
    out[i] = x * sg;
  }
}

template <class S>
inline __attribute__((always_inline)) void gelu_backward_block(S* dinp, const S* inp,
                                                               const S* dout, size_t n) {
  const S k0 = static_cast<S>(kSqrt2OverPi);
  const S k1 = static_cast<S>(kSqrt2OverPi * kGeluCubic);
  const S k3 = static_cast<S>(3 * kSqrt2OverPi * kGeluCubic);
#pragma omp simd
  for (size_t i = 0; i < n; i++) {
    const S x = inp[i];
    const S x2 = x * x;
    const S u = x * (k0 + k1 * x2);
    const S du = k0 + k3 * x2;
    const S e = vexp(static_cast<S>(-2) * u);
    const S sg = static_cast<S>(1) / (static_cast<S>(1) + e);
    // sg (1 - sg) as (e sg) sg: 1 - sg would cancel for large x.
    const S grad = sg + static_cast<S>(2) * x * du * (e * sg) * sg;
    dinp[i] = grad * dout[i];
  }
}

VMATH_CLONES void forward_block(float* out, const float* inp, size_t n) {
  gelu_forward_block(out, inp, n);
}
void forward_block(double* out, const double* inp, size_t n) { gelu_forward_block(out, inp, n); }
VMATH_CLONES void backward_block(float* dinp, const float* inp, const float* dout, size_t n) {
  gelu_backward_block(dinp, inp, dout, n);
}
void backward_block(double* dinp, const double* inp, const double* dout, size_t n) {
  gelu_backward_block(dinp, inp, dout, n);
}

// Threads take whole blocks; every element's arithmetic is the same in any block.
constexpr size_t kBlock = size_t{1} << 14;

}  // namespace

template <class S>
void gelu_forward(const Exec& ex, S* out, const S* inp, size_t n) {
  const size_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for num_threads(ex.threads) schedule(static)
  for (size_t b = 0; b < blocks; b++) {
    const size_t i0 = b * kBlock;
    forward_block(out + i0, inp + i0, std::min(kBlock, n - i0));
  }
}

template <class S>
void gelu_backward(const Exec& ex, S* dinp, const S* inp, const S* dout, size_t n) {
  const size_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for num_threads(ex.threads) schedule(static)
  for (size_t b = 0; b < blocks; b++) {
    const size_t i0 = b * kBlock;
    backward_block(dinp + i0, inp + i0, dout + i0, std::min(kBlock, n - i0));
  }
}

template void gelu_forward<float>(const Exec&, float*, const float*, size_t);
template void gelu_forward<double>(const Exec&, double*, const double*, size_t);
template void gelu_backward<float>(const Exec&, float*, const float*, const float*, size_t);
template void gelu_backward<double>(const Exec&, double*, const double*, const double*, size_t);

}  // namespace cpu
}  // namespace gpt2
