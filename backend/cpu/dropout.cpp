// Inverted dropout, out = inp * (keep ? 1 / (1 - p) : 0), the mask drawn from
// util/philox.h (one Philox4x32-10 call per row and group of 4 columns: the
// four words are the four columns' draws). The forward and the backward are
// the same call. Streaming: read n, write n, ~10 rounds of 32x32 -> 64-bit
// multiplies per 4 elements (compute-bound on one core, cheap beside a GEMM).
// out may alias inp: each element is read before it is written.
#include "backend/cpu/ops.h"

namespace gpt2 {
namespace cpu {

template <class S>
void dropout(const Exec& ex, S* out, const S* inp, const DropoutMask& m, int N, int C) {
  const S scale = static_cast<S>(m.keep_scale());  // the fp32 scale, also in the double instantiation
  const uint32_t threshold = m.threshold();
  const long groups = (C + 3) / 4, total = static_cast<long>(N) * groups;
#pragma omp parallel for num_threads(ex.threads) schedule(static)
  for (long i = 0; i < total; i++) {
    const long r = i / groups;
    const uint32_t q = static_cast<uint32_t>(i % groups);
    const Philox4 draw = m.draws(m.token0 + static_cast<uint64_t>(r), q);
    for (int k = 0; k < 4; k++) {
      const long c = 4L * q + k;
      if (c >= C) break;
      const size_t at = static_cast<size_t>(r) * C + c;
      out[at] = inp[at] * (draw.v[k] >= threshold ? scale : S(0));
    }
  }
}

template void dropout<float>(const Exec&, float*, const float*, const DropoutMask&, int, int);
template void dropout<double>(const Exec&, double*, const double*, const DropoutMask&, int, int);

}  // namespace cpu
}  // namespace gpt2
