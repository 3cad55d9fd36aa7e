// The CUDA backend: gpt2::Backend on a GPU (backend/cuda/*.cuh + cuBLAS/cuBLASLt).
// Built by nvcc for a GPU, or by g++ against emu/ (the emulator) for tests:
// build/libbackend_cuda_emu.a. Every buffer is fp32 (tokens int32) unless
// CudaBackendOptions::bf16 is set.
#ifndef BACKEND_CUDA_CUDA_BACKEND_H
#define BACKEND_CUDA_CUDA_BACKEND_H

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/sizing_backend.h"

namespace gpt2 {

// Which causal attention the backend runs (the trainer's --attention).
enum class CudaAttention : uint8_t {
  kAuto,     // cuDNN's fused attention where it serves the call (bf16 storage, a build with
             // cuDNN, no attention dropout, a shape and alignment cuDNN takes), else flash
  kCudnn,    // cuDNN's fused attention (backend/cuda/cudnn_attention.h); a call it cannot
             // serve is an error naming why
  kFlash,    // fused flash-style kernels; saves per-row log-sum-exp only; head size <= 64
  kClassic,  // split heads + cuBLAS GEMMs + softmax kernels; saves P[B,NH,T,T]; any head size
};
// "auto", "cudnn", "flash", "classic"; parse_cuda_attention is its inverse (false: unknown).
const char* cuda_attention_name(CudaAttention a);
bool parse_cuda_attention(const std::string& name, CudaAttention* out);

struct CudaBackendOptions {
  // cuBLASLt with the BIAS / BGRADB epilogues for the linear layers; false
  // selects the plain cuBLAS path (bias and bias gradient by kernels). Any call
  // cuBLASLt refuses (no algorithm, e.g. for operands under 16-byte alignment)
  // falls back to cuBLAS plus kernels computing the same (backend/cuda/matmul.cuh).
  bool use_cublaslt = true;
  // With cuBLASLt and fp32 storage: the bias gradient from the BGRADB epilogue
  // of the dw GEMM; false computes it with the column-sum kernels (also the
  // automatic fallback, and always the bf16 path: BGRADB's vector would be bf16
  // and round the sum before it is added to dbias).
  bool cublaslt_bias_grad = true;
  // With cuBLASLt: the fc layer's GELU in its GEMM's epilogue (GELU_AUX_BIAS) and
  // the GELU backward in the fcproj dinp GEMM's (DGELU), saving a pass over the
  // 4C-wide activations each way; false runs the GELU kernels (also the
  // automatic fallback when cuBLASLt refuses the epilogue).
  bool cublaslt_gelu = true;
  // Storage precision of parameters, gradients and activations: fp32, or bf16
  // with fp32 arithmetic (optimizer moments, master weights, scratch, token
  // ids stay 4-byte). With bf16, pass an fp32 (kOptimizer) `master` to
  // adamw_update so the weights do not lose the small updates to rounding.
  bool bf16 = false;
  // fp32 storage only: the GEMMs (linear layers, classic attention) and the flash
  // attention kernels may run on TF32 tensor cores (inputs rounded to a 10-bit
  // mantissa, fp32 accumulation): CUBLAS_COMPUTE_32F_FAST_TF32 for cublasGemmEx
  // and cuBLASLt, the handle's math mode CUBLAS_TF32_TENSOR_OP_MATH, and tf32
  // mma.sync in backend/cuda/flash_tiles.cuh. About 1e-3 relative error per
  // product sum, several times the fp32 throughput. Off, flash attention runs
  // 3xTF32 (fp32 accuracy on tensor cores). Off by default here (results
  // comparable with the CPU backend); the trainer's --tf32 auto turns it on for a
  // real GPU (cuda_tf32_default()). Ignored with bf16 storage.
  bool tf32 = false;
  // Synchronise and check the stream after every op, so a device fault names
  // the op that caused it (slow; for debugging). Also on with CUDA_LAUNCH_BLOCKING=1.
  bool sync_after_ops = false;
  // Attention implementation; fixed at construction (attention_saved_numel and
  // attention_scratch_numel depend on it). Flash refuses head sizes above 64;
  // cuDNN and flash keep the same `saved` (the rows' log-sum-exp), so kAuto can
  // pick per call. kCudnn with fp32 storage, or in a build without cuDNN, throws.
  CudaAttention attention = CudaAttention::kFlash;
  // cuBLASLt workspace.
  size_t cublaslt_workspace_bytes = size_t{32} << 20;
};

// What a CUDA backend with these options allocates (element sizes per role,
// attention buffers), for a SizingBackend: needs no GPU.
BackendSizes cuda_backend_sizes(const CudaBackendOptions& options);

// Visible CUDA devices; 0 when there is no GPU or no usable driver (never throws),
// so `--device auto` can fall back to the CPU backend.
int cuda_device_count();

// What --tf32 auto means: true for the backend built by nvcc for a GPU, false for
// the emulated build (so the emulated trainer stays comparable with the CPU one).
bool cuda_tf32_default();

// Whether this backend runs on the emulator (emu/): tests that pin what only
// the emulator's models fix (cuDNN's plan workspace, its head-size limit) ask.
bool cuda_emulated();

// Throws std::runtime_error when the device does not exist.
std::unique_ptr<Backend> make_cuda_backend(int device);
std::unique_ptr<Backend> make_cuda_backend(int device, const CudaBackendOptions& options);

// Where a CUDA backend works: its device index and its compute stream (a
// cudaStream_t), on which every op is queued. The NCCL communicator enqueues
// its collectives on that stream so they are ordered with the backend's
// kernels. Throws std::runtime_error for any other backend.
struct CudaPlacement {
  int device = -1;
  void* stream = nullptr;
};

// A CUDA backend's device memory: what its alloc() handed out and has not
// freed (the --dry-run table's total), what it holds itself (cuBLASLt's
// workspace, the op workspace as grown so far, the norm partials), and
// cudaMemGetInfo's total - free for its device, which on a GPU also counts the
// CUDA context, the libraries' own memory and anything else on the device.
struct CudaMemoryReport {
  size_t allocated = 0, workspace = 0, device_in_use = 0;
};
CudaMemoryReport cuda_memory_report(const Backend& backend);  // throws for another backend
CudaPlacement cuda_placement(const Backend& backend);

// The attention kernel a CUDA backend runs for calls of this shape, and why:
// kernel "cudnn", "flash" or "classic"; `why` a phrase for the banner ("bf16,
// head size 64, no attention dropout"). With kCudnn, `refused` holds the
// reason cuDNN cannot serve (then kernel is "" and the call would throw).
// Builds and caches cuDNN's plans for the shape. Throws for another backend.
struct CudaAttentionChoice {
  std::string kernel, why, refused;
};
CudaAttentionChoice cuda_attention_choice(Backend& backend, int B, int T, int C, int NH, bool attention_dropout);

}  // namespace gpt2

#endif  // BACKEND_CUDA_CUDA_BACKEND_H
