// What this program can do with a GPU, chosen at link time rather than by
// #ifdef: the CUDA-capable trainers (train_gpt2cu via nvcc, train_gpt2cu_emu)
// link train/device_link_cuda.cpp, CPU-only programs and tests
// train/device_link_none.cpp. Everything CUDA-specific goes through the
// functions below, so the rest of train/ is compiled once and names no backend.
// train/device_link.cpp holds what both share: the choice of a rank's GPU.
#ifndef TRAIN_DEVICE_LINK_H
#define TRAIN_DEVICE_LINK_H

#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/sizing_backend.h"
#include "distributed/comm.h"
#include "distributed/context.h"
#include "train/options.h"

namespace gpt2 {

// The device for cudaSetDevice: dist.local_rank, so each rank of a node has its
// own GPU. More ranks on a node than visible GPUs is refused at start-up rather
// than sharing a GPU (NCCL refuses that later anyway, "Duplicate GPU
// detected", and sharing halves each rank's memory and speed).
// `visible_gpus`: cudaGetDeviceCount; `cuda_visible_devices`: the variable or
// nullptr. Throws std::runtime_error starting with dist.prefix() and naming
// the counts, e.g. "rank 2/3 (node1): 3 ranks on this node but only 2 visible
// GPUs (CUDA_VISIBLE_DEVICES=0,1); ...".
int cuda_device_for_rank(const DistContext& dist, int visible_gpus, const char* cuda_visible_devices);

// --device auto|cuda: the GPU backend on this rank's GPU (cuda_device_for_rank),
// or nullptr under auto when no GPU is visible. --device cuda without a visible
// GPU, or in a binary without the CUDA backend: an error saying which.
std::unique_ptr<Backend> make_gpu_backend(const TrainOptions& o, const DistContext& dist);

// --dry-run: a backend that counts what the GPU backend of --dtype would
// allocate, or nullptr in a binary without one (--device auto plans for the
// CPU then; --device cuda is the same error as above).
std::unique_ptr<SizingBackend> make_gpu_sizing_backend(const TrainOptions& o);

// --tf32 auto: on for the nvcc build on a GPU; off for the emulated trainer
// (whose fp32 runs are compared with the CPU backend) and without CUDA.
bool gpu_tf32_default();

// The communicator for a device backend's buffers: NCCL on the backend's
// device and compute stream, bootstrapped through `host` (collective). An
// error when the binary has no NCCL or the backend is not a GPU one.
std::unique_ptr<Communicator> make_gpu_buffer_communicator(Backend& backend, Communicator& host);

// The banner's attention line for a GPU backend ("" on host memory): the
// kernel --attention picks for calls of this shape and why. Throws UsageError
// when an explicit --attention cudnn cannot serve the run (the reason named).
std::string gpu_attention_line(Backend& backend, const TrainOptions& o, int B, int T, int C, int NH,
                               bool attention_dropout);

// --dry-run: the device workspace that --attention adds beyond the table's
// allocations ("" when none), for B x T of this model.
std::string gpu_attention_workspace_note(const TrainOptions& o, int B, int T, int NH);

// After the first step: device memory in use against the backend's allocations,
// "" on host memory ("X in use (cudaMemGetInfo, N B) = allocations ... + other ...").
std::string gpu_memory_line(const Backend& backend);

}  // namespace gpt2

#endif  // TRAIN_DEVICE_LINK_H
