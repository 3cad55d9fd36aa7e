// GEMM library and threading comparison at the GPT-2 d12 shapes (N = B*T = 256):
// the backend's GEMM wrapper with each library (oneDNN where built, OpenBLAS)
// single-threaded with the output split across our OpenMP threads
// (kOpenMpSplit), and OpenBLAS on its own pthread pool (kLibrary). Each pass times forward, dinp and dW GEMMs and
// then runs an OpenMP elementwise loop, as a training step interleaves them, so
// the cost of two thread pools spinning against each other is included.
// Usage: bench_gemm [threads]   (prints the OpenBLAS build and core type first)
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"

extern "C" {
char* openblas_get_config(void);
char* openblas_get_corename(void);
int openblas_get_parallel(void);
}

namespace {

using clk = std::chrono::steady_clock;

// The fastest run: on a shared machine a preempted OpenMP thread stalls the
// whole GEMM, so the minimum is the estimate of what the GEMM itself costs.
double best(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

}  // namespace

int main(int argc, char** argv) {
  using namespace gpt2::cpu;
  const int threads = resolve_threads(argc > 1 ? std::atoi(argv[1]) : 0);
  std::printf("OpenBLAS: %s; core %s; parallel=%d (0 serial, 1 pthreads, 2 OpenMP); threads %d\n",
              openblas_get_config(), openblas_get_corename(), openblas_get_parallel(), threads);
  const int N = 256;
  const int shapes[][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}, {768, 50304}};
  std::printf("%-14s %-11s %8s %8s %8s   GFLOP/s (best of 15)\n", "threading", "C->OC", "fwd",
              "dinp", "dW");
  std::vector<Exec> choices;
  for (GemmLibrary lib : {GemmLibrary::kOneDnn, GemmLibrary::kOpenBlas})
    for (GemmThreading mode : {GemmThreading::kOpenMpSplit, GemmThreading::kLibrary})
      if (lib == GemmLibrary::kOpenBlas || (have_onednn() && mode == GemmThreading::kOpenMpSplit))
        choices.push_back(Exec{threads, lib, mode});
  for (const Exec& ex : choices) {
    for (auto& s : shapes) {
      const int C = s[0], OC = s[1];
      std::vector<float> inp(size_t(N) * C, 0.5f), w(size_t(OC) * C, 0.25f),
          out(size_t(N) * OC), dinp(size_t(N) * C), dw(size_t(OC) * C, 0.0f);
      for (size_t i = 0; i < w.size(); i++) w[i] = float(i % 17) * 0.01f - 0.08f;
      std::vector<double> tf, td, tw;
      for (int rep = 0; rep < 17; rep++) {
        const auto t0 = clk::now();
        gemm<float>(ex, false, true, N, OC, C, 1.0f, inp.data(), C, w.data(), C, 0.0f, out.data(), OC);
        const auto t1 = clk::now();
        gemm<float>(ex, false, false, N, C, OC, 1.0f, out.data(), OC, w.data(), C, 0.0f, dinp.data(), C);
        const auto t2 = clk::now();
        gemm<float>(ex, true, false, OC, C, N, 1.0f, out.data(), OC, inp.data(), C, 1.0f, dw.data(), C);
        const auto t3 = clk::now();
        scale<float>(ex, dinp.data(), dinp.size(), 0.5f);  // an OpenMP op between GEMMs
        if (rep < 2) continue;                             // warm-up
        tf.push_back(std::chrono::duration<double>(t1 - t0).count());
        td.push_back(std::chrono::duration<double>(t2 - t1).count());
        tw.push_back(std::chrono::duration<double>(t3 - t2).count());
      }
      const double fl = 2.0 * N * C * OC * 1e-9;
      const std::string name = std::string(gemm_library_name(ex.blas)) +
                               (ex.gemm == GemmThreading::kLibrary ? " own" : " split");
      std::printf("%-14s %5d->%-5d %8.1f %8.1f %8.1f\n", name.c_str(), C, OC, fl / best(tf), fl / best(td),
                  fl / best(tw));
    }
  }
  return 0;
}
