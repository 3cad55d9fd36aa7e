// Set-up shared by training and the modes that only run a trained model
// (--eval-only, --generate): the backend chosen by --device/--dtype, and the
// weights named by --model FILE|HF_DIR or --init-from PATH.
// What differs between the CPU-only and the CUDA-capable programs is linked in
// (train/device_link.h), not compiled in.
#ifndef TRAIN_RUN_SETUP_H
#define TRAIN_RUN_SETUP_H

#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/sizing_backend.h"
#include "distributed/context.h"
#include "model/config.h"
#include "model/model_file.h"
#include "train/mfu.h"
#include "train/options.h"

namespace gpt2 {

// --device auto|cpu|cuda and --dtype as training picks them (each rank takes
// the GPU of its local rank); --dtype bf16 on the CPU backend is refused.
std::unique_ptr<Backend> make_run_backend(const TrainOptions& o, const DistContext& dist);

// A backend that allocates nothing but counts what the backend of --device and
// --dtype would (--dry-run): --device auto means the CUDA backend when this
// binary has it (a dry run plans GPU jobs), else the CPU one.
std::unique_ptr<SizingBackend> make_sizing_backend(const TrainOptions& o);

// --tf32 on|off|auto resolved (auto: train/device_link.h's gpu_tf32_default()).
bool tf32_on(const TrainOptions& o);

// The arithmetic the run's backend does, resolved ("fp32 with TF32 GEMMs on
// (--tf32 auto)", "bf16 storage with ..."), for the start-up banner.
std::string describe_precision(const TrainOptions& o, const Backend& backend);

// The peak a step's MFU is held against (train/mfu.h): --peak-tflops, else on
// a GPU its datasheet peak for the run's arithmetic (bf16, TF32 or fp32; none
// for a GPU the table lacks), else the CPU's fp32 FMA peak measured now.
PeakFlops run_peak(const TrainOptions& o, const Backend& backend);

// The model config the options ask for: a dN preset plus --config overrides,
// or a model file's header (*from_file = true).
GPT2Config requested_config(const TrainOptions& o, bool* from_file);

// True when --model names a dN preset (not an existing file or directory).
bool names_preset(const std::string& model);

// --init-from PATH as a --model path: a checkpoint directory (one with
// completion markers) gives its newest complete checkpoint's model file, after
// checking it against the marker's checksum; a model file or a Hugging Face
// directory is used as it is. Anything else is an error naming PATH.
std::string resolve_init_from(const std::string& path);

// The weights a model-only mode loads: --init-from PATH resolved like training
// does (a checkpoint directory means its newest complete checkpoint's model
// file, checked against its marker), else --model FILE|HF_DIR. A dN preset is
// refused: `mode` ("--eval-only") names the mode in the message.
std::string weights_path(const TrainOptions& o, const std::string& mode);

// Micro-batches per optimizer step: total_batch tokens over tokens_per_micro =
// B*T*world, which must divide it into a positive count of at most
// kMaxGradAccum (else an error naming --total-batch-tokens). Training and
// --dry-run use it alike.
constexpr int64_t kMaxGradAccum = int64_t{1} << 20;
int grad_accum_for(int64_t total_batch, int64_t tokens_per_micro);

}  // namespace gpt2

#endif  // TRAIN_RUN_SETUP_H
