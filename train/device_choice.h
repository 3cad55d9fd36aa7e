// Which CUDA device a rank trains on. Local rank r of a node takes device r, so
// every rank of a node has its own GPU; more ranks on a node than visible GPUs is
// refused at start-up instead of wrapping two ranks onto one GPU (NCCL refuses
// that later anyway, with "Duplicate GPU detected", and a shared GPU would halve
// each rank's memory and speed).
#ifndef TRAIN_DEVICE_CHOICE_H
#define TRAIN_DEVICE_CHOICE_H

#include "distributed/context.h"

namespace gpt2 {

// The device index for cudaSetDevice: dist.local_rank. `visible_gpus` is this
// process's cudaGetDeviceCount, `cuda_visible_devices` the variable as set (or
// nullptr). Throws std::runtime_error starting with dist.prefix() and naming the
// counts, e.g. "rank 2/3 (node1): 3 ranks on this node but only 2 visible GPUs
// (CUDA_VISIBLE_DEVICES=0,1); ...".
int cuda_device_for_rank(const DistContext& dist, int visible_gpus, const char* cuda_visible_devices);

}  // namespace gpt2

#endif  // TRAIN_DEVICE_CHOICE_H
