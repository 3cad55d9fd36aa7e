// distributed/comm_nccl.h in a build that found no nccl.h: the CUDA-capable
// trainer still links (one GPU, ZeRO stages 0/1), and whatever needs device
// buffers to travel between ranks is refused with what to do about it.
#include <stdexcept>

#include "distributed/comm_nccl.h"

namespace gpt2 {

// (The trainer's top level prefixes the rank.)
std::unique_ptr<Communicator> make_nccl_communicator(Communicator&, int, void*) {
  throw std::runtime_error("multi-GPU training and ZeRO-2 on a GPU need NCCL, which this binary was built without "
                           "(nccl.h was not found: load NCCL, e.g. set NCCL_HOME, and rebuild)");
}

}  // namespace gpt2
