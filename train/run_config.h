// The trainer's configuration from its options: the batch shape (with the
// global batch a resumed checkpoint carries), the data loader, AdamW and the
// learning-rate schedule, the tokenizer for samples.
#ifndef TRAIN_RUN_CONFIG_H
#define TRAIN_RUN_CONFIG_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dataloader/dataloader.h"
#include "distributed/context.h"
#include "model/config.h"
#include "model/gpt2.h"
#include "tokenizer/tokenizer.h"
#include "train/logger.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"
#include "train/options.h"
#include "train/state_file.h"

namespace gpt2 {

// Micro-batch B x T per rank, and the micro-batches per optimizer step.
struct BatchShape {
  int B = 0, T = 0;
  int64_t total_batch = 0;  // tokens per optimizer step, all ranks
  int grad_accum = 1;
};

// The rank-0 state file header of the checkpoint that --resume would continue
// from, the named one or the newest complete one (read before that checkpoint
// is verified, for the defaults it carries: the global batch). false: no such
// checkpoint.
bool peek_resume_state(const TrainOptions& o, TrainState* st, std::string* path);

// --seq-len capped to the model's max_seq, with the note saying so ("" when
// not capped): training's T (batch_shape) and --eval-only's window.
int capped_seq_len(const TrainOptions& o, const GPT2Config& cfg, std::string* note);

// `stored`: the header of the checkpoint being resumed (nullptr: none), read
// from `stored_path`. Its global batch is the default when --total-batch-tokens
// is not given, so a run resumed on another number of ranks keeps its tokens
// per step (more or fewer micro-batches). A resumed run is checked against it
// here, before anything is allocated.
BatchShape batch_shape(const TrainOptions& o, const GPT2Config& cfg, int world, const TrainState* stored,
                       const std::string& stored_path, TrainLogger& log);
// The one check of a resumed batch: the checkpoint's B, T and global batch
// (tokens per step) are the run's, and the global batch splits into B*T*world
// micro-batches. Run on the planned checkpoint's header (batch_shape) and on
// the one actually loaded (`source` names it in the error).
void check_resumed_batch(const TrainState& st, const BatchShape& s, int world, const std::string& source);

DataLoaderOptions train_loader_options(const TrainOptions& o, const BatchShape& s, const DistContext& dist,
                                       int vocab_size);
// The dropout of a training run and, for the banner, where each rate comes
// from: --dropout's rates, the others the model's, `o.model` being the weights
// the run starts from (--init-from resolved by plan_training_run). A Hugging
// Face directory's config.json gives them (read_hf_dropout); an llm.c model
// file or a dN preset has none: 0.
struct RunDropout {
  DropoutRates rates;
  std::string described;  // "embd 0.1, resid 0.1, attn 0.1 (from DIR/config.json)"
};
RunDropout run_dropout(const TrainOptions& o);

// The dropout masks' Philox seed: --seed's, salted so they draw another stream
// than the init and the samples ("DROPOUT" in ASCII).
constexpr uint64_t kDropoutSeedSalt = 0x44524F504F5554ULL;

AdamWHyper adamw_hyper(const TrainOptions& o);
LrSchedule lr_schedule(const TrainOptions& o, int total_steps);

// The GPT-2 tokenizer, for samples only: without the vocabulary samples print
// token ids (nullptr), unless a --prompt needs encoding.
std::unique_ptr<Tokenizer> load_tokenizer(const TrainOptions& o, TrainLogger& log);

std::string join_tokens(const std::vector<int32_t>& ids);

// Non-finite values of v (and the first one's index).
size_t count_nonfinite(const std::vector<float>& v, size_t* first = nullptr);
// Weights are never loaded with NaN or Inf: every step, and every resume of a
// checkpoint made from them, would fail again. Throws naming `what`.
void require_finite(const std::vector<float>& v, const std::string& what);

}  // namespace gpt2

#endif  // TRAIN_RUN_CONFIG_H
