// The BLAS libraries Debian ships, side by side on the training step's GEMMs:
// the backend's wrapper on OpenBLAS and, where built with it, on oneDNN (what
// a step runs then), one thread per OpenMP slab,
// OpenBLAS with its own thread pool, BLIS (libblis4-openmp) and oneDNN
// (libdnnl2's dnnl_sgemm) loaded directly, each on the same threads. Shapes: every linear
// layer of GPT-2 d12 at B=4, T=64 and of the quick start's model (4 layers,
// C=256, B=8, T=128), classifier included, in the three forms a layer runs
//   forward  out  = inp · Wᵀ          (N×C)·(OC×C)ᵀ
//   dinp     dinp = dout · W          (N×OC)·(OC×C)
//   dW       dW  += doutᵀ · inp       (N×OC)ᵀ·(N×C), beta = 1
// and the step's GEMM time for each library: the sum over its GEMMs of FLOPs
// / rate, each weighted by how often the step runs it.
// The other libraries are loaded with dlopen (RTLD_DEEPBIND: each keeps its own
// cblas symbols beside the OpenBLAS the backend links); one not installed is
// reported and left out (apt-get install libblis4-openmp libdnnl2).
// Usage: bench_blas_libs [threads]   (default: OpenMP's count)
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"

namespace {

using Cblas = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                       int);
using Dnnl = int (*)(char, char, long, long, long, float, const float*, long, const float*, long, float, float*,
                     long);
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

struct Gemm {
  int M, N, K;
  bool ta, tb;
  float beta;
  int per_step;  // how many times a step runs this GEMM
};

// The three GEMMs of a C -> OC linear layer over N rows, run `times` per step.
void add_layer(std::vector<Gemm>* g, int N, int C, int OC, int times) {
  g->push_back({N, OC, C, false, true, 0.0f, times});
  g->push_back({N, C, OC, false, false, 0.0f, times});
  g->push_back({OC, C, N, true, false, 1.0f, times});
}

struct Library {
  std::string name;
  Cblas cblas = nullptr;
  Dnnl dnnl = nullptr;
  bool ours = false;
  gpt2::cpu::Exec ex;  // ours: the backend's library and threading
};

// dlopen's handle of `path`'s symbol `name`, or null (reported).
void* load(const char* path, const char* name, int threads) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (h == nullptr) {
    std::printf("  %s: not installed (%s)\n", path, dlerror());
    return nullptr;
  }
  if (auto set = reinterpret_cast<void (*)(int)>(dlsym(h, "openblas_set_num_threads"))) set(threads);
  if (auto set = reinterpret_cast<void (*)(long)>(dlsym(h, "bli_thread_set_num_threads"))) set(threads);
  return dlsym(h, name);
}

void run(const Library& lib, const Gemm& g, const float* A, const float* B, float* C) {
  const int lda = g.ta ? g.M : g.K, ldb = g.tb ? g.K : g.N;
  if (lib.ours) {
    gpt2::cpu::gemm<float>(lib.ex, g.ta, g.tb, g.M, g.N, g.K, 1.0f, A, lda, B, ldb, g.beta, C, g.N);
  } else if (lib.cblas) {
    lib.cblas(kRowMajor, g.ta ? kTrans : kNoTrans, g.tb ? kTrans : kNoTrans, g.M, g.N, g.K, 1.0f, A, lda, B, ldb,
              g.beta, C, g.N);
  } else {
    lib.dnnl(g.ta ? 'T' : 'N', g.tb ? 'T' : 'N', g.M, g.N, g.K, 1.0f, A, lda, B, ldb, g.beta, C, g.N);
  }
}

// GFLOP/s of the fastest of `reps` runs after two warm-ups: on a shared
// machine the minimum is the estimate of what the GEMM itself costs.
double rate(const Library& lib, const Gemm& g, int reps) {
  std::vector<float> A(size_t(g.M) * g.K), B(size_t(g.K) * g.N), C(size_t(g.M) * g.N, 0.0f);
  for (size_t i = 0; i < A.size(); i++) A[i] = float(i % 13) * 0.01f - 0.06f;
  for (size_t i = 0; i < B.size(); i++) B[i] = float(i % 17) * 0.01f - 0.08f;
  double best = 1e30;
  for (int r = 0; r < reps + 2; r++) {
    const auto t0 = std::chrono::steady_clock::now();
    run(lib, g, A.data(), B.data(), C.data());
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r >= 2) best = std::min(best, t);
  }
  return 2.0 * g.M * g.N * g.K / best * 1e-9;
}

void bench(const char* title, const std::vector<Gemm>& gemms, const std::vector<Library>& libs) {
  for (const Gemm& g : gemms)  // every library's first calls (JIT, buffers, threads) before any timing
    for (const Library& l : libs) rate(l, g, 1);
  std::printf("\n%s\n\n| M x N x K | form |", title);
  for (const Library& l : libs) std::printf(" %s |", l.name.c_str());
  std::printf("\n|---|---|");
  for (size_t i = 0; i < libs.size(); i++) std::printf("---:|");
  std::printf("\n");
  std::vector<double> seconds(libs.size(), 0.0);
  for (const Gemm& g : gemms) {
    std::printf("| %d x %d x %d | %s |", g.M, g.N, g.K, g.ta ? "dW (TN)" : g.tb ? "forward (NT)" : "dinp (NN)");
    for (size_t i = 0; i < libs.size(); i++) {
      const double r = rate(libs[i], g, 7);
      seconds[i] += g.per_step * 2.0 * g.M * g.N * g.K * 1e-9 / r;
      std::printf(" %.1f |", r);
    }
    std::printf("\n");
  }
  std::printf("| **step's GEMMs, ms** | |");
  for (double s : seconds) std::printf(" **%.1f** |", s * 1e3);
  std::printf("\n| time / ours | |");
  for (double s : seconds) std::printf(" %.2f |", s / seconds[0]);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = gpt2::cpu::resolve_threads(argc > 1 ? std::atoi(argv[1]) : 0);
  omp_set_num_threads(threads);
  using gpt2::cpu::Exec, gpt2::cpu::GemmLibrary, gpt2::cpu::GemmThreading;
  std::printf("BLAS libraries on the training step's GEMMs, %d threads, GFLOP/s (fastest of 7):\n", threads);
  std::vector<Library> libs{
      {"ours (OpenBLAS, OpenMP slabs)", nullptr, nullptr, true, Exec{threads, GemmLibrary::kOpenBlas,
                                                                     GemmThreading::kOpenMpSplit}}};
  if (gpt2::cpu::have_onednn())
    libs.push_back({"ours (oneDNN, OpenMP slabs)", nullptr, nullptr, true,
                    Exec{threads, GemmLibrary::kOneDnn, GemmThreading::kOpenMpSplit}});
  if (auto f = load("libopenblas.so.0", "cblas_sgemm", threads)) libs.push_back({"OpenBLAS pool", Cblas(f)});
  if (auto f = load("/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4", "cblas_sgemm", threads))
    libs.push_back({"BLIS (OpenMP)", Cblas(f)});
  if (auto f = load("libdnnl.so.2", "dnnl_sgemm", threads)) libs.push_back({"oneDNN", nullptr, Dnnl(f)});

  std::vector<Gemm> d12;  // per layer: qkv, attention projection, fc, fc projection; then the classifier
  for (auto [C, OC] : {std::pair{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}}) add_layer(&d12, 256, C, OC, 12);
  add_layer(&d12, 256, 768, 50304, 1);
  bench("GPT-2 d12, B=4, T=64 (N = 256 rows)", d12, libs);
  std::vector<Gemm> quick;
  for (auto [C, OC] : {std::pair{256, 768}, {256, 256}, {256, 1024}, {1024, 256}}) add_layer(&quick, 1024, C, OC, 4);
  add_layer(&quick, 1024, 256, 50304, 1);
  bench("The quick start's model: 4 layers, C=256, B=8, T=128 (N = 1024 rows)", quick, libs);
  return 0;
}
