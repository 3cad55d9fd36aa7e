#include "dev/cpu/memory_bandwidth.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace gpt2 {
namespace cpuprof {

Bandwidth measure_triad_bandwidth(int threads, size_t mib, int reps) {
  const int n_threads = threads > 0 ? threads : omp_get_max_threads();
  const long n = static_cast<long>(mib * (size_t{1} << 20) / sizeof(float));
  std::vector<float> a(static_cast<size_t>(n)), b(a.size()), c(a.size());
  // First touch on the threads that stream the arrays later (static schedule both times).
#pragma omp parallel for num_threads(n_threads) schedule(static)
  for (long i = 0; i < n; i++) {
    a[i] = 0.0f;
    b[i] = 1.0f;
    c[i] = 2.0f;
  }
  double best = 0;
  const float s = 0.5f;
  for (int r = 0; r < reps; r++) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for num_threads(n_threads) schedule(static)
    for (long i = 0; i < n; i++) a[i] = b[i] + s * c[i];
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 3.0 * sizeof(float) * static_cast<double>(n) / dt / 1e9);
  }
  if (a[static_cast<size_t>(n) / 2] != 2.0f) std::fprintf(stderr, "warning: triad result is wrong\n");
  char source[160];
  std::snprintf(source, sizeof source, "triad a = b + s*c, 3 x %zu MiB, %d thread%s, best of %d", mib, n_threads,
                n_threads == 1 ? "" : "s", reps);
  return {best, source};
}

}  // namespace cpuprof
}  // namespace gpt2
