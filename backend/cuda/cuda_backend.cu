// CudaBackend: the Backend seam over the kernels of backend/cuda/*.cuh.
//
// Memory: cudaMalloc per buffer. Parameters, gradients and activations are
// fp32, or bf16 with CudaBackendOptions::bf16 (every op then reads and writes
// bf16 and computes in fp32); optimizer state and scratch are fp32, tokens
// int32. upload/download convert from/to host fp32. All work
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
// depend on C that the seam's size queries do not get, and in bf16 mode its
// fp32 scores; column-sum partials of the layernorm and bias gradients; in
// bf16 mode the encoder's fp32 dwte shadow). Growing frees the old buffer,
// which waits for queued work (cudaFree synchronises).
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/adamw.cuh"
#include "backend/cuda/attention.cuh"
#include "backend/cuda/classifier.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cudnn_attention.h"
#include "backend/op_checks.h"
#include "backend/cuda/encoder.cuh"
#include "backend/cuda/dropout.cuh"
#include "backend/cuda/flash_attention.cuh"
#include "backend/cuda/gelu.cuh"
#include "backend/cuda/global_norm.cuh"
#include "backend/cuda/host_transfers.cuh"
#include "backend/cuda/layernorm.cuh"
#include "backend/cuda/matmul.cuh"
#include "backend/cuda/residual.cuh"
#include "backend/cuda/token_staging.h"

#include <cuda_profiler_api.h>
#include <nvtx3/nvToolsExt.h>  // header-only NVTX v3: a no-op unless a profiler is attached

namespace gpt2 {

namespace {

template <class T>
T* as(Tensor t) {
  return static_cast<T*>(t.ptr);
}
// Optional outputs and bias: null when left empty.
template <class T>
T* or_null(Tensor t) {
  return t.empty() ? nullptr : as<T>(t);
}
const int* i32(Tensor t) { return static_cast<const int*>(t.ptr); }

// CUDA_LAUNCH_BLOCKING=1, the CUDA debugging convention: also synchronise after every op.
bool launch_blocking_env() {
  const char* v = std::getenv("CUDA_LAUNCH_BLOCKING");
  return v != nullptr && std::string(v) == "1";
}

// Attention buffer sizes of the backend's choice (shared with cuda_backend_sizes).
// Flash and cuDNN: saved = fp32 log-sum-exp per row (B*NH*T floats; in bf16
// mode 2*B*NH*T bf16 elements of the same bytes). Scratch: flash's D per row,
// dq accumulator and turn counters (kern::flash_scratch_floats, fp32 words);
// none for cuDNN alone (its row sums live in its own workspace); kAuto sizes
// for flash, which it may run. Classic: saved = P[B,NH,T,T] of the storage
// type, scratch = dP (+ dS).
size_t attention_saved_numel_for(CudaAttention a, uint32_t storage_bytes, int B, int T, int NH) {
  if (a != CudaAttention::kClassic) return kern::flash_lse_floats(B, T, NH) * (sizeof(float) / storage_bytes);
  return kern::attention_saved_elems(B, T, NH);
}
size_t attention_scratch_numel_for(CudaAttention a, uint32_t storage_bytes, int B, int T, int NH) {
  if (a == CudaAttention::kCudnn) return 0;
  if (a != CudaAttention::kClassic) return kern::flash_scratch_floats(B, T, NH);  // kScratch is fp32
  return storage_bytes == 2 ? kern::attention_scratch_floats<__nv_bfloat16>(B, T, NH)
                            : kern::attention_scratch_floats<float>(B, T, NH);
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, const CudaBackendOptions& options)
      : device_(device),
        bf16_(options.bf16),
        attention_(options.attention),
        sync_ops_(options.sync_after_ops || launch_blocking_env()),
        storage_bytes_(options.bf16 ? 2 : 4) {
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
      blas_.lt_bias_grad = options.cublaslt_bias_grad;
      blas_.lt_gelu = options.cublaslt_gelu;
      // TF32 in fp32 mode: compute types in backend/cuda/matmul.cuh, math mode for attention's GEMMs.
      blas_.tf32 = options.tf32 && !options.bf16;
      if (blas_.tf32) CUBLAS_CHECK(cublasSetMathMode(blas_.blas, CUBLAS_TF32_TENSOR_OP_MATH));
      blas_.lt_workspace_bytes = options.use_cublaslt ? options.cublaslt_workspace_bytes : 0;
      if (blas_.lt_workspace_bytes > 0)
        blas_.lt_workspace = device_malloc(blas_.lt_workspace_bytes, "cuBLASLt's workspace", "construction");
      norm_partials_ = static_cast<double*>(device_malloc(kNormPartialsBytes, "the gradient norm's partial sums",
                                                          "construction"));
      CUDA_CHECK(cudaMallocHost(&clip_pinned_, 2 * sizeof(double)));
      CUDA_CHECK(cudaEventCreateWithFlags(&clip_copied_, cudaEventDisableTiming));
      start_cudnn();
    } catch (...) {
      release();
      throw;
    }
  }
  ~CudaBackend() override { release(); }

  std::string name() const override { return "cuda"; }
  bool is_host_memory() const override { return false; }
  CudaPlacement placement() const { return CudaPlacement{device_, stream_}; }
  CudaMemoryReport memory_report() const {
    CudaMemoryReport r;
    r.allocated = allocated_bytes_;
    r.workspace = blas_.lt_workspace_bytes + kNormPartialsBytes + workspace_floats_ * sizeof(float) +
                  (cudnn_ ? cudnn_->workspace_bytes() : 0);
    const DeviceMemory m = device_memory();
    r.device_in_use = m.total_bytes - m.free_bytes;
    return r;
  }
  // cudaMemGetInfo of this backend's device (set first: the thread's current
  // device may be another one), named by index and cudaDeviceProp::name.
  DeviceMemory device_memory() const override {
    CUDA_CHECK(cudaSetDevice(device_));
    DeviceMemory m;
    m.present = true;
    CUDA_CHECK(cudaMemGetInfo(&m.free_bytes, &m.total_bytes));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    m.device = "GPU " + std::to_string(device_) + " (" + prop.name + ")";
    return m;
  }

  // ---- memory -------------------------------------------------------------
  // kParams, kGrads, kActivations hold the storage type (fp32 or bf16);
  // kOptimizer, kScratch, kStats are fp32, kTokens int32, kScalar64 fp64.
  Tensor alloc(size_t numel, BufferRole role) override {
    const bool storage = role == BufferRole::kParams || role == BufferRole::kGrads ||
                         role == BufferRole::kActivations;
    const uint32_t elem = storage ? storage_bytes_ : role == BufferRole::kScalar64 ? 8 : 4;
    if (numel == 0) return Tensor{nullptr, 0, elem};
    if (numel > SIZE_MAX / elem)
      throw std::runtime_error("backend/cuda: alloc: " + std::to_string(numel) +
                               " elements overflow size_t");
    void* p = device_malloc(numel * elem, buffer_role_name(role), "alloc");
    live_[p] = numel * elem;
    allocated_bytes_ += numel * elem;
    return Tensor{p, numel, elem};
  }
  void free(Tensor t) override {
    if (t.ptr == nullptr) return;
    CUDA_CHECK(cudaFree(t.ptr));
    const auto it = live_.find(t.ptr);
    if (it != live_.end()) {
      allocated_bytes_ -= it->second;
      live_.erase(it);
    }
  }
  void zero(Tensor t) override {
    if (t.empty()) return;
    CUDA_CHECK(cudaMemsetAsync(t.ptr, 0, t.bytes(), stream_));
  }
  // fp32 host data; a bf16 buffer receives it rounded to nearest even.
  void upload(Tensor dst, const float* src) override {
    if (dst.elem_bytes != 2) return to_device(dst, src, "upload");
    std::vector<__nv_bfloat16> host(dst.numel);
    for (size_t i = 0; i < dst.numel; i++) host[i] = __float2bfloat16(src[i]);
    to_device(dst, host.data(), "upload");
  }
  // Asynchronous, through pinned staging (backend/cuda/token_staging.h): no host wait.
  void upload_tokens(Tensor dst, const int32_t* src) override {
    need(dst, dst.numel, "upload_tokens", "dst", 4);
    staging_.upload(dst.ptr, src, dst.numel, stream_);
    if (sync_ops_) CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void download(float* dst, Tensor src) override {
    if (src.numel == 0) return;
    need(src, src.numel, "download", "src", src.elem_bytes == 2 ? 2 : 4);
    if (src.elem_bytes == 4) {
      CUDA_CHECK(cudaMemcpyAsync(dst, src.ptr, src.bytes(), cudaMemcpyDeviceToHost, stream_));
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      return;
    }
    std::vector<__nv_bfloat16> host(src.numel);
    CUDA_CHECK(cudaMemcpyAsync(host.data(), src.ptr, src.bytes(), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (size_t i = 0; i < src.numel; i++) dst[i] = __bfloat162float(host[i]);
  }
  // backend/cuda/host_transfers.cuh: on the stream, no host wait.
  void download_async(float* host, Tensor src, Tensor via) override {
    if (src.numel == 0) return;
    need(src, src.numel, "download_async", "src", src.elem_bytes == 2 ? 2 : 4);
    if (src.elem_bytes == 2) need(via, src.numel, "download_async", "via", 4);
    transfers_.download(host, src.ptr, src.numel, src.elem_bytes == 2, or_null<float>(via), stream_);
    if (sync_ops_) CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void upload_async(Tensor dst, const float* host, Tensor via) override {
    if (dst.numel == 0) return;
    need(dst, dst.numel, "upload_async", "dst", dst.elem_bytes == 2 ? 2 : 4);
    if (dst.elem_bytes == 2) need(via, dst.numel, "upload_async", "via", 4);
    transfers_.upload(dst.ptr, host, dst.numel, dst.elem_bytes == 2, or_null<float>(via), stream_);
    if (sync_ops_) CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  uint64_t issue_mark() override { return transfers_.mark(stream_); }
  void wait_mark(uint64_t mark) override { transfers_.wait(mark); }
  bool pin_host(void* p, size_t bytes) override { return transfers_.pin(p, bytes); }
  void unpin_host(void* p) override { transfers_.unpin(p); }
  void copy(Tensor dst, Tensor src) override {
    if (dst.numel == 0) return;
    need(src, dst.numel, "copy", "src", dst.elem_bytes);
    CUDA_CHECK(cudaMemcpyAsync(dst.ptr, src.ptr, dst.bytes(), cudaMemcpyDeviceToDevice, stream_));
  }
  // A device fault of any earlier op surfaces here on a GPU (asynchronous, sticky).
  void range_push(const char* name) override { nvtxRangePushA(name); }
  void range_pop() override { nvtxRangePop(); }
  void profiler_capture(bool on) override { CUDA_CHECK(on ? cudaProfilerStart() : cudaProfilerStop()); }

  void synchronize() override {
    const cudaError_t status = cudaStreamSynchronize(stream_);
    if (status != cudaSuccess)
      throw std::runtime_error(std::string("backend/cuda: device fault found at synchronisation: ") +
                               cudaGetErrorString(status) +
                               " (the device is unusable; rerun with CUDA_LAUNCH_BLOCKING=1 to name the op)");
  }

  // ---- ops ----------------------------------------------------------------
  // Every op checks its tensors (element counts and sizes), then runs the
  // kernels for the storage type: dispatch() calls f with a float or a
  // __nv_bfloat16 tag.
  void encoder_forward(const EncoderForwardArgs& args) override {
    checks_.encoder_forward(args);
    dispatch("encoder_forward", [&](auto tag) {
      using X = decltype(tag);
      kern::encoder_forward<X>(as<X>(args.out), i32(args.tokens), as<X>(args.wte), as<X>(args.wpe), args.B, args.T,
                               args.C, rows(args.wte, args.C), stream_);
    });
  }
  void encoder_backward(const EncoderBackwardArgs& args) override {
    checks_.encoder_backward(args);
    const Tensor dwte = args.dwte;
    const int C = args.C;
    float* shadow = bf16_ && !dwte.empty() ? workspace(static_cast<size_t>(rows(dwte, C)) * C) : nullptr;
    dispatch("encoder_backward", [&](auto tag) {
      using X = decltype(tag);
      kern::encoder_backward<X>(dwte.empty() ? nullptr : as<X>(dwte), as<X>(args.dwpe), shadow, as<X>(args.dout),
                                i32(args.tokens), args.B, args.T, C, rows(dwte, C), stream_);
    });
  }
  // matmul_backward's dw GEMM on dlogits' columns [v0, v0 + rows) (a submatrix:
  // same leading dimension Vp), then the embedding scatter over that window;
  // the bf16 shadow is rows*C floats, not the whole table's.
  void tied_embedding_backward_rows(const TiedEmbeddingRowsArgs& args) override {
    checks_.tied_embedding_rows(args);
    const int N = args.N, C = args.C, R = rows(args.dwte_rows, C);
    float* shadow = bf16_ && !args.dembed.empty() ? workspace(static_cast<size_t>(R) * C) : nullptr;
    dispatch("tied_embedding_backward_rows", [&](auto tag) {
      using X = decltype(tag);
      if (!args.dlogits.empty())
        kern::matmul_backward_weight_rows<X>(blas_, as<X>(args.dwte_rows), as<X>(args.dlogits) + args.v0,
                                             as<X>(args.lnf), N, C, args.Vp, R);
      if (!args.dembed.empty())
        kern::embedding_backward_rows<X>(as<X>(args.dwte_rows), shadow, as<X>(args.dembed), i32(args.tokens),
                                         static_cast<size_t>(N), C, args.v0, R, stream_);
    });
  }

  void layernorm_forward(const LayernormForwardArgs& args) override {
    checks_.layernorm_forward(args);
    dispatch("layernorm_forward", [&](auto tag) {
      using X = decltype(tag);
      kern::layernorm_forward<X>(as<X>(args.out), as<float>(args.mean), as<float>(args.rstd), as<X>(args.inp),
                                 as<X>(args.w), as<X>(args.b), args.N, args.C, stream_);
    });
  }
  void layernorm_backward(const LayernormBackwardArgs& args) override {
    checks_.layernorm_backward(args);
    float* scratch = workspace(kern::layernorm_backward_scratch_floats(args.N, args.C));
    dispatch("layernorm_backward", [&](auto tag) {
      using X = decltype(tag);
      kern::layernorm_backward<X>(as<X>(args.dinp), as<X>(args.dw), as<X>(args.db), scratch, as<X>(args.dout),
                                  as<X>(args.inp), as<X>(args.w), as<float>(args.mean), as<float>(args.rstd), args.N,
                                  args.C, stream_);
    });
  }

  void residual_layernorm_forward(const ResidualLayernormForwardArgs& args) override {
    const int N = args.N, C = args.C;
    checks_.residual_forward({.out = args.residual, .a = args.a, .b = args.b, .n = static_cast<size_t>(N) * C});
    checks_.layernorm_forward({.out = args.out, .mean = args.mean, .rstd = args.rstd, .inp = args.residual,
                               .w = args.w, .b = args.bias, .N = N, .C = C});
    dispatch("residual_layernorm_forward", [&](auto tag) {
      using X = decltype(tag);
      kern::residual_layernorm_forward<X>(as<X>(args.residual), as<X>(args.out), as<float>(args.mean),
                                          as<float>(args.rstd), as<X>(args.a), as<X>(args.b), as<X>(args.w),
                                          as<X>(args.bias), N, C, stream_);
    });
  }

  void matmul_forward(const MatmulForwardArgs& args) override {
    checks_.matmul_forward(args);
    dispatch("matmul_forward", [&](auto tag) {
      using X = decltype(tag);
      kern::matmul_forward<X>(blas_, as<X>(args.out), as<X>(args.inp), as<X>(args.w), or_null<X>(args.bias), args.N,
                              args.C, args.OC);
    });
  }
  void matmul_backward(const MatmulBackwardArgs& args) override {
    checks_.matmul_backward(args);
    float* scratch = args.dbias.empty() ? nullptr : workspace(kern::matmul_backward_scratch_floats(args.N, args.OC));
    dispatch("matmul_backward", [&](auto tag) {
      using X = decltype(tag);
      kern::matmul_backward<X>(blas_, as<X>(args.dinp), or_null<X>(args.dw), or_null<X>(args.dbias), scratch,
                               as<X>(args.dout), as<X>(args.inp), as<X>(args.w), args.N, args.C, args.OC);
    });
  }

  void matmul_gelu_forward(const MatmulGeluForwardArgs& args) override {
    const int N = args.N, C = args.C, OC = args.OC;
    checks_.matmul_forward({.out = args.pre, .inp = args.inp, .w = args.w, .bias = args.bias, .N = N, .C = C, .OC = OC});
    checks_.gelu_forward({.out = args.out, .inp = args.pre, .n = static_cast<size_t>(N) * OC});
    dispatch("matmul_gelu_forward", [&](auto tag) {
      using X = decltype(tag);
      kern::matmul_gelu_forward<X>(blas_, as<X>(args.out), as<X>(args.pre), as<X>(args.inp), as<X>(args.w),
                                   or_null<X>(args.bias), N, C, OC);
    });
  }
  void matmul_gelu_backward(const MatmulGeluBackwardArgs& args) override {
    const int N = args.N, C = args.C, OC = args.OC;
    checks_.matmul_backward({.dinp = args.dinp, .dw = args.dw, .dbias = args.dbias, .dout = args.dout,
                             .inp = args.inp, .w = args.w, .N = N, .C = C, .OC = OC});
    checks_.gelu_backward({.dinp = args.dinp, .inp = args.gelu_inp, .dout = args.dinp, .n = static_cast<size_t>(N) * C});
    float* scratch = args.dbias.empty() ? nullptr : workspace(kern::matmul_backward_scratch_floats(N, OC));
    dispatch("matmul_gelu_backward", [&](auto tag) {
      using X = decltype(tag);
      kern::matmul_gelu_backward<X>(blas_, as<X>(args.dinp), or_null<X>(args.dw), or_null<X>(args.dbias), scratch,
                                    as<X>(args.dout), as<X>(args.inp), as<X>(args.w), as<X>(args.gelu_inp), N, C, OC);
    });
  }

  size_t attention_saved_numel(int B, int T, int NH) const override {
    return attention_saved_numel_for(attention_, storage_bytes_, B, T, NH);
  }
  size_t attention_scratch_numel(int B, int T, int NH) const override {
    return attention_scratch_numel_for(attention_, storage_bytes_, B, T, NH);
  }
  void attention_forward(const AttentionForwardArgs& args) override {
    const int B = args.B, T = args.T, C = args.C, NH = args.NH;
    const DropoutMask& drop = args.drop;
    checks_.attention_forward(args, attention_saved_numel(B, T, NH));
    if (cudnn_serves("attention_forward", B, T, C, NH, drop, {args.out.ptr, args.saved.ptr, args.qkv.ptr})) {
      dispatch("attention_forward", [&](auto) {
        cudnn_->forward(args.out.ptr, static_cast<float*>(args.saved.ptr), args.qkv.ptr, B, T, NH, C / NH);
      });
      return;
    }
    if (attention_ != CudaAttention::kClassic) {
      float* lse = flash_lse(args.saved, C, NH, "attention_forward");
      dispatch("attention_forward", [&](auto tag) {
        using X = decltype(tag);
        kern::flash_attention_forward<X>(as<X>(args.out), lse, as<X>(args.qkv), B, T, C, NH, blas_.tf32, drop,
                                         stream_);
      });
      return;
    }
    const bool dropping = drop.p > 0.0f;
    float* ws = workspace(bf16_ ? kern::attention_forward_workspace_floats<__nv_bfloat16>(B, T, C, NH, dropping)
                                : kern::attention_forward_workspace_floats<float>(B, T, C, NH, dropping));
    dispatch("attention_forward", [&](auto tag) {
      using X = decltype(tag);
      kern::attention_forward<X>(blas_.blas, as<X>(args.out), as<X>(args.saved), ws, as<X>(args.qkv), B, T, C, NH,
                                 drop, stream_);
    });
  }
  void attention_backward(const AttentionBackwardArgs& args) override {
    const int B = args.B, T = args.T, C = args.C, NH = args.NH;
    const DropoutMask& drop = args.drop;
    checks_.attention_backward(args, attention_scratch_numel(B, T, NH), attention_saved_numel(B, T, NH));
    if (cudnn_serves("attention_backward", B, T, C, NH, drop,
                     {args.dqkv.ptr, args.dout.ptr, args.out.ptr, args.qkv.ptr, args.saved.ptr})) {
      dispatch("attention_backward", [&](auto) {
        cudnn_->backward(args.dqkv.ptr, args.dout.ptr, args.out.ptr, args.qkv.ptr,
                         static_cast<const float*>(args.saved.ptr), B, T, NH, C / NH);
      });
      return;
    }
    if (attention_ != CudaAttention::kClassic) {
      const float* lse = flash_lse(args.saved, C, NH, "attention_backward");
      dispatch("attention_backward", [&](auto tag) {
        using X = decltype(tag);
        kern::flash_attention_backward<X>(as<X>(args.dqkv), as<float>(args.scratch), as<X>(args.dout),
                                          as<X>(args.out), as<X>(args.qkv), lse, B, T, C, NH, blas_.tf32, drop,
                                          stream_);
      });
      return;
    }
    const bool dropping = drop.p > 0.0f;
    float* ws = workspace(bf16_ ? kern::attention_backward_workspace_floats<__nv_bfloat16>(B, T, C, NH, dropping)
                                : kern::attention_backward_workspace_floats<float>(B, T, C, NH, dropping));
    dispatch("attention_backward", [&](auto tag) {
      using X = decltype(tag);
      kern::attention_backward<X>(blas_.blas, as<X>(args.dqkv), as<float>(args.scratch), ws, as<X>(args.dout),
                                  as<X>(args.qkv), as<X>(args.saved), B, T, C, NH, drop, stream_);
    });
  }

  void gelu_forward(const GeluForwardArgs& args) override {
    if (args.n == 0) return;
    checks_.gelu_forward(args);
    dispatch("gelu_forward", [&](auto tag) {
      using X = decltype(tag);
      kern::gelu_forward<X>(as<X>(args.out), as<X>(args.inp), args.n, stream_);
    });
  }
  void gelu_backward(const GeluBackwardArgs& args) override {
    if (args.n == 0) return;
    checks_.gelu_backward(args);
    dispatch("gelu_backward", [&](auto tag) {
      using X = decltype(tag);
      kern::gelu_backward<X>(as<X>(args.dinp), as<X>(args.inp), as<X>(args.dout), args.n, stream_);
    });
  }
  void residual_forward(const ResidualForwardArgs& args) override {
    if (args.n == 0) return;
    checks_.residual_forward(args);
    dispatch("residual_forward", [&](auto tag) {
      using X = decltype(tag);
      kern::residual_forward<X>(as<X>(args.out), as<X>(args.a), as<X>(args.b), args.n, stream_);
    });
  }

  void dropout(const DropoutArgs& args) override {
    checks_.dropout(args);
    dispatch("dropout", [&](auto tag) {
      using X = decltype(tag);
      kern::dropout<X>(as<X>(args.out), as<X>(args.inp), args.m, args.N, args.C, stream_);
    });
  }

  void classifier_forward_backward(const ClassifierArgs& args) override {
    checks_.classifier(args);
    dispatch("classifier_forward_backward", [&](auto tag) {
      using X = decltype(tag);
      kern::classifier_forward_backward<X>(as<X>(args.logits), as<float>(args.losses), i32(args.targets), args.N,
                                           args.V, args.Vp, args.dloss, stream_);
    });
  }

  // ---- optimizer ------------------------------------------------------------
  double sum_squares(Tensor g) override {
    if (g.numel == 0) return 0.0;
    need_x(g, g.numel, "sum_squares", "g");
    double* total_on_device = norm_partials_ + kern::kNormMaxBlocks;
    dispatch("sum_squares", [&](auto tag) {
      using X = decltype(tag);
      kern::sum_squares<X>(total_on_device, norm_partials_, as<X>(g), g.numel, stream_);
    });
    double total = 0;
    CUDA_CHECK(cudaMemcpyAsync(&total, total_on_device, sizeof total, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return total;
  }
  void sum_squares_into(Tensor clip, Tensor g) override {
    need(clip, 2, "sum_squares_into", "clip", 8);
    if (g.numel == 0) {
      CUDA_CHECK(cudaMemsetAsync(clip.ptr, 0, sizeof(double), stream_));
      return;
    }
    need_x(g, g.numel, "sum_squares_into", "g");
    dispatch("sum_squares_into", [&](auto tag) {
      using X = decltype(tag);
      kern::sum_squares<X>(as<double>(clip), norm_partials_, as<X>(g), g.numel, stream_);
    });
  }
  // The kernel, then both values copied to pinned memory behind it (event
  // clip_copied_), so read_clip waits for nothing queued later.
  void clip_scale(Tensor clip, float max_norm) override {
    need(clip, 2, "clip_scale", "clip", 8);
    dispatch("clip_scale", [&](auto) {
      LAUNCH_KERNEL(kern::clip_scale_kernel, 1, 1, 0, stream_, as<double>(clip), max_norm);
    });
    CUDA_CHECK(cudaMemcpyAsync(clip_pinned_, clip.ptr, 2 * sizeof(double), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaEventRecord(clip_copied_, stream_));
    clip_last_ = clip.ptr;
  }
  void read_clip(double* dst, Tensor clip) override {
    if (clip.ptr != clip_last_) return download64(dst, clip.slice(0, 2));
    CUDA_CHECK(cudaEventSynchronize(clip_copied_));
    dst[0] = clip_pinned_[0];
    dst[1] = clip_pinned_[1];
  }
  void download64(double* dst, Tensor src) override {
    need(src, src.numel, "download64", "src", 8);
    if (src.numel == 0) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, src.ptr, src.numel * sizeof(double), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void adamw_update_clipped(const AdamWArgs& args, Tensor clip) override {
    need(clip, 2, "adamw_update_clipped", "clip", 8);
    adamw(args, as<double>(clip));
  }
  void adamw_update(const AdamWArgs& args) override { adamw(args, nullptr); }

 private:
  static int rows(const Tensor& table, int C) { return static_cast<int>(table.numel / C); }

  // kAuto / kCudnn: a cuDNN handle on the stream. kCudnn refuses here what it
  // can never serve; kAuto keeps the reason for the banner and runs flash.
  void start_cudnn() {
    if (attention_ != CudaAttention::kAuto && attention_ != CudaAttention::kCudnn) return;
    const bool explicit_cudnn = attention_ == CudaAttention::kCudnn;
    if (!bf16_) {
      cudnn_refused_ = "fp32 storage: cuDNN's fused attention runs on bf16 (--dtype bf16)";
    } else {
      try {
        cudnn_ = make_cudnn_attention(stream_);
        return;
      } catch (const std::exception& e) {
        cudnn_refused_ = e.what();
      }
    }
    if (explicit_cudnn)
      throw std::runtime_error("backend/cuda: --attention cudnn: " + cudnn_refused_ + "; use --attention flash");
  }

  // Why cuDNN does not serve this call ("" when it does; builds the shape's plans).
  std::string cudnn_refusal(int B, int T, int C, int NH, bool attention_dropout, std::initializer_list<const void*> ptrs) {
    if (!cudnn_) return cudnn_refused_;
    if (attention_dropout) return "attention dropout runs on the flash kernels, whose masks are reproducible";
    for (const void* p : ptrs)
      if (!kern::aligned16(p)) return "a tensor is not 16-byte aligned";
    return cudnn_->prepare(B, T, NH, C / NH);
  }

  // Whether cuDNN runs this call; kCudnn throws why it cannot.
  bool cudnn_serves(const char* op, int B, int T, int C, int NH, const DropoutMask& drop,
                    std::initializer_list<const void*> ptrs) {
    if (attention_ != CudaAttention::kAuto && attention_ != CudaAttention::kCudnn) return false;
    const std::string why = cudnn_refusal(B, T, C, NH, drop.p > 0.0f, ptrs);
    if (why.empty()) return true;
    if (attention_ == CudaAttention::kCudnn)
      throw std::runtime_error(std::string("backend/cuda: ") + op + ": --attention cudnn: " + why);
    return false;
  }

 public:
  CudaAttentionChoice attention_choice(int B, int T, int C, int NH, bool attention_dropout) {
    CudaAttentionChoice c;
    if (attention_ == CudaAttention::kFlash || attention_ == CudaAttention::kClassic) {
      c.kernel = cuda_attention_name(attention_);
      c.why = std::string("--attention ") + c.kernel;
      return c;
    }
    const std::string refused = cudnn_refusal(B, T, C, NH, attention_dropout, {});
    if (refused.empty()) {
      c.kernel = "cudnn";
      c.why = cudnn_attention_version() + ", bf16, head size " + std::to_string(C / NH) + ", causal" +
              (attention_ == CudaAttention::kAuto ? " (--attention auto)" : "");
    } else if (attention_ == CudaAttention::kCudnn) {
      c.refused = refused;
    } else {
      c.kernel = "flash";
      c.why = "--attention auto, not cuDNN: " + refused;
    }
    return c;
  }

 private:

  // The flash path's fp32 log-sum-exp rows inside `saved` (any storage type).
  static float* flash_lse(const Tensor& saved, int C, int NH, const char* op) {
    if (!kern::flash_attention_applies(C, NH))
      throw std::runtime_error(std::string("backend/cuda: ") + op + ": flash attention needs head size <= " +
                               std::to_string(kern::flash_mma::kHead) + " (C/NH = " + std::to_string(C / NH) +
                               "); use --attention classic (CudaAttention::kClassic)");
    if (reinterpret_cast<uintptr_t>(saved.ptr) % alignof(float) != 0)
      throw std::runtime_error(std::string("backend/cuda: ") + op + ": saved is not 4-byte aligned");
    return static_cast<float*>(saved.ptr);
  }

  // Runs op `name` for the storage type. Errors name the op; with sync_ops_
  // (CUDA_LAUNCH_BLOCKING=1) the stream is drained after it, so a device fault,
  // which a GPU reports only at a later synchronisation, is charged to this op.
  template <class F>
  void dispatch(const char* name, F&& f) {
    try {
      if (bf16_)
        f(__nv_bfloat16{});
      else
        f(float{});
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("backend/cuda: ") + name + ": " + e.what());
    }
    if (!sync_ops_) return;
    const cudaError_t status = cudaStreamSynchronize(stream_);
    if (status != cudaSuccess)
      throw std::runtime_error(std::string("backend/cuda: ") + name + ": device fault: " + cudaGetErrorString(status) +
                               " (found by the synchronisation after the op, CUDA_LAUNCH_BLOCKING=1)");
  }
  // A parameter / gradient / activation argument: the storage element size.
  void need_x(const Tensor& t, size_t numel, const char* op, const char* arg) const {
    checks_.need_x(t, numel, op, arg);
  }
  void need(const Tensor& t, size_t numel, const char* op, const char* arg, uint32_t elem_bytes) const {
    checks_.need(t, numel, op, arg, elem_bytes);
  }

  void to_device(Tensor dst, const void* src, const char* op) {
    if (dst.numel == 0) return;
    need(dst, dst.numel, op, "dst", dst.elem_bytes == 2 ? 2 : 4);
    CUDA_CHECK(cudaMemcpyAsync(dst.ptr, src, dst.bytes(), cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // the caller may reuse src at once
  }

  float* workspace(size_t floats) {
    if (floats > workspace_floats_) {
      if (workspace_ != nullptr) CUDA_CHECK(cudaFree(workspace_));
      workspace_ = nullptr;
      workspace_floats_ = 0;
      workspace_ = static_cast<float*>(device_malloc(floats * sizeof(float), "the op workspace", "workspace"));
      workspace_floats_ = floats;
    }
    return workspace_;
  }

  // cudaMalloc, or an error naming the bytes, what they were for and what the
  // device had free then (an out-of-memory failure is not sticky: the query
  // still works, and its error is cleared so that no later check reports it).
  void* device_malloc(size_t bytes, const char* what, const char* op) const {
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, bytes);
    if (status == cudaSuccess) return p;
    size_t free_bytes = 0, total = 0;
    const std::string have = cudaMemGetInfo(&free_bytes, &total) == cudaSuccess
                                 ? "; " + std::to_string(free_bytes) + " bytes free of " + std::to_string(total)
                                 : "";
    cudaGetLastError();
    throw std::runtime_error("backend/cuda: " + std::string(op) + ": cudaMalloc of " + std::to_string(bytes) +
                             " bytes for " + what + " failed on GPU " + std::to_string(device_) + ": " +
                             cudaGetErrorString(status) + have + ", " + std::to_string(allocated_bytes_) +
                             " bytes already in the run's buffers (the trainer's --dry-run 1 prints what a run needs)");
  }

  // clip: null, or the device's clip state whose [1] replaces grad_scale (global_norm.cuh)
  void adamw(const AdamWArgs& args, const double* clip) {
    checks_.adamw(args);
    const size_t n = args.params.numel;
    if (n == 0) return;
    const kern::AdamWScalars s = kern::adamw_scalars(args.lr, args.beta1, args.beta2, args.eps, args.weight_decay,
                                                     clip ? 1.0f : args.grad_scale, args.t);
    dispatch("adamw_update", [&](auto tag) {
      using X = decltype(tag);
      kern::adamw_update<X>(as<X>(args.params), args.master.empty() ? nullptr : as<float>(args.master),
                            as<X>(args.grads), as<float>(args.m), as<float>(args.v), n, s, clip, stream_);
    });
  }

  // Destructor path: no throwing, release what exists.
  void release() noexcept {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    cudnn_.reset();
    staging_.release();
    transfers_.release();
    if (workspace_ != nullptr) cudaFree(workspace_);
    if (norm_partials_ != nullptr) cudaFree(norm_partials_);
    if (clip_pinned_ != nullptr) cudaFreeHost(clip_pinned_);
    if (clip_copied_ != nullptr) cudaEventDestroy(clip_copied_);
    clip_pinned_ = nullptr;
    clip_copied_ = nullptr;
    if (blas_.lt_workspace != nullptr) cudaFree(blas_.lt_workspace);
    blas_.lt_plans.clear();  // cached cuBLASLt descriptors, before their handle
    if (blas_.lt != nullptr) cublasLtDestroy(blas_.lt);
    if (blas_.blas != nullptr) cublasDestroy(blas_.blas);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    workspace_ = nullptr;
    norm_partials_ = nullptr;
    blas_ = kern::BlasContext{};
    stream_ = nullptr;
  }

  int device_ = -1;
  bool bf16_ = false;
  CudaAttention attention_ = CudaAttention::kFlash;
  std::unique_ptr<CudnnAttention> cudnn_;  // kAuto / kCudnn with bf16, when cuDNN started
  std::string cudnn_refused_;              // else why not
  bool sync_ops_ = false;  // drain the stream after every op (fault attribution)
  uint32_t storage_bytes_ = 4;  // element size of params, grads, activations
  OpChecks checks_{"backend/cuda", storage_bytes_};
  cudaStream_t stream_ = nullptr;
  kern::BlasContext blas_;
  // sum_squares: a partial per block, then the total in the last slot
  static constexpr size_t kNormPartialsBytes = (kern::kNormMaxBlocks + 1) * sizeof(double);
  double* norm_partials_ = nullptr;
  double* clip_pinned_ = nullptr;      // read_clip: the last clip_scale's values
  cudaEvent_t clip_copied_ = nullptr;  // recorded after they were copied there
  const void* clip_last_ = nullptr;
  float* workspace_ = nullptr;
  size_t workspace_floats_ = 0;
  std::unordered_map<void*, size_t> live_;  // alloc()'s buffers and their bytes
  size_t allocated_bytes_ = 0;
  kern::TokenStaging staging_;
  kern::HostTransfers transfers_;
};

}  // namespace

BackendSizes cuda_backend_sizes(const CudaBackendOptions& options) {
  BackendSizes s;
  s.name = "cuda";
  s.host_memory = false;
  const uint32_t x = options.bf16 ? 2 : 4;
  s.elem_bytes.fill(4);  // optimizer state, tokens, scratch, statistics
  s.elem_bytes[static_cast<size_t>(BufferRole::kScalar64)] = 8;
  for (BufferRole r : {BufferRole::kParams, BufferRole::kGrads, BufferRole::kActivations})
    s.elem_bytes[static_cast<size_t>(r)] = x;  // the storage type, as CudaBackend::alloc
  const CudaAttention a = options.attention;
  s.attention_saved_numel = [a, x](int B, int T, int NH) { return attention_saved_numel_for(a, x, B, T, NH); };
  s.attention_scratch_numel = [a, x](int B, int T, int NH) { return attention_scratch_numel_for(a, x, B, T, NH); };
  return s;
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device / no driver" error
    return 0;
  }
  return count;
}

bool cuda_tf32_default() { return GPT2_EMULATED == 0; }

bool cuda_emulated() { return GPT2_EMULATED != 0; }

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return make_cuda_backend(device, CudaBackendOptions{});
}

std::unique_ptr<Backend> make_cuda_backend(int device, const CudaBackendOptions& options) {
  return std::make_unique<CudaBackend>(device, options);
}

CudaMemoryReport cuda_memory_report(const Backend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  if (cuda == nullptr)
    throw std::runtime_error("cuda_memory_report: the " + backend.name() + " backend is not the CUDA backend");
  return cuda->memory_report();
}

CudaAttentionChoice cuda_attention_choice(Backend& backend, int B, int T, int C, int NH, bool attention_dropout) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (cuda == nullptr)
    throw std::runtime_error("cuda_attention_choice: the " + backend.name() + " backend is not the CUDA backend");
  return cuda->attention_choice(B, T, C, NH, attention_dropout);
}

namespace {
constexpr const char* kAttentionNames[] = {"auto", "cudnn", "flash", "classic"};
}

const char* cuda_attention_name(CudaAttention a) { return kAttentionNames[static_cast<int>(a)]; }

bool parse_cuda_attention(const std::string& name, CudaAttention* out) {
  for (int i = 0; i < 4; i++)
    if (name == kAttentionNames[i]) {
      *out = static_cast<CudaAttention>(i);
      return true;
    }
  return false;
}

CudaPlacement cuda_placement(const Backend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  if (cuda == nullptr)
    throw std::runtime_error("cuda_placement: the " + backend.name() + " backend is not the CUDA backend");
  return cuda->placement();
}

}  // namespace gpt2
