// CudaBackend: the Backend seam over the kernels of kernels/*.cuh.
//
// Memory: cudaMalloc per buffer, fp32 for every role (tokens int32). All work
// is queued on one stream owned by the backend; cuBLAS and cuBLASLt are bound
// to it. Calls that return data to the host (download, sum_squares) and
// synchronize() wait for the stream; uploads are synchronous (pageable host
// memory). Each op checks its tensors against the shapes it is given (element
// counts and element size), like the CPU backend, so a caller bug becomes a
// std::runtime_error naming the op. Token ids live on the device and are not
// checked there (a download per call); see encoder.cuh / classifier.cuh for
// what an out-of-range id does (NaN, never an out-of-bounds access).
//
// Workspace: a backend-owned device buffer, grown on demand, for what an op
// needs beyond its arguments (attention's per-head copies of q/k/v, which
// depend on C that the seam's size queries do not get; column-sum partials of
// the layernorm and bias gradients). Growing frees the old buffer, which
// waits for queued work (cudaFree synchronises).
#include <cstdint>
#include <stdexcept>
#include <string>

#include "backend/backend.h"
#include "kernels/adamw.cuh"
#include "kernels/attention.cuh"
#include "kernels/classifier.cuh"
#include "kernels/common.cuh"
#include "kernels/cuda_backend.h"
#include "kernels/encoder.cuh"
#include "kernels/gelu.cuh"
#include "kernels/global_norm.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "kernels/residual.cuh"

namespace gpt2 {

namespace {

float* f32(Tensor t) { return static_cast<float*>(t.ptr); }
const int* i32(Tensor t) { return static_cast<const int*>(t.ptr); }

void need(const Tensor& t, size_t numel, const char* op, const char* arg) {
  if (t.ptr == nullptr && numel > 0)
    throw std::runtime_error(std::string("backend/cuda: ") + op + ": " + arg + " is empty");
  if (t.numel < numel)
    throw std::runtime_error(std::string("backend/cuda: ") + op + ": " + arg + " has " +
                             std::to_string(t.numel) + " elements, needs " +
                             std::to_string(numel));
  if (t.ptr != nullptr && t.elem_bytes != 4)
    throw std::runtime_error(std::string("backend/cuda: ") + op + ": " + arg +
                             " has element size " + std::to_string(t.elem_bytes) +
                             " (expected 4)");
}

void check_dims(const char* op, std::initializer_list<long> dims) {
  for (long d : dims)
    if (d <= 0)
      throw std::runtime_error(std::string("backend/cuda: ") + op + ": non-positive dimension " +
                               std::to_string(d));
}

void check_attention(const char* op, int B, int T, int C, int NH) {
  check_dims(op, {B, T, C, NH});
  if (C % NH != 0)
    throw std::runtime_error(std::string("backend/cuda: ") + op + ": C " + std::to_string(C) +
                             " is not a multiple of NH " + std::to_string(NH));
}

size_t sz(long a, long b = 1, long c = 1) {
  return static_cast<size_t>(a) * static_cast<size_t>(b) * static_cast<size_t>(c);
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, const CudaBackendOptions& options) : options_(options) {
    int count = 0;
    CUDA_CHECK(cudaGetDeviceCount(&count));
    if (device < 0 || device >= count)
      throw std::runtime_error("backend/cuda: device " + std::to_string(device) +
                               " does not exist (" + std::to_string(count) + " devices)");
    CUDA_CHECK(cudaSetDevice(device));
    try {
      CUDA_CHECK(cudaStreamCreate(&stream_));
      CUBLAS_CHECK(cublasCreate(&blas_.blas));
      CUBLAS_CHECK(cublasSetStream(blas_.blas, stream_));
      CUBLAS_CHECK(cublasLtCreate(&blas_.lt));
      blas_.stream = stream_;
      blas_.use_lt = options.use_cublaslt;
      blas_.lt_workspace_bytes = options.use_cublaslt ? options.cublaslt_workspace_bytes : 0;
      if (blas_.lt_workspace_bytes > 0)
        CUDA_CHECK(cudaMalloc(&blas_.lt_workspace, blas_.lt_workspace_bytes));
      CUDA_CHECK(cudaMalloc(&norm_partials_, (kern::kNormMaxBlocks + 1) * sizeof(double)));
    } catch (...) {
      release();
      throw;
    }
  }
  ~CudaBackend() override { release(); }

  std::string name() const override { return "cuda"; }
  bool is_host_memory() const override { return false; }

  // ---- memory -------------------------------------------------------------
  Tensor alloc(size_t numel, BufferRole role) override {
    (void)role;  // every role is 4-byte elements for now
    if (numel == 0) return Tensor{nullptr, 0, 4};
    if (numel > SIZE_MAX / 4)
      throw std::runtime_error("backend/cuda: alloc: " + std::to_string(numel) +
                               " elements overflow size_t");
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, numel * 4);
    if (status != cudaSuccess)
      throw std::runtime_error("backend/cuda: alloc: cudaMalloc of " + std::to_string(numel * 4) +
                               " bytes failed: " + cudaGetErrorString(status));
    return Tensor{p, numel, 4};
  }
  void free(Tensor t) override {
    if (t.ptr != nullptr) CUDA_CHECK(cudaFree(t.ptr));
  }
  void zero(Tensor t) override {
    if (t.empty()) return;
    CUDA_CHECK(cudaMemsetAsync(t.ptr, 0, t.bytes(), stream_));
  }
  void upload(Tensor dst, const float* src) override { to_device(dst, src, "upload"); }
  void upload_tokens(Tensor dst, const int32_t* src) override {
    to_device(dst, src, "upload_tokens");
  }
  void download(float* dst, Tensor src) override {
    if (src.numel == 0) return;
    need(src, src.numel, "download", "src");
    CUDA_CHECK(cudaMemcpyAsync(dst, src.ptr, src.bytes(), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void copy(Tensor dst, Tensor src) override {
    if (dst.numel == 0) return;
    need(src, dst.numel, "copy", "src");
    need(dst, dst.numel, "copy", "dst");
    CUDA_CHECK(cudaMemcpyAsync(dst.ptr, src.ptr, dst.bytes(), cudaMemcpyDeviceToDevice, stream_));
  }
  void synchronize() override { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  // ---- ops ----------------------------------------------------------------
  void encoder_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, int B, int T,
                       int C) override {
    const char* op = "encoder_forward";
    check_dims(op, {B, T, C});
    need(out, sz(B, T, C), op, "out");
    need(tokens, sz(B, T), op, "tokens");
    need(wte, sz(1, C), op, "wte");
    need(wpe, sz(T, C), op, "wpe");
    kern::encoder_forward(f32(out), i32(tokens), f32(wte), f32(wpe), B, T, C, rows(wte, C),
                          stream_);
  }
  void encoder_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, int B, int T,
                        int C) override {
    const char* op = "encoder_backward";
    check_dims(op, {B, T, C});
    need(dout, sz(B, T, C), op, "dout");
    need(tokens, sz(B, T), op, "tokens");
    need(dwte, sz(1, C), op, "dwte");
    need(dwpe, sz(T, C), op, "dwpe");
    kern::encoder_backward(f32(dwte), f32(dwpe), f32(dout), i32(tokens), B, T, C, rows(dwte, C),
                           stream_);
  }

  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor w, Tensor b,
                         int N, int C) override {
    const char* op = "layernorm_forward";
    check_dims(op, {N, C});
    need(out, sz(N, C), op, "out");
    need(mean, sz(N), op, "mean");
    need(rstd, sz(N), op, "rstd");
    need(inp, sz(N, C), op, "inp");
    need(w, sz(C), op, "w");
    need(b, sz(C), op, "b");
    kern::layernorm_forward(f32(out), f32(mean), f32(rstd), f32(inp), f32(w), f32(b), N, C,
                            stream_);
  }
  void layernorm_backward(Tensor dinp, Tensor dw, Tensor db, Tensor dout, Tensor inp, Tensor w,
                          Tensor mean, Tensor rstd, int N, int C) override {
    const char* op = "layernorm_backward";
    check_dims(op, {N, C});
    need(dinp, sz(N, C), op, "dinp");
    need(dw, sz(C), op, "dw");
    need(db, sz(C), op, "db");
    need(dout, sz(N, C), op, "dout");
    need(inp, sz(N, C), op, "inp");
    need(w, sz(C), op, "w");
    need(mean, sz(N), op, "mean");
    need(rstd, sz(N), op, "rstd");
    float* scratch = workspace(kern::layernorm_backward_scratch_floats(N, C));
    kern::layernorm_backward(f32(dinp), f32(dw), f32(db), scratch, f32(dout), f32(inp), f32(w),
                             f32(mean), f32(rstd), N, C, stream_);
  }

  void matmul_forward(Tensor out, Tensor inp, Tensor w, Tensor bias, int N, int C,
                      int OC) override {
    const char* op = "matmul_forward";
    check_dims(op, {N, C, OC});
    need(out, sz(N, OC), op, "out");
    need(inp, sz(N, C), op, "inp");
    need(w, sz(OC, C), op, "w");
    if (!bias.empty()) need(bias, sz(OC), op, "bias");
    kern::matmul_forward(blas_, f32(out), f32(inp), f32(w), bias.empty() ? nullptr : f32(bias), N,
                         C, OC);
  }
  void matmul_backward(Tensor dinp, Tensor dw, Tensor dbias, Tensor dout, Tensor inp, Tensor w,
                       int N, int C, int OC) override {
    const char* op = "matmul_backward";
    check_dims(op, {N, C, OC});
    need(dinp, sz(N, C), op, "dinp");
    need(dw, sz(OC, C), op, "dw");
    if (!dbias.empty()) need(dbias, sz(OC), op, "dbias");
    need(dout, sz(N, OC), op, "dout");
    need(inp, sz(N, C), op, "inp");
    need(w, sz(OC, C), op, "w");
    float* scratch = dbias.empty() ? nullptr : workspace(kern::matmul_backward_scratch_floats(N, OC));
    kern::matmul_backward(blas_, f32(dinp), f32(dw), dbias.empty() ? nullptr : f32(dbias),
                          scratch, f32(dout), f32(inp), f32(w), N, C, OC);
  }

  size_t attention_saved_numel(int B, int T, int NH) const override {
    return kern::attention_saved_floats(B, T, NH);
  }
  void attention_forward(Tensor out, Tensor saved, Tensor qkv, int B, int T, int C,
                         int NH) override {
    const char* op = "attention_forward";
    check_attention(op, B, T, C, NH);
    need(out, sz(B, T, C), op, "out");
    need(saved, kern::attention_saved_floats(B, T, NH), op, "saved");
    need(qkv, sz(B, T, 3L * C), op, "qkv");
    float* ws = workspace(kern::attention_forward_workspace_floats(B, T, C));
    kern::attention_forward(blas_.blas, f32(out), f32(saved), ws, f32(qkv), B, T, C, NH, stream_);
  }
  size_t attention_scratch_numel(int B, int T, int NH) const override {
    return kern::attention_scratch_floats(B, T, NH);
  }
  void attention_backward(Tensor dqkv, Tensor scratch, Tensor dout, Tensor qkv, Tensor saved,
                          int B, int T, int C, int NH) override {
    const char* op = "attention_backward";
    check_attention(op, B, T, C, NH);
    need(dqkv, sz(B, T, 3L * C), op, "dqkv");
    need(scratch, kern::attention_scratch_floats(B, T, NH), op, "scratch");
    need(dout, sz(B, T, C), op, "dout");
    need(qkv, sz(B, T, 3L * C), op, "qkv");
    need(saved, kern::attention_saved_floats(B, T, NH), op, "saved");
    float* ws = workspace(kern::attention_backward_workspace_floats(B, T, C));
    kern::attention_backward(blas_.blas, f32(dqkv), f32(scratch), ws, f32(dout), f32(qkv),
                             f32(saved), B, T, C, NH, stream_);
  }

  void gelu_forward(Tensor out, Tensor inp, size_t n) override {
    if (n == 0) return;
    need(out, n, "gelu_forward", "out");
    need(inp, n, "gelu_forward", "inp");
    kern::gelu_forward(f32(out), f32(inp), n, stream_);
  }
  void gelu_backward(Tensor dinp, Tensor inp, Tensor dout, size_t n) override {
    if (n == 0) return;
    need(dinp, n, "gelu_backward", "dinp");
    need(inp, n, "gelu_backward", "inp");
    need(dout, n, "gelu_backward", "dout");
    kern::gelu_backward(f32(dinp), f32(inp), f32(dout), n, stream_);
  }
  void residual_forward(Tensor out, Tensor a, Tensor b, size_t n) override {
    if (n == 0) return;
    need(out, n, "residual_forward", "out");
    need(a, n, "residual_forward", "a");
    need(b, n, "residual_forward", "b");
    kern::residual_forward(f32(out), f32(a), f32(b), n, stream_);
  }

  void classifier_forward_backward(Tensor logits, Tensor losses, Tensor targets, int N, int V,
                                   int Vp, float dloss) override {
    const char* op = "classifier_forward_backward";
    check_dims(op, {N, V, Vp});
    if (V > Vp)
      throw std::runtime_error(std::string("backend/cuda: ") + op + ": V " + std::to_string(V) +
                               " exceeds padded Vp " + std::to_string(Vp));
    need(logits, sz(N, Vp), op, "logits");
    need(losses, sz(N), op, "losses");
    need(targets, sz(N), op, "targets");
    kern::classifier_forward_backward(f32(logits), f32(losses), i32(targets), N, V, Vp, dloss,
                                      stream_);
  }

  // ---- optimizer ------------------------------------------------------------
  double sum_squares(Tensor g) override {
    if (g.numel == 0) return 0.0;
    need(g, g.numel, "sum_squares", "g");
    kern::sum_squares(norm_partials_, f32(g), g.numel, stream_);
    double total = 0;
    CUDA_CHECK(cudaMemcpyAsync(&total, norm_partials_ + kern::global_norm_blocks(g.numel),
                               sizeof total, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return total;
  }
  void adamw_update(Tensor params, Tensor master, Tensor grads, Tensor m, Tensor v, float lr,
                    float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                    int t) override {
    const char* op = "adamw_update";
    if (t < 1)
      throw std::runtime_error("backend/cuda: adamw_update: step t = " + std::to_string(t) +
                               " (must be >= 1)");
    const size_t n = params.numel;
    if (n == 0) return;
    need(params, n, op, "params");
    if (!master.empty()) need(master, n, op, "master");
    need(grads, n, op, "grads");
    need(m, n, op, "m");
    need(v, n, op, "v");
    kern::adamw_update(f32(params), master.empty() ? nullptr : f32(master), f32(grads), f32(m),
                       f32(v), n,
                       kern::adamw_scalars(lr, beta1, beta2, eps, weight_decay, grad_scale, t),
                       stream_);
  }
  void scale(Tensor x, float s) override {
    if (x.numel == 0) return;
    need(x, x.numel, "scale", "x");
    kern::scale(f32(x), s, x.numel, stream_);
  }

 private:
  static int rows(const Tensor& table, int C) { return static_cast<int>(table.numel / C); }

  template <class T>
  void to_device(Tensor dst, const T* src, const char* op) {
    if (dst.numel == 0) return;
    need(dst, dst.numel, op, "dst");
    CUDA_CHECK(cudaMemcpyAsync(dst.ptr, src, dst.bytes(), cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // the caller may reuse src at once
  }

  float* workspace(size_t floats) {
    if (floats > workspace_floats_) {
      if (workspace_ != nullptr) CUDA_CHECK(cudaFree(workspace_));
      workspace_ = nullptr;
      workspace_floats_ = 0;
      CUDA_CHECK(cudaMalloc(&workspace_, floats * sizeof(float)));
      workspace_floats_ = floats;
    }
    return workspace_;
  }

  // Destructor path: no throwing, release what exists.
  void release() noexcept {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (workspace_ != nullptr) cudaFree(workspace_);
    if (norm_partials_ != nullptr) cudaFree(norm_partials_);
    if (blas_.lt_workspace != nullptr) cudaFree(blas_.lt_workspace);
    if (blas_.lt != nullptr) cublasLtDestroy(blas_.lt);
    if (blas_.blas != nullptr) cublasDestroy(blas_.blas);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    workspace_ = nullptr;
    norm_partials_ = nullptr;
    blas_ = kern::BlasContext{};
    stream_ = nullptr;
  }

  CudaBackendOptions options_;
  cudaStream_t stream_ = nullptr;
  kern::BlasContext blas_;
  double* norm_partials_ = nullptr;
  float* workspace_ = nullptr;
  size_t workspace_floats_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return make_cuda_backend(device, CudaBackendOptions{});
}

std::unique_ptr<Backend> make_cuda_backend(int device, const CudaBackendOptions& options) {
  return std::make_unique<CudaBackend>(device, options);
}

}  // namespace gpt2
