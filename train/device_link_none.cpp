// train/device_link.h for the programs built without the CUDA backend.
#include <stdexcept>

#include "train/device_link.h"

namespace gpt2 {

namespace {

void refuse_cuda(const TrainOptions& o) {
  if (o.device == Device::kCuda)
    throw std::runtime_error("--device cuda: this binary was built without the CUDA backend (nvcc not found at build time)");
}

}  // namespace

std::unique_ptr<Backend> make_gpu_backend(const TrainOptions& o, const DistContext&) {
  refuse_cuda(o);
  return nullptr;
}

std::unique_ptr<SizingBackend> make_gpu_sizing_backend(const TrainOptions& o) {
  refuse_cuda(o);
  return nullptr;
}

bool gpu_tf32_default() { return false; }

std::unique_ptr<Communicator> make_gpu_buffer_communicator(Backend& backend, Communicator&) {
  throw std::runtime_error("the " + backend.name() + " backend needs a device communicator, which this binary lacks");
}

std::string gpu_memory_line(const Backend&) { return ""; }

std::string gpu_attention_line(Backend&, const TrainOptions&, int, int, int, int, bool) { return ""; }

std::string gpu_attention_workspace_note(const TrainOptions&, int, int, int) { return ""; }

}  // namespace gpt2
