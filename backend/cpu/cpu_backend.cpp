// CpuBackend: the Backend seam over the fp32 instantiations in ops.h.
//
// Memory: every buffer is fp32 (tokens int32), 64-byte aligned (a cache line,
// one AVX-512 vector) and rounded up to whole lines, from std::aligned_alloc.
// Each op checks that its tensors are large enough for the shapes it is given
// (a few integer compares per call) and that token/target ids are in range, so
// a caller bug becomes a std::runtime_error naming the op instead of a stray
// write. zero/copy of the big buffers (grads are 0.5 GB at d12) are split
// across the threads.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "backend/backend.h"
#include "backend/cpu/ops.h"
#include "backend/sizing_backend.h"
#include "backend/op_checks.h"

namespace gpt2 {

namespace {

constexpr size_t kAlign = 64;

float* f32(Tensor t) { return static_cast<float*>(t.ptr); }
float* or_null(Tensor t) { return t.empty() ? nullptr : f32(t); }  // optional outputs and bias
const int32_t* i32(Tensor t) { return static_cast<const int32_t*>(t.ptr); }

// Ids in [0, limit); `allowed` (e.g. kIgnoreTarget) is accepted too when given.
void check_ids(const int32_t* ids, size_t n, long limit, const char* op, const char* what,
               const int32_t* allowed = nullptr) {
  for (size_t i = 0; i < n; i++)
    if ((ids[i] < 0 || ids[i] >= limit) && !(allowed && ids[i] == *allowed))
      throw std::runtime_error(std::string("backend/cpu: ") + op + ": " + what + "[" +
                               std::to_string(i) + "] = " + std::to_string(ids[i]) +
                               " outside [0, " + std::to_string(limit) + ")");
}

size_t sz(long a, long b = 1, long c = 1) {
  return static_cast<size_t>(a) * static_cast<size_t>(b) * static_cast<size_t>(c);
}

// Knobs for benchmarking the GEMM choices on a given machine (blas.cpp explains
// them), read once per backend: GPT2_CPU_GEMM=onednn|openblas picks the fp32
// library, GPT2_CPU_GEMM_THREADING=split|library how OpenBLAS uses the cores.
cpu::Exec gemm_choice_from_env(int threads) {
  cpu::Exec ex;
  ex.threads = threads;
  ex.blas = cpu::gemm_library_from_env();
  const char* how = std::getenv("GPT2_CPU_GEMM_THREADING");
  if (how == nullptr || *how == '\0' || std::string(how) == "split") return ex;
  if (std::string(how) != "library")
    throw std::runtime_error(std::string("backend/cpu: GPT2_CPU_GEMM_THREADING=") + how +
                             " (expected split or library)");
  if (ex.blas == cpu::GemmLibrary::kOneDnn)
    throw std::runtime_error("backend/cpu: GPT2_CPU_GEMM_THREADING=library needs GPT2_CPU_GEMM=openblas: oneDNN's "
                             "own threads would run its GEMM kernels where a signal corrupts the heap (blas.cpp)");
  ex.gemm = cpu::GemmThreading::kLibrary;
  return ex;
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) {
    ex_ = gemm_choice_from_env(cpu::resolve_threads(threads));
  }

  std::string name() const override { return "cpu"; }
  bool is_host_memory() const override { return true; }

  Tensor alloc(size_t numel, BufferRole role) override {
    const uint32_t elem = role == BufferRole::kScalar64 ? 8 : 4;  // every other role: 4-byte elements
    if (numel == 0) return Tensor{nullptr, 0, elem};
    if (numel > (SIZE_MAX - kAlign) / elem)
      throw std::runtime_error("backend/cpu: alloc: " + std::to_string(numel) +
                               " elements overflow size_t");
    const size_t bytes = (numel * elem + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, bytes);
    if (p == nullptr)
      throw std::runtime_error("backend/cpu: alloc: out of memory for " + std::to_string(bytes) + " bytes of " +
                               buffer_role_name(role) + " (the trainer's --dry-run 1 prints what a run needs)");
    return Tensor{p, numel, elem};
  }
  void free(Tensor t) override { std::free(t.ptr); }

  void zero(Tensor t) override {
    if (t.empty()) return;
    parallel_bytes(t.bytes(), [&](size_t lo, size_t hi) {
      std::memset(static_cast<char*>(t.ptr) + lo, 0, hi - lo);
    });
  }
  void upload(Tensor dst, const float* src) override {
    copy_bytes(dst.ptr, src, dst.numel * sizeof(float));
  }
  void download(float* dst, Tensor src) override {
    copy_bytes(dst, src.ptr, src.numel * sizeof(float));
  }
  void upload_tokens(Tensor dst, const int32_t* src) override {
    copy_bytes(dst.ptr, src, dst.numel * sizeof(int32_t));
  }
  void copy(Tensor dst, Tensor src) override {
    checks_.need(src, dst.numel, "copy", "src", 4);
    copy_bytes(dst.ptr, src.ptr, dst.bytes());
  }

  void encoder_forward(const EncoderForwardArgs& args) override {
    checks_.encoder_forward(args);
    const int B = args.B, T = args.T, C = args.C;
    check_ids(i32(args.tokens), sz(B, T), static_cast<long>(args.wte.numel / C), "encoder_forward", "tokens");
    cpu::encoder_forward<float>(ex_, f32(args.out), i32(args.tokens), f32(args.wte), f32(args.wpe), B, T, C);
  }
  void encoder_backward(const EncoderBackwardArgs& args) override {
    checks_.encoder_backward(args);
    const int B = args.B, T = args.T, C = args.C;
    if (!args.dwte.empty())
      check_ids(i32(args.tokens), sz(B, T), static_cast<long>(args.dwte.numel / C), "encoder_backward", "tokens");
    cpu::encoder_backward<float>(ex_, args.dwte.empty() ? nullptr : f32(args.dwte), f32(args.dwpe), f32(args.dout),
                                 i32(args.tokens), B, T, C);
  }
  // The rows of matmul_backward's dw GEMM (dlogits' columns v0.. with leading
  // dimension Vp), then the embedding's scatter: each element sees the same
  // dot product and the same additions as the whole-table ops.
  void tied_embedding_backward_rows(const TiedEmbeddingRowsArgs& args) override {
    checks_.tied_embedding_rows(args);
    const int N = args.N, C = args.C, v0 = args.v0;
    const int rows = static_cast<int>(args.dwte_rows.numel / static_cast<size_t>(C));
    if (!args.dlogits.empty())
      cpu::gemm<float>(ex_, true, false, rows, C, N, 1.0f, f32(args.dlogits) + v0, args.Vp, f32(args.lnf), C, 1.0f,
                       f32(args.dwte_rows), C);
    if (!args.dembed.empty())
      cpu::embedding_backward_rows<float>(ex_, f32(args.dwte_rows), f32(args.dembed), i32(args.tokens), N, C, v0,
                                          rows);
  }

  void layernorm_forward(const LayernormForwardArgs& args) override {
    checks_.layernorm_forward(args);
    cpu::layernorm_forward<float>(ex_, f32(args.out), f32(args.mean), f32(args.rstd), f32(args.inp), f32(args.w),
                                  f32(args.b), args.N, args.C);
  }
  void layernorm_backward(const LayernormBackwardArgs& args) override {
    checks_.layernorm_backward(args);
    cpu::layernorm_backward<float>(ex_, f32(args.dinp), f32(args.dw), f32(args.db), f32(args.dout), f32(args.inp),
                                   f32(args.w), f32(args.mean), f32(args.rstd), args.N, args.C);
  }

  void matmul_forward(const MatmulForwardArgs& args) override {
    checks_.matmul_forward(args);
    cpu::matmul_forward<float>(ex_, f32(args.out), f32(args.inp), f32(args.w), or_null(args.bias), args.N, args.C,
                               args.OC);
  }
  void matmul_backward(const MatmulBackwardArgs& args) override {
    checks_.matmul_backward(args);
    cpu::matmul_backward<float>(ex_, f32(args.dinp), or_null(args.dw), or_null(args.dbias), f32(args.dout),
                                f32(args.inp), f32(args.w), args.N, args.C, args.OC);
  }

  size_t attention_saved_numel(int B, int T, int NH) const override {
    return cpu::attention_saved_numel(B, T, NH);
  }
  void attention_forward(const AttentionForwardArgs& args) override {
    checks_.attention_forward(args, cpu::attention_saved_numel(args.B, args.T, args.NH));
    cpu::attention_forward<float>(ex_, f32(args.out), f32(args.saved), f32(args.qkv), args.B, args.T, args.C, args.NH,
                                  args.drop);
  }
  size_t attention_scratch_numel(int B, int T, int NH) const override {
    return cpu::attention_scratch_numel(ex_, T);
  }
  void attention_backward(const AttentionBackwardArgs& args) override {
    // out is not needed: D = rowsum(P dP) from the recomputed probabilities
    checks_.attention_backward(args, cpu::attention_scratch_numel(ex_, args.T),
                               cpu::attention_saved_numel(args.B, args.T, args.NH));
    cpu::attention_backward<float>(ex_, f32(args.dqkv), f32(args.scratch), f32(args.dout), f32(args.qkv),
                                   f32(args.saved), args.B, args.T, args.C, args.NH, args.drop);
  }

  void gelu_forward(const GeluForwardArgs& args) override {
    checks_.gelu_forward(args);
    cpu::gelu_forward<float>(ex_, f32(args.out), f32(args.inp), args.n);
  }
  void gelu_backward(const GeluBackwardArgs& args) override {
    checks_.gelu_backward(args);
    cpu::gelu_backward<float>(ex_, f32(args.dinp), f32(args.inp), f32(args.dout), args.n);
  }
  void residual_forward(const ResidualForwardArgs& args) override {
    checks_.residual_forward(args);
    cpu::residual_forward<float>(ex_, f32(args.out), f32(args.a), f32(args.b), args.n);
  }

  void dropout(const DropoutArgs& args) override {
    checks_.dropout(args);
    cpu::dropout<float>(ex_, f32(args.out), f32(args.inp), args.m, args.N, args.C);
  }

  void classifier_forward_backward(const ClassifierArgs& args) override {
    checks_.classifier(args);
    check_ids(i32(args.targets), sz(args.N), args.V, "classifier_forward_backward", "targets", &kIgnoreTarget);
    cpu::classifier_forward_backward<float>(ex_, f32(args.logits), f32(args.losses), i32(args.targets), args.N,
                                            args.V, args.Vp, args.dloss);
  }

  double sum_squares(Tensor g) override {
    checks_.need_x(g, g.numel, "sum_squares", "g");
    return cpu::sum_squares<float>(ex_, f32(g), g.numel);
  }
  void adamw_update(const AdamWArgs& args) override {
    if (!args.master.empty())
      checks_.fail("adamw_update", "master weights are not used by the fp32 CPU backend (pass an empty Tensor)");
    checks_.adamw(args);
    cpu::adamw_update<float>(ex_, f32(args.params), f32(args.grads), f32(args.m), f32(args.v), args.params.numel,
                             args.lr, args.beta1, args.beta2, args.eps, args.weight_decay, args.grad_scale, args.t);
  }
  void sum_squares_into(Tensor clip, Tensor g) override {
    checks_.need(clip, 2, "sum_squares_into", "clip", 8);
    static_cast<double*>(clip.ptr)[0] = g.numel == 0 ? 0.0 : sum_squares(g);
  }
  void clip_scale(Tensor clip, float max_norm) override {
    checks_.need(clip, 2, "clip_scale", "clip", 8);
    double* c = static_cast<double*>(clip.ptr);
    c[1] = clip_scale_value(c[0], max_norm);
  }
  void download64(double* dst, Tensor src) override {
    checks_.need(src, src.numel, "download64", "src", 8);
    std::copy_n(static_cast<const double*>(src.ptr), src.numel, dst);
  }

 private:
  // Splits [0, bytes) into per-thread ranges (whole cache lines) and runs fn on each.
  template <class Fn>
  void parallel_bytes(size_t bytes, Fn fn) const {
    constexpr size_t kSerialBelow = size_t{1} << 20;
    if (bytes < kSerialBelow || ex_.threads == 1) {
      fn(0, bytes);
      return;
    }
    const size_t per = ((bytes + ex_.threads - 1) / ex_.threads + kAlign - 1) / kAlign * kAlign;
#pragma omp parallel for num_threads(ex_.threads) schedule(static)
    for (int i = 0; i < ex_.threads; i++) {
      const size_t lo = std::min(bytes, per * i);
      const size_t hi = std::min(bytes, lo + per);
      if (hi > lo) fn(lo, hi);
    }
  }
  void copy_bytes(void* dst, const void* src, size_t bytes) const {
    if (bytes == 0) return;
    parallel_bytes(bytes, [&](size_t lo, size_t hi) {
      std::memcpy(static_cast<char*>(dst) + lo, static_cast<const char*>(src) + lo, hi - lo);
    });
  }

  cpu::Exec ex_;
  const OpChecks checks_{"backend/cpu", 4};
};

}  // namespace

BackendSizes cpu_backend_sizes(int threads) {
  BackendSizes s;
  s.name = "cpu";
  s.host_memory = true;
  s.elem_bytes.fill(4);  // fp32 buffers, int32 tokens
  s.elem_bytes[static_cast<size_t>(BufferRole::kScalar64)] = 8;
  const cpu::Exec ex{cpu::resolve_threads(threads)};
  s.attention_saved_numel = [](int B, int T, int NH) { return cpu::attention_saved_numel(B, T, NH); };
  s.attention_scratch_numel = [ex](int, int T, int) { return cpu::attention_scratch_numel(ex, T); };
  return s;
}

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace gpt2
