// Optimizer-side ops: global-norm reduction, AdamW, scaling.
//
// sum_squares: accumulated in fp64. The vector is cut into fixed 64 Ki-element
// blocks (independent of the thread count), each block is a vectorised fp64
// reduction, and the block sums are added in block order: the result is the
// same bits for any thread count, which keeps clipping (and so a resumed run)
// reproducible. Traffic: read n.
//
// adamw_update: one fused pass per element, read p, g, m, v and write p, m, v
// (28 bytes/element in fp32). The bias corrections 1 - beta^t are computed once
// in fp64. Weight decay is decoupled (AdamW): lr * wd * p is subtracted next to
// the Adam step, both using the pre-update parameter, as in PyTorch's AdamW
// (whose p *= 1 - lr*wd first is the same expression up to rounding). Compiled
// without fma contraction (backend/module.mk): the CUDA kernel's roundings.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/ops.h"

namespace gpt2 {
namespace cpu {

namespace {
constexpr size_t kSumBlock = size_t{1} << 16;
}

template <class S>
double sum_squares(const Exec& ex, const S* g, size_t n) {
  const size_t blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<double> partial(blocks);
#pragma omp parallel for num_threads(ex.threads) schedule(static)
  for (size_t blk = 0; blk < blocks; blk++) {
    const size_t i1 = std::min(n, (blk + 1) * kSumBlock);
    double acc = 0;
#pragma omp simd reduction(+ : acc)
    for (size_t i = blk * kSumBlock; i < i1; i++) {
      const double x = static_cast<double>(g[i]);
      acc += x * x;
    }
    partial[blk] = acc;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

template <class S>
void adamw_update(const Exec& ex, S* params, const S* grads, S* m, S* v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                  int t) {
  const S b1 = beta1, b2 = beta2;
  const S one_minus_b1 = static_cast<S>(1.0 - static_cast<double>(beta1));
  const S one_minus_b2 = static_cast<S>(1.0 - static_cast<double>(beta2));
  const S inv_bc1 = static_cast<S>(1.0 / (1.0 - std::pow(static_cast<double>(beta1), t)));
  const S inv_bc2 = static_cast<S>(1.0 / (1.0 - std::pow(static_cast<double>(beta2), t)));
  const S lr_s = lr, eps_s = eps, wd = weight_decay, gs = grad_scale;
#pragma omp parallel for simd num_threads(ex.threads) schedule(static)
  for (size_t i = 0; i < n; i++) {
    const S g = grads[i] * gs;
    const S mi = b1 * m[i] + one_minus_b1 * g;
    const S vi = b2 * v[i] + one_minus_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const S mhat = mi * inv_bc1;
    const S vhat = vi * inv_bc2;
    params[i] -= lr_s * (mhat / (std::sqrt(vhat) + eps_s) + wd * params[i]);
  }
}

template <class S>
void scale(const Exec& ex, S* x, size_t n, S s) {
#pragma omp parallel for simd num_threads(ex.threads) schedule(static)
  for (size_t i = 0; i < n; i++) x[i] *= s;
}

template double sum_squares<float>(const Exec&, const float*, size_t);
template double sum_squares<double>(const Exec&, const double*, size_t);
template void adamw_update<float>(const Exec&, float*, const float*, float*, float*, size_t,
                                  float, float, float, float, float, float, int);
template void adamw_update<double>(const Exec&, double*, const double*, double*, double*, size_t,
                                   float, float, float, float, float, float, int);
template void scale<float>(const Exec&, float*, size_t, float);
template void scale<double>(const Exec&, double*, size_t, double);

}  // namespace cpu
}  // namespace gpt2
