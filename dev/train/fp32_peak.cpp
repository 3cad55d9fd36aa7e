// Measures this machine's fp32 FMA peak (GFLOP/s) with independent AVX-512
// (or AVX2) FMA chains on every OpenMP thread: the denominator of the MFU
// that `make bench` prints (the trainer measures the same on the CPU backend).
#include <omp.h>

#include <cstdio>
#include <cstdlib>

#include "metrics/mfu.h"

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : omp_get_max_threads();
  const double best = gpt2::measure_cpu_fma_gflops(threads, 20000000, 3);
  std::printf("RESULT fp32_peak_gflops=%.1f threads=%d\n", best, threads);
  return 0;
}
