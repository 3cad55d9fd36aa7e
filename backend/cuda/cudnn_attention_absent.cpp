// backend/cuda/cudnn_attention.h for a build without cuDNN's headers: the
// CUDA backend then runs its own flash kernels, and an explicit
// --attention cudnn is refused with this file's reason.
#include <stdexcept>

#include "backend/cuda/cudnn_attention.h"

namespace gpt2 {

bool cudnn_attention_built() { return false; }

std::string cudnn_attention_version() {
  return "no cuDNN: this binary was built without cudnn_graph.h (set CUDNN_HOME and rebuild)";
}

std::unique_ptr<CudnnAttention> make_cudnn_attention(void*) {
  throw std::runtime_error(cudnn_attention_version());
}


}  // namespace gpt2
