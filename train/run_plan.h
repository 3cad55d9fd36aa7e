// The run plan, worked out from the options before anything is allocated: the
// backend and weights (shared with the model-only modes --eval-only and
// --generate, which assemble them as TrainedModel; the CPU-only and
// CUDA-capable programs differ in what is linked in: train/device_link.h), the
// run's pieces from its flags, and RunPlan, all of it for one world size, with
// RunAssembly, the parts built on it. Training, --dry-run and the memory check
// before training build the same plan and parts: what --dry-run prints is what
// training allocates.
#ifndef TRAIN_RUN_PLAN_H
#define TRAIN_RUN_PLAN_H

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/sizing_backend.h"
#include "dataloader/dataloader.h"
#include "distributed/comm.h"
#include "distributed/context.h"
#include "model/config.h"
#include "model/gpt2.h"
#include "model_io/model_file.h"
#include "tokenizer/tokenizer.h"
#include "train/data_parallel.h"
#include "metrics/logger.h"
#include "train/lr_schedule.h"
#include "metrics/mfu.h"
#include "train/optimizer.h"
#include "train/options.h"
#include "train/state_file.h"

namespace gpt2 {

// ---------------------------------------------------------------- backend and weights

// --device auto|cpu|cuda and --dtype as training picks them (each rank takes
// the GPU of its local rank); --dtype bf16 on the CPU backend is refused.
std::unique_ptr<Backend> make_run_backend(const TrainOptions& o, const DistContext& dist);

// Counts without allocating what the --device/--dtype backend would (--dry-run);
// --device auto: CUDA when built in (a dry run plans GPU jobs), else CPU;
// `on_host`: the CPU backend whatever --device says.
std::unique_ptr<SizingBackend> make_sizing_backend(const TrainOptions& o, bool on_host = false);

// --tf32 on|off|auto resolved (auto: train/device_link.h's gpu_tf32_default()).
bool tf32_on(const TrainOptions& o);

// The arithmetic the run's backend does, resolved ("fp32 with TF32 GEMMs on
// (--tf32 auto)", "bf16 storage with ..."), for the start-up banner.
std::string describe_precision(const TrainOptions& o, const Backend& backend);

// The peak a step's MFU is held against (metrics/mfu.h): --peak-tflops, else on
// a GPU its datasheet peak for the run's arithmetic (bf16, TF32 or fp32; none
// for a GPU the table lacks), else the CPU's fp32 FMA peak measured now.
PeakFlops run_peak(const TrainOptions& o, const Backend& backend);

// The model config asked for: a dN preset plus --config overrides, or a model
// file's header (*from_file = true).
GPT2Config requested_config(const std::string& model, const std::string& overrides, bool* from_file);

// True when --model names a dN preset (not an existing file or directory).
bool names_preset(const std::string& model);

// --init-from PATH as a --model path: a checkpoint directory (one with markers)
// gives its newest complete checkpoint's model file, checked against its marker;
// a model file or HF directory is used as is; anything else is an error naming PATH.
std::string resolve_init_from(const std::string& path);

// The weights a model-only mode loads: --init-from resolved as above, else
// --model FILE|HF_DIR. A dN preset is refused, naming `mode` ("--eval-only").
std::string weights_path(const TrainOptions& o, const std::string& mode);

// The model-only modes' one assembly: the --device/--dtype backend and the
// weights of weights_path(o, mode); load(B, T) builds a forward-only model
// (ModelOptions::forward_only: no gradient, optimizer or backward memory) for batches up
// to B x T and releases the host copy of the parameters.
struct TrainedModel {
  TrainedModel(const TrainOptions& o, const DistContext& dist, const std::string& mode);
  GPT2& load(int B, int T);
  std::unique_ptr<Backend> backend;
  std::string path;
  ModelFile weights;
  std::unique_ptr<GPT2> model;
};

// Micro-batches per optimizer step: total_batch / tokens_per_micro (B*T*world),
// which must divide it into 1..kMaxGradAccum (else an error naming
// --total-batch-tokens). Training and --dry-run use it alike.
constexpr int64_t kMaxGradAccum = int64_t{1} << 20;
int grad_accum_for(int64_t total_batch, int64_t tokens_per_micro);

// ---------------------------------------------------------------- the pieces from the options

// Micro-batch B x T per rank, and the micro-batches per optimizer step.
struct BatchShape {
  int B = 0, T = 0;
  int64_t total_batch = 0;  // tokens per optimizer step, all ranks
  int grad_accum = 1;
};

// The rank-0 state file header of the checkpoint --resume would continue (the
// named or newest complete one), read before it is verified, for the global
// batch it carries, and its path in *path. None: no such checkpoint.
std::optional<TrainState> peek_resume_state(const TrainOptions& o, std::string* path);

// --seq-len capped to the model's max_seq, with the note saying so ("" when
// not capped): training's T (RunPlan::at_world) and --eval-only's window.
int capped_seq_len(const TrainOptions& o, const GPT2Config& cfg, std::string* note);

// The one check of a resumed batch: the checkpoint's B, T and global batch are
// the run's, and the global batch splits into B*T*world micro-batches. Run on
// the planned checkpoint's header (RunPlan::at_world) and on the loaded one (`source` names it).
void check_resumed_batch(const TrainState& st, const BatchShape& s, int world, const std::string& source);

DataLoaderOptions train_loader_options(const TrainOptions& o, const BatchShape& s, const DistContext& dist,
                                       int vocab_size);
// A training run's dropout and, for the banner, each rate's source: --dropout's
// rates, the rest those of `model` (RunPlan::model: --init-from resolved):
// a HF directory's config.json (read_hf_dropout); an llm.c
// model file or dN preset has none: 0.
struct RunDropout {
  DropoutRates rates;
  std::string described;  // "embd 0.1, resid 0.1, attn 0.1 (from DIR/config.json)"
};
RunDropout run_dropout(const TrainOptions& o, const std::string& model);

// The dropout masks' Philox seed: --seed's, salted so they draw another stream
// than the init and the samples ("DROPOUT" in ASCII).
constexpr uint64_t kDropoutSeedSalt = 0x44524F504F5554ULL;

// Non-finite values of v (and the first one's index).
size_t count_nonfinite(const std::vector<float>& v, size_t* first = nullptr);
// Weights are never loaded with NaN or Inf: every step, and every resume of a
// checkpoint made from them, would fail again. Throws naming `what`.
void require_finite(const std::vector<float>& v, const std::string& what);

// ---------------------------------------------------------------- the run length

// A training run's optimizer steps: a positive --max-steps N (it overrides
// --epochs, as in HF's Trainer), else --epochs E (HF's num_train_epochs,
// fractional), else one epoch.
struct RunLength {
  int steps = 0;
  std::string why;  // for the banner: "--epochs 2.5 = ceil(2.5 x 120 steps/epoch)"
};

// max_steps -1 / epochs 0: flag not given; steps_per_epoch: optimizer steps per
// pass over the training data at this global batch. --epochs E takes
// ceil(E x steps_per_epoch) steps (HF's math.ceil(num_train_epochs *
// num_update_steps_per_epoch)); under one step or over 2^30 is an error.
RunLength run_length(int max_steps, double epochs, int64_t steps_per_epoch);

// ---------------------------------------------------------------- the plan and its parts

struct RunPlan {
  explicit RunPlan(const TrainOptions& o) : opts(o) {}
  const TrainOptions& opts;  // as given; they outlive the plan
  std::string model;         // --model, or --init-from resolved to its model file or directory
  GPT2Config cfg;            // a dN preset with --config, or the --model file's header
  bool cfg_from_file = false;
  ParamLayout layout;
  int world = 1;
  BatchShape shape;          // B, T (capped to max_seq), tokens per step, micro-batches per step
  std::optional<TrainState> resume_state;  // header of the checkpoint --resume is expected to pick
  std::string resume_state_path;           // its rank-0 state file

  bool buffers_travel() const { return DataParallel::buffers_travel(world, opts.zero_stage); }
  // The same run at world size w: only the batch shape is worked out again
  // (a resumed global batch splits differently); nothing is read again. The
  // resumed checkpoint's global batch is the default without
  // --total-batch-tokens, so a run resumed on another number of ranks keeps
  // its tokens per step, and the run is checked against it before anything
  // is allocated.
  RunPlan at_world(int w, TrainLogger& log) const;
};

// Notes on what the plan changed (the --seq-len cap, the resumed global batch)
// go to `log`. Throws for an invalid combination (UsageError for flags).
RunPlan plan_training_run(const TrainOptions& o, int world, TrainLogger& log);

// The parts a run of `plan` builds on `backend`, in the one order every run
// uses: DataParallel (ZeRO plan, gradient placement), the model (allocated as
// it says), AdamW on this rank's shard (fp32 master weights reserved for bf16),
// one deferred-loss slot per micro-batch. `buffers`: as DataParallel's; --dry-run
// passes a communicator that only knows its world.
// `offload_host` (--offload-optimizer cpu): the host backend AdamW keeps its
// state on, the CPU backend in training and one that counts for --dry-run.
struct RunAssembly {
  RunAssembly(Backend& backend, Communicator& buffers, const RunPlan& plan,
              std::unique_ptr<Backend> offload_host = nullptr);
  std::unique_ptr<Backend> offload_host;
  DataParallel dp;
  GPT2 model;
  AdamW optimizer;
};

}  // namespace gpt2

#endif  // TRAIN_RUN_PLAN_H
