#include "metrics/mfu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <omp.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <iomanip>
#include <sstream>
#include <vector>

#include "backend/cpu/ops.h"

namespace gpt2 {

double flops_per_token(const GPT2Config& cfg, int T, size_t num_params) {
  return 6.0 * static_cast<double>(num_params) +
         6.0 * cfg.num_layers * static_cast<double>(cfg.channels) * static_cast<double>(T);
}

namespace {

// Dense (no 2:4 sparsity) peaks in TFLOP/s from NVIDIA's datasheets and
// architecture whitepapers; where a sheet quotes the sparse number only, half
// of it. bf16 is with fp32 accumulation (the GeForce cards' slower rate).
struct GpuPeaks {
  const char* model;    // the name's model, after "NVIDIA " (a prefix of the rest)
  const char* variant;  // a word the name must also hold ("" = any)
  const char* sheet;    // what the numbers come from
  double bf16, tf32, fp32;
};

constexpr GpuPeaks kGpuTable[] = {
    {"H100", "PCIe", "NVIDIA H100 PCIe datasheet", 756.5, 378.0, 51.2},
    {"H100", "NVL", "NVIDIA H100 NVL datasheet", 835.5, 417.5, 60.0},
    {"H100", "", "NVIDIA H100 SXM datasheet", 989.4, 494.7, 66.9},
    {"H200", "NVL", "NVIDIA H200 NVL datasheet", 835.5, 417.5, 60.0},
    {"H200", "", "NVIDIA H200 SXM datasheet", 989.4, 494.7, 66.9},
    {"GH200", "", "NVIDIA GH200 datasheet (the H100 SXM rates)", 989.4, 494.7, 66.9},
    {"A100", "", "NVIDIA A100 datasheet (SXM and PCIe)", 312.0, 156.0, 19.5},
    {"A10", "", "NVIDIA A10 datasheet", 125.0, 62.5, 31.2},
    {"A40", "", "NVIDIA A40 datasheet", 149.7, 74.8, 37.4},
    {"L40S", "", "NVIDIA L40S datasheet", 362.05, 183.0, 91.6},
    {"L40", "", "NVIDIA L40 datasheet", 181.05, 90.5, 90.5},
    {"L4", "", "NVIDIA L4 datasheet", 121.0, 60.0, 30.3},
    {"GeForce RTX 4090", "", "NVIDIA Ada GPU architecture whitepaper", 165.2, 82.6, 82.6},
    {"GeForce RTX 3090", "", "NVIDIA Ampere GA102 GPU architecture whitepaper", 71.0, 35.6, 35.6},
};

std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  std::string w;
  for (char c : s + " ") {
    if (c == ' ' || c == '-' || c == '_') {
      if (!w.empty()) out.push_back(w);
      w.clear();
    } else {
      w += c;
    }
  }
  return out;
}

// `name` without "NVIDIA " begins with the model's words, whole ("A10" is
// not "A100" nor "A10G"), and holds the variant's word when one is named.
bool matches(const std::string& name, const GpuPeaks& g) {
  std::vector<std::string> have = words(name), want = words(g.model);
  if (!have.empty() && have[0] == "NVIDIA") have.erase(have.begin());
  if (have.size() < want.size()) return false;
  for (size_t i = 0; i < want.size(); i++)
    if (have[i] != want[i]) return false;
  if (!*g.variant) return true;
  for (const std::string& w : have)
    if (w == g.variant) return true;
  return false;
}

}  // namespace

std::string format_tflops(double tflops) {
  std::ostringstream s;
  s << (tflops >= 10 ? std::fixed : std::defaultfloat) << std::setprecision(tflops >= 10 ? 1 : 3) << tflops
    << " TFLOP/s";
  return s.str();
}

PeakFlops gpu_peak(const std::string& device_name, PeakKind kind) {
  for (const GpuPeaks& g : kGpuTable) {
    if (!matches(device_name, g)) continue;
    const double t = kind == PeakKind::kBf16 ? g.bf16 : kind == PeakKind::kTf32 ? g.tf32 : g.fp32;
    std::ostringstream s;
    s << format_tflops(t) << " (" << (kind == PeakKind::kBf16 ? "bf16" : kind == PeakKind::kTf32 ? "tf32" : "fp32")
      << " dense, " << g.sheet << ")";
    return {t, s.str()};
  }
  return {};
}

const char* fma_isa_name(FmaIsa isa) {
  return isa == FmaIsa::kAvx512 ? "AVX-512" : isa == FmaIsa::kAvx2 ? "AVX2" : "generic";
}

namespace {

// OpenBLAS 0.3.21's x86-64 core types without AVX-512 kernels (its dynamic.c;
// SkylakeX, Cooperlake and SapphireRapids have them), matched as OpenBLAS
// matches them: whole name, any case.
constexpr const char* kNarrowerCores[] = {
    "Haswell", "Zen", "Excavator", "Steamroller", "Piledriver", "Bulldozer", "Sandybridge", "Nehalem",
    "Dunnington", "Penryn", "Core2", "Atom", "Nano", "Barcelona", "Opteron_SSE3", "Opteron",
    "Athlon", "Banias", "Prescott", "Northwood", "Coppermine", "Katmai"};

bool same_name(const char* a, const char* b) {
  for (; *a && *b; a++, b++)
    if (std::tolower(static_cast<unsigned char>(*a)) != std::tolower(static_cast<unsigned char>(*b))) return false;
  return *a == *b;
}

}  // namespace

// oneDNN's ISAs below AVX-512 (its dnnl_cpu_isa_t names), matched as oneDNN
// matches them: whole name, any case.
constexpr const char* kNarrowerOneDnnIsas[] = {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2"};

FmaIsa choose_fma_isa(bool cpu_has_avx512f, const char* openblas_coretype, const char* onednn_max_isa) {
  if (!cpu_has_avx512f) return FmaIsa::kAvx2;
  // A pre-AVX2 core (Sandybridge, Nehalem, ...) has no FMA kernels at all; its
  // peak would be lower still, but AVX2 is the narrowest this build measures,
  // so the MFU of such a run reads low rather than above 100%.
  if (openblas_coretype)
    for (const char* c : kNarrowerCores)
      if (same_name(openblas_coretype, c)) return FmaIsa::kAvx2;
  if (onednn_max_isa)
    for (const char* c : kNarrowerOneDnnIsas)
      if (same_name(onednn_max_isa, c)) return FmaIsa::kAvx2;
  return FmaIsa::kAvx512;
}

namespace {

// The variable that limits the ISA of the library running the fp32 GEMMs.
struct IsaVariable {
  const char* name;
  const char* value;  // null when unset
};
IsaVariable gemm_isa_variable() {
  if (cpu::gemm_library_from_env() == cpu::GemmLibrary::kOpenBlas)
    return {"OPENBLAS_CORETYPE", std::getenv("OPENBLAS_CORETYPE")};
  if (const char* v = std::getenv("ONEDNN_MAX_CPU_ISA")) return {"ONEDNN_MAX_CPU_ISA", v};
  return {"DNNL_MAX_CPU_ISA", std::getenv("DNNL_MAX_CPU_ISA")};
}

}  // namespace

namespace {

#if defined(__x86_64__) || defined(__i386__)

// Each kernel runs `iters` rounds of 12 independent FMA chains: a zmm FMA has
// 4 cycles of latency on 2 pipes, so 8 chains in flight keep both busy and 12
// leave slack. r = r * a + b converges to 1e-7 / (1 - a) = 0.1: no denormals,
// no infinities. The returned sum keeps the compiler from dropping the work.
__attribute__((target("avx512f"))) float fma_chains_avx512(long iters) {
  __m512 acc[12];
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (auto& r : acc) r = _mm512_set1_ps(1.0f);
  for (long i = 0; i < iters; i++)
    for (auto& r : acc) r = _mm512_fmadd_ps(r, a, b);
  float lanes[16], sum = 0;
  for (auto& r : acc) {
    std::memcpy(lanes, &r, sizeof(lanes));
    for (float x : lanes) sum += x;
  }
  return sum;
}

float fma_chains_avx2(long iters) {
  __m256 acc[12];
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (auto& r : acc) r = _mm256_set1_ps(1.0f);
  for (long i = 0; i < iters; i++)
    for (auto& r : acc) r = _mm256_fmadd_ps(r, a, b);
  float lanes[8], sum = 0;
  for (auto& r : acc) {
    std::memcpy(lanes, &r, sizeof(lanes));
    for (float x : lanes) sum += x;
  }
  return sum;
}

bool cpu_has_avx512f() { return __builtin_cpu_supports("avx512f"); }

#else

// Off x86 the compiler's generic vectors stand in; with contraction on (GCC's
// default) r * a + b becomes the target's FMA.
using Vec4 = float __attribute__((vector_size(16)));

float fma_chains_generic(long iters) {
  Vec4 acc[12];
  const Vec4 a = {0.999999f, 0.999999f, 0.999999f, 0.999999f}, b = {1e-7f, 1e-7f, 1e-7f, 1e-7f};
  for (auto& r : acc) r = Vec4{1.0f, 1.0f, 1.0f, 1.0f};
  for (long i = 0; i < iters; i++)
    for (auto& r : acc) r = r * a + b;
  float sum = 0;
  for (auto& r : acc) sum += r[0] + r[1] + r[2] + r[3];
  return sum;
}

bool cpu_has_avx512f() { return false; }

#endif

int lanes(FmaIsa isa) { return isa == FmaIsa::kAvx512 ? 16 : isa == FmaIsa::kAvx2 ? 8 : 4; }

float fma_chains(FmaIsa isa, long iters) {
#if defined(__x86_64__) || defined(__i386__)
  return isa == FmaIsa::kAvx512 ? fma_chains_avx512(iters) : fma_chains_avx2(iters);
#else
  (void)isa;
  return fma_chains_generic(iters);
#endif
}


double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The time the calling thread has spent on a core.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

FmaIsa cpu_fma_isa() {
#if defined(__x86_64__) || defined(__i386__)
  const IsaVariable v = gemm_isa_variable();
  const bool openblas = std::string(v.name) == "OPENBLAS_CORETYPE";
  return choose_fma_isa(cpu_has_avx512f(), openblas ? v.value : nullptr, openblas ? nullptr : v.value);
#else
  return FmaIsa::kGeneric;
#endif
}

std::string fma_isa_limit() {
#if defined(__x86_64__) || defined(__i386__)
  if (cpu_fma_isa() == FmaIsa::kAvx2 && cpu_has_avx512f()) {
    const IsaVariable v = gemm_isa_variable();
    return std::string(v.name) + "=" + v.value;
  }
#endif
  return "";
}

double measure_cpu_fma_gflops(FmaIsa isa, int threads, long iters, int reps) {
  const int n = threads > 0 ? threads : omp_get_max_threads();
  const double gflop_per_thread = static_cast<double>(iters) * 12.0 * lanes(isa) * 2.0 / 1e9;
  std::vector<double> cpu(static_cast<size_t>(n), 0.0), best_on_core(static_cast<size_t>(n), 0.0);
  const double start = seconds_now();
  double t0 = 0, best_clean = 0;
  int team = n, clean = 0;
  bool done = false;
  float sink = 0;
  // One team for every round, so thread start-up is not timed; the barriers
  // start the threads together and time the round to its slowest thread.
#pragma omp parallel num_threads(n) reduction(+ : sink)
  for (;;) {
#pragma omp master
    {
      team = omp_get_num_threads();
      t0 = seconds_now();
    }
#pragma omp barrier
    const double c0 = thread_cpu_seconds();
    sink += fma_chains(isa, iters);
    cpu[static_cast<size_t>(omp_get_thread_num())] = thread_cpu_seconds() - c0;
#pragma omp barrier
#pragma omp master
    {
      // A round is clean when every thread ran on a core for all of it: its
      // wall-clock rate is the team's. On a shared machine a thread that waits
      // for another process's time slice slows its round, so only clean rounds
      // count; short rounds make them likely even there.
      const double now = seconds_now(), wall = now - t0, elapsed = now - start;
      bool all_ran = true;
      for (int t = 0; t < team; t++) {
        const double c = cpu[static_cast<size_t>(t)];
        double& own = best_on_core[static_cast<size_t>(t)];
        all_ran = all_ran && c >= 0.95 * wall;
        if (c > 0) own = std::max(own, gflop_per_thread / c);
      }
      if (all_ran) best_clean = std::max(best_clean, team * gflop_per_thread / wall);
      clean += all_ran;
      // 20 ms at least, for a core that clocks up under load; on a busy
      // machine, where clean rounds are rare, what there is after 100 ms.
      done = (clean >= reps && elapsed >= 0.02) || elapsed >= 0.1;
    }
#pragma omp barrier
    if (done) break;
  }
  // the chains' sums leave through a volatile store, so the compiler keeps the work
  volatile float kept = sink;
  (void)kept;
  if (best_clean > 0) return best_clean;
  // No clean round: each thread's rate over its own time on a core, summed
  // over no more threads than there are processors to run them. (Threads on
  // the two halves of an SMT core share its FMA pipes; one that ran while its
  // sibling waited counts the core twice, so this is the last resort.)
  std::sort(best_on_core.begin(), best_on_core.begin() + team, std::greater<double>());
  double sum = 0;
  for (int t = 0; t < std::min(team, omp_get_num_procs()); t++) sum += best_on_core[static_cast<size_t>(t)];
  return sum;
}

double measure_cpu_fma_gflops(int threads, long iters, int reps) {
  return measure_cpu_fma_gflops(cpu_fma_isa(), threads, iters, reps);
}

PeakFlops cpu_fma_peak(int threads) {
  const int n = threads > 0 ? threads : omp_get_max_threads();
  const FmaIsa isa = cpu_fma_isa();
  const double tflops = measure_cpu_fma_gflops(isa, n) / 1000.0;
  std::string how = fma_isa_name(isa);
  const std::string limit = fma_isa_limit();
  if (!limit.empty()) how += " as " + limit;
  return {tflops, format_tflops(tflops) + " (fp32 FMA peak of this CPU, " + how + ", " + std::to_string(n) +
                      (n == 1 ? " thread" : " threads") + ", measured at start-up)"};
}

}  // namespace gpt2
