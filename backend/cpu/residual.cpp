// Residual add, out = a + b (out may alias a or b: each element is read before
// it is written, one element at a time). Pure streaming: read 2n, write n.
#include "backend/cpu/ops.h"

namespace gpt2 {
namespace cpu {

template <class S>
void residual_forward(const Exec& ex, S* out, const S* a, const S* b, size_t n) {
#pragma omp parallel for simd num_threads(ex.threads) schedule(static)
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

template void residual_forward<float>(const Exec&, float*, const float*, const float*, size_t);
template void residual_forward<double>(const Exec&, double*, const double*, const double*, size_t);

}  // namespace cpu
}  // namespace gpt2
