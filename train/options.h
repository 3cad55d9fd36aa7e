// The trainer's command line: one table of options drives parsing, validation
// and --help, so the help text cannot drift from what is accepted.
#ifndef TRAIN_OPTIONS_H
#define TRAIN_OPTIONS_H

#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "train/lr_schedule.h"
#include "util/usage_error.h"

namespace gpt2 {

// --device and the element types of --dtype and --save-dtype.
enum class Device { kAuto, kCpu, kCuda };
enum class Precision { kFp32, kBf16 };
const char* device_name(Device d);        // auto | cpu | cuda: the flag's words
const char* precision_name(Precision p);  // fp32 | bf16
std::string format_number(double x);      // as an ostream prints it: 0.1, 1e-08

// AdamW's hyper-parameters (train/optimizer.h's AdamW takes them as given).
struct AdamWHyper {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f;
};

struct TrainOptions {
  // model
  std::string model = "d12";          // dN preset, an llm.c model file or a Hugging Face GPT-2 directory
  std::string config_overrides;       // "n_layer=4,n_head=4,..."
  std::set<std::string> given;        // the long names of the flags the command line set
  std::string init_from;              // weights only: model file, HF directory or checkpoint directory
  // data
  std::string train_data = "data/tinyshakespeare/tiny_shakespeare_train.bin";
  std::string val_data = "data/tinyshakespeare/tiny_shakespeare_val.bin";
  int batch_size = 4;                 // B, per rank per micro-step
  int seq_len = 1024;                 // T (capped by the model's max_seq)
  int64_t total_batch_tokens = -1;    // -1: B*T*world (no accumulation)
  bool no_shuffle = false;
  bool overfit_batch = false;         // --overfit-batch: every step trains on the loader's first batch (llm.c's -a)
  // optimisation
  LrSchedule schedule;                // --lr, --lr-schedule, --warmup-steps, ...; total_steps: the run's length
  AdamWHyper adamw;                   // --beta1, --beta2, --adam-eps, --weight-decay
  float grad_clip = 1.0f;             // <= 0 disables clipping
  int max_steps = -1;                 // -1: one epoch of the training data (0 is refused)
  double epochs = 0;                  // --epochs E (HF's num_train_epochs); 0: not given. --max-steps wins
  // --dropout: HF's embd_pdrop, resid_pdrop, attn_pdrop; -1: the model's rate
  // (an HF directory's config.json; 0 for a model file or a preset)
  float dropout_embd = -1.0f, dropout_resid = -1.0f, dropout_attn = -1.0f;
  bool dropout_given() const { return dropout_embd >= 0.0f || dropout_resid >= 0.0f || dropout_attn >= 0.0f; }
  std::string on_nan = "stop";        // skip | stop
  int max_nan_skips = 10;             // --on-nan skip: consecutive skipped steps before stopping
  double skip_loss_z = 0;             // skip a step whose loss is this many deviations above the window; 0: off
  double skip_grad_z = 0;             // the same for the gradient norm
  int spike_window = 128;             // steps in the spike guards' window (and their warm-up)
  uint64_t seed = 1337;
  // evaluation and sampling
  int val_every = 20;                 // 0 disables
  int val_steps = 20;
  int sample_every = 20;              // 0 disables
  int gen_tokens = 64;
  std::string prompt;
  float temperature = 1.0f;
  int top_k = 0;                      // 0: full distribution
  float top_p = 1.0f;                 // nucleus sampling; 1: off
  // modes other than training
  bool eval_only = false;             // --eval-only: sliding-window perplexity of --val-data
  int eval_stride = 0;                // 0: the context length (disjoint windows)
  std::string eval_json;              // --eval-only: write the result here
  std::string eval_hellaswag;         // HellaSwag JSONL scored at every validation and in --eval-only
  bool generate = false;              // --generate: sample text from the model
  std::string prompt_file;            // --generate: prompt from a file ("-": stdin)
  int num_samples = 1;
  bool no_stop_at_eos = false;        // --generate: keep sampling after <|endoftext|>
  // output
  std::string output_dir;
  int checkpoint_every = 0;           // 0: only at the end
  int keep_checkpoints = 0;           // 0: keep all
  int milestone_every = 0;            // checkpoints at multiples of M are milestones, never pruned; 0: none
  bool keep_best = false;             // keep the checkpoint of the lowest validation loss; export it at the end
  int early_stopping_patience = 0;    // stop after N evaluations without improvement; 0: never
  double early_stopping_threshold = 0;  // an improvement must exceed this to count
  bool resume = false;
  std::string resume_from;            // --resume-from PATH / --resume PATH: a named checkpoint ("": the newest)
  bool overwrite_output_dir = false;  // a fresh run may delete another run's checkpoints in output_dir
  bool resume_fallback = false;       // corrupt newest checkpoint: resume from an older one
  bool reset_schedule = false;        // --resume: lr schedule from the flags, not the checkpoint
  Precision save_dtype = Precision::kFp32;  // of model files
  std::string save_hf;                // also write the final model here as a Hugging Face directory
  std::string log_jsonl;
  // system
  Device device = Device::kAuto;      // auto: CUDA when a GPU is visible, else the CPU
  Precision dtype = Precision::kFp32;  // CUDA storage (bf16: fp32 master weights)
  std::string tf32 = "auto";          // on | off | auto (CUDA fp32 GEMMs on TF32 tensor cores; auto: on a real GPU)
  std::string gelu_fusion = "on";     // on | off (CUDA: the fc layer's GELU in the cuBLASLt GEMM epilogues)
  std::string attention = "auto";     // auto | cudnn | flash | classic (CUDA's attention kernel)
  int threads = 0;                    // 0: OpenMP default
  int zero_stage = 0;                 // 0 | 1 | 2 | 3
  bool offload_optimizer = false;     // --offload-optimizer cpu: AdamW's state and update on the host
  int recompute = 0;                  // 0 | 1 (GELU output recomputed in the backward) | 2 (also layernorm)
  float comm_timeout = 600.0f;        // seconds one collective may wait for its peers; 0: forever
  std::string rendezvous;             // without MPI (torchrun, srun --mpi=none): tcp[:HOST:PORT] or file:DIR
  int profile_first = 0, profile_last = 0;  // --profile-steps A:B (1-based, inclusive); 0: off
  double peak_tflops = 0;             // MFU's denominator per device; 0: the GPU table or the measured CPU peak
  std::string memory_check = "on";    // on | warn | off: the planned memory against what the machine has
  std::vector<int> dry_run_worlds;    // --dry-run W[,W...]: print the memory table at these world sizes
};

// Bad flags or values throw std::runtime_error naming the flag. Returns false
// when --help was printed (the caller exits 0).
bool parse_train_options(int argc, char** argv, TrainOptions* opts);
std::string train_options_help(const char* program);
// "key: value" lines of every option, for the start-of-run banner.
std::vector<std::pair<std::string, std::string>> describe_train_options(const TrainOptions& o);

}  // namespace gpt2

#endif  // TRAIN_OPTIONS_H
