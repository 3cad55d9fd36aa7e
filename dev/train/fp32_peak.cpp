// Measures this machine's fp32 FMA peak (GFLOP/s) with independent AVX-512
// (or AVX2) FMA chains on every OpenMP thread: the denominator of the MFU
// that `make bench` prints.
#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : omp_get_max_threads();
  const long iters = 20000000;
  double best = 0;
  for (int rep = 0; rep < 3; rep++) {
    float sink = 0;
    auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
#if defined(__AVX512F__)
      // 12 independent chains hide the 4-cycle FMA latency on 2 ports.
      __m512 acc[12];
      const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
      for (auto& r : acc) r = _mm512_set1_ps(1.0f);
      for (long i = 0; i < iters; i++)
        for (auto& r : acc) r = _mm512_fmadd_ps(r, a, b);
      for (auto& r : acc) sink += _mm512_reduce_add_ps(r);
#else
      __m256 acc[12];
      const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
      for (auto& r : acc) r = _mm256_set1_ps(1.0f);
      for (long i = 0; i < iters; i++)
        for (auto& r : acc) r = _mm256_fmadd_ps(r, a, b);
      for (auto& r : acc) {
        float t[8];
        _mm256_storeu_ps(t, r);
        for (float x : t) sink += x;
      }
#endif
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
#if defined(__AVX512F__)
    const double lanes = 16;
#else
    const double lanes = 8;
#endif
    double gflops = threads * iters * 12.0 * lanes * 2.0 / s / 1e9;
    if (gflops > best) best = gflops;
    if (sink == 12345.0f) std::printf("#");  // keep the work alive
  }
  std::printf("RESULT fp32_peak_gflops=%.1f threads=%d\n", best, threads);
  return 0;
}
