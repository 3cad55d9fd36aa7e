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

// GPT2_CPU_GEMM_THREADING=openblas selects OpenBLAS's own thread pool for the
// GEMMs instead of the default OpenMP split (blas.cpp explains both); a knob for
// benchmarking the two on a given machine, read once per backend.
cpu::GemmThreading gemm_threading_from_env() {
  const char* v = std::getenv("GPT2_CPU_GEMM_THREADING");
  if (v == nullptr || *v == '\0' || std::string(v) == "split")
    return cpu::GemmThreading::kOpenMpSplit;
  if (std::string(v) == "openblas") return cpu::GemmThreading::kOpenBlas;
  throw std::runtime_error(std::string("backend/cpu: GPT2_CPU_GEMM_THREADING=") + v +
                           " (expected split or openblas)");
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) {
    ex_.threads = cpu::resolve_threads(threads);
    ex_.gemm = gemm_threading_from_env();
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

  void encoder_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, int B, int T,
                       int C) override {
    const char* op = "encoder_forward";
    checks_.encoder(op, out, tokens, wte, wpe, B, T, C);
    check_ids(i32(tokens), sz(B, T), static_cast<long>(wte.numel / C), op, "tokens");
    cpu::encoder_forward<float>(ex_, f32(out), i32(tokens), f32(wte), f32(wpe), B, T, C);
  }
  void encoder_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, int B, int T,
                        int C) override {
    const char* op = "encoder_backward";
    checks_.encoder(op, dout, tokens, dwte, dwpe, B, T, C);
    if (!dwte.empty()) check_ids(i32(tokens), sz(B, T), static_cast<long>(dwte.numel / C), op, "tokens");
    cpu::encoder_backward<float>(ex_, dwte.empty() ? nullptr : f32(dwte), f32(dwpe), f32(dout), i32(tokens), B,
                                 T, C);
  }
  // The rows of matmul_backward's dw GEMM (dlogits' columns v0.. with leading
  // dimension Vp), then the embedding's scatter: each element sees the same
  // dot product and the same additions as the whole-table ops.
  void tied_embedding_backward_rows(Tensor dwte_rows, Tensor dlogits, Tensor lnf, Tensor dembed, Tensor tokens,
                                    int N, int C, int Vp, int v0) override {
    checks_.tied_embedding_rows(dwte_rows, dlogits, lnf, dembed, tokens, N, C, Vp, v0);
    const int rows = static_cast<int>(dwte_rows.numel / static_cast<size_t>(C));
    if (!dlogits.empty())
      cpu::gemm<float>(ex_, true, false, rows, C, N, 1.0f, f32(dlogits) + v0, Vp, f32(lnf), C, 1.0f,
                       f32(dwte_rows), C);
    if (!dembed.empty())
      cpu::embedding_backward_rows<float>(ex_, f32(dwte_rows), f32(dembed), i32(tokens), N, C, v0, rows);
  }

  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor w, Tensor b,
                         int N, int C) override {
    checks_.layernorm_forward(out, mean, rstd, inp, w, b, N, C);
    cpu::layernorm_forward<float>(ex_, f32(out), f32(mean), f32(rstd), f32(inp), f32(w), f32(b),
                                  N, C);
  }
  void layernorm_backward(Tensor dinp, Tensor dw, Tensor db, Tensor dout, Tensor inp, Tensor w,
                          Tensor mean, Tensor rstd, int N, int C) override {
    checks_.layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    cpu::layernorm_backward<float>(ex_, f32(dinp), f32(dw), f32(db), f32(dout), f32(inp), f32(w),
                                   f32(mean), f32(rstd), N, C);
  }

  void matmul_forward(Tensor out, Tensor inp, Tensor w, Tensor bias, int N, int C,
                      int OC) override {
    checks_.matmul_forward(out, inp, w, bias, N, C, OC);
    cpu::matmul_forward<float>(ex_, f32(out), f32(inp), f32(w), bias.empty() ? nullptr : f32(bias),
                               N, C, OC);
  }
  void matmul_backward(Tensor dinp, Tensor dw, Tensor dbias, Tensor dout, Tensor inp, Tensor w,
                       int N, int C, int OC) override {
    checks_.matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC);
    cpu::matmul_backward<float>(ex_, f32(dinp), dw.empty() ? nullptr : f32(dw), dbias.empty() ? nullptr : f32(dbias),
                                f32(dout), f32(inp), f32(w), N, C, OC);
  }

  size_t attention_saved_numel(int B, int T, int NH) const override {
    return cpu::attention_saved_numel(B, T, NH);
  }
  void attention_forward(Tensor out, Tensor saved, Tensor qkv, int B, int T, int C, int NH,
                         const DropoutMask& drop) override {
    checks_.attention_forward(out, saved, cpu::attention_saved_numel(B, T, NH), qkv, B, T, C, NH, drop);
    cpu::attention_forward<float>(ex_, f32(out), f32(saved), f32(qkv), B, T, C, NH, drop);
  }
  size_t attention_scratch_numel(int B, int T, int NH) const override {
    return cpu::attention_scratch_numel(ex_, T);
  }
  void attention_backward(Tensor dqkv, Tensor scratch, Tensor dout, Tensor out, Tensor qkv, Tensor saved,
                          int B, int T, int C, int NH, const DropoutMask& drop) override {
    // out is not needed: D = rowsum(P dP) from the recomputed probabilities
    checks_.attention_backward(dqkv, scratch, cpu::attention_scratch_numel(ex_, T), dout, out, qkv, saved,
                               cpu::attention_saved_numel(B, T, NH), B, T, C, NH, drop);
    cpu::attention_backward<float>(ex_, f32(dqkv), f32(scratch), f32(dout), f32(qkv), f32(saved),
                                   B, T, C, NH, drop);
  }

  void gelu_forward(Tensor out, Tensor inp, size_t n) override {
    checks_.gelu_forward(out, inp, n);
    cpu::gelu_forward<float>(ex_, f32(out), f32(inp), n);
  }
  void gelu_backward(Tensor dinp, Tensor inp, Tensor dout, size_t n) override {
    checks_.gelu_backward(dinp, inp, dout, n);
    cpu::gelu_backward<float>(ex_, f32(dinp), f32(inp), f32(dout), n);
  }
  void residual_forward(Tensor out, Tensor a, Tensor b, size_t n) override {
    checks_.residual_forward(out, a, b, n);
    cpu::residual_forward<float>(ex_, f32(out), f32(a), f32(b), n);
  }

  void dropout(Tensor out, Tensor inp, const DropoutMask& m, int N, int C) override {
    checks_.dropout(out, inp, m, N, C);
    cpu::dropout<float>(ex_, f32(out), f32(inp), m, N, C);
  }

  void classifier_forward_backward(Tensor logits, Tensor losses, Tensor targets, int N, int V,
                                   int Vp, float dloss) override {
    const char* op = "classifier_forward_backward";
    checks_.classifier(logits, losses, targets, N, V, Vp);
    check_ids(i32(targets), sz(N), V, op, "targets", &kIgnoreTarget);
    cpu::classifier_forward_backward<float>(ex_, f32(logits), f32(losses), i32(targets), N, V, Vp,
                                            dloss);
  }

  double sum_squares(Tensor g) override {
    checks_.need_x(g, g.numel, "sum_squares", "g");
    return cpu::sum_squares<float>(ex_, f32(g), g.numel);
  }
  void adamw_update(Tensor params, Tensor master, Tensor grads, Tensor m, Tensor v, float lr,
                    float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                    int t) override {
    if (!master.empty())
      checks_.fail("adamw_update", "master weights are not used by the fp32 CPU backend (pass an empty Tensor)");
    checks_.adamw(params, master, grads, m, v, t);
    const size_t n = params.numel;
    cpu::adamw_update<float>(ex_, f32(params), f32(grads), f32(m), f32(v), n, lr, beta1, beta2,
                             eps, weight_decay, grad_scale, t);
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
