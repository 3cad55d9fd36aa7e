// train/device_link.h, the part every program links: the choice of a rank's GPU.
#include "train/device_link.h"

#include <stdexcept>
#include <string>

namespace gpt2 {

namespace {

std::string visible_devices_note(const char* value) {
  return std::string(" (CUDA_VISIBLE_DEVICES=") + (value != nullptr ? value : "<unset>") + ")";
}

}  // namespace

int cuda_device_for_rank(const DistContext& dist, int visible_gpus, const char* cuda_visible_devices) {
  const std::string who = dist.prefix();  // main's with_rank_prefix then adds nothing
  if (dist.local_world < 1 || dist.local_rank < 0 || dist.local_rank >= dist.local_world)
    throw std::runtime_error(who + "inconsistent node layout: local rank " + std::to_string(dist.local_rank) + " of " +
                             std::to_string(dist.local_world));
  if (visible_gpus < 1) throw std::runtime_error(who + "no visible GPU" + visible_devices_note(cuda_visible_devices));
  if (dist.local_world > visible_gpus)
    throw std::runtime_error(who + std::to_string(dist.local_world) + " ranks on this node but only " +
                             std::to_string(visible_gpus) + " visible GPU" + (visible_gpus == 1 ? "" : "s") +
                             visible_devices_note(cuda_visible_devices) +
                             "; start at most one rank per GPU (every rank of a node must see all its GPUs)");
  return dist.local_rank;
}

}  // namespace gpt2
