// train/device_link.h for the CUDA-capable trainers: the CUDA backend (a real GPU
// under nvcc, the emulator in train_gpt2cu_emu) and the NCCL communicator (the real
// library, the emulator's, or distributed/comm_nccl_absent.cpp's refusal without nccl.h).
#include <cstdlib>
#include <stdexcept>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cudnn_attention.h"
#include "distributed/comm_nccl.h"
#include "train/device_link.h"
#include "metrics/logger.h"
#include "train/run_plan.h"

namespace gpt2 {

namespace {

CudaBackendOptions cuda_options(const TrainOptions& o) {
  CudaBackendOptions co;
  co.bf16 = o.dtype == Precision::kBf16;
  co.tf32 = tf32_on(o);
  co.cublaslt_gelu = o.gelu_fusion == "on";
  if (!parse_cuda_attention(o.attention, &co.attention))
    throw UsageError("--attention " + o.attention + ": expected auto, cudnn, flash or classic");
  return co;
}

}  // namespace

std::unique_ptr<Backend> make_gpu_backend(const TrainOptions& o, const DistContext& dist) {
  const int gpus = cuda_device_count();
  if (gpus > 0)
    return make_cuda_backend(cuda_device_for_rank(dist, gpus, std::getenv("CUDA_VISIBLE_DEVICES")), cuda_options(o));
  if (o.device == Device::kCuda) throw std::runtime_error("--device cuda: no CUDA device is visible");
  return nullptr;
}

std::unique_ptr<SizingBackend> make_gpu_sizing_backend(const TrainOptions& o) {
  return std::make_unique<SizingBackend>(cuda_backend_sizes(cuda_options(o)));
}

bool gpu_tf32_default() { return cuda_tf32_default(); }

std::unique_ptr<Communicator> make_gpu_buffer_communicator(Backend& backend, Communicator& host) {
  const CudaPlacement at = cuda_placement(backend);
  return make_nccl_communicator(host, at.device, at.stream);
}

std::string gpu_attention_line(Backend& backend, const TrainOptions& o, int B, int T, int C, int NH,
                               bool attention_dropout) {
  if (backend.is_host_memory()) return "";
  if (o.attention == "cudnn" && attention_dropout)
    throw UsageError("--attention cudnn: attention dropout (attn > 0) runs on the flash kernels only, whose masks "
                     "are reproducible; use --attention flash (or auto)");
  const CudaAttentionChoice c = cuda_attention_choice(backend, B, T, C, NH, attention_dropout);
  if (!c.refused.empty()) throw UsageError("--attention cudnn: " + c.refused + "; use --attention flash");
  return c.kernel + " (" + c.why + ")";
}

std::string gpu_attention_workspace_note(const TrainOptions& o, int B, int T, int NH) {
  if (o.dtype != Precision::kBf16 || (o.attention != "auto" && o.attention != "cudnn") || !cudnn_attention_built())
    return "";
  return "cuDNN attention (--attention " + o.attention + "): " + std::to_string(cudnn_row_sum_bytes(B, T, NH)) +
         " B of backward row sums plus its plan's workspace, known once cuDNN builds the plan on the GPU";
}

// The rest of "in use" is the CUDA context and the libraries' own memory (in
// the emulator: nothing, so "other" may come out negative there).
std::string gpu_memory_line(const Backend& backend) {
  if (backend.is_host_memory()) return "";
  const CudaMemoryReport m = cuda_memory_report(backend);
  const size_t known = m.allocated + m.workspace;
  const std::string other = m.device_in_use >= known ? std::to_string(m.device_in_use - known) + " B"
                                                     : "-" + std::to_string(known - m.device_in_use) + " B";
  return format_bytes(static_cast<double>(m.device_in_use)) + " in use (cudaMemGetInfo, " +
         std::to_string(m.device_in_use) + " B) = allocations " + format_bytes(static_cast<double>(m.allocated)) +
         " (" + std::to_string(m.allocated) + " B) + backend workspaces " + std::to_string(m.workspace) +
         " B + other " + other;
}

}  // namespace gpt2
