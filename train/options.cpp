#include "train/options.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "distributed/rendezvous.h"
#include "train/checkpoint.h"
#include "train/run_plan.h"

namespace gpt2 {

namespace {

struct OptionSpec {
  const char* long_name;   // without "--"
  char short_name;         // 0 if none
  const char* value_name;  // nullptr for boolean switches
  const char* help;
  // Applies the value (nullptr for switches) to the options; may throw.
  std::function<void(TrainOptions&, const char*)> apply;
  // Renders the current value for the banner.
  std::function<std::string(const TrainOptions&)> show;
  // A switch whose value may follow it ("--resume" or "--resume PATH"): the
  // next word is its value unless it starts with '-'. apply gets nullptr without one.
  bool optional_value = false;
  // Read by training alone: --eval-only and --generate refuse it rather than ignore it.
  bool training_only = false;
};

OptionSpec training_only(OptionSpec spec) {
  spec.training_only = true;
  return spec;
}

[[noreturn]] void bad_value(const std::string& flag, const char* v, const std::string& expect) {
  throw std::runtime_error("--" + flag + ": invalid value '" + std::string(v) + "' (expected " + expect + ")");
}

int64_t parse_int(const std::string& flag, const char* v, int64_t lo, int64_t hi) {
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (errno || end == v || *end != '\0') bad_value(flag, v, "an integer");
  if (x < lo || x > hi)
    bad_value(flag, v, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

// The items of a comma-separated list, empty ones included ("8," has an empty
// last item, which the item's parser refuses).
std::vector<std::string> comma_items(const std::string& list) {
  std::vector<std::string> items;
  size_t pos = 0;
  for (size_t comma; (comma = list.find(',', pos)) != std::string::npos; pos = comma + 1)
    items.push_back(list.substr(pos, comma - pos));
  items.push_back(list.substr(pos));
  return items;
}

// --dry-run's list: comma-separated world sizes in [1, 1<<20].
std::vector<int> parse_worlds(const char* v) {
  std::vector<int> worlds;
  for (const std::string& item : comma_items(v))
    worlds.push_back(static_cast<int>(parse_int("dry-run", item.c_str(), 1, 1 << 20)));
  return worlds;
}

double parse_double(const std::string& flag, const char* v, double lo, double hi) {
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(v, &end);
  if (errno || end == v || *end != '\0' || !std::isfinite(x)) bad_value(flag, v, "a number");
  if (x < lo || x > hi) {
    std::ostringstream s;
    s << "a number in [" << lo << ", " << hi << "]";
    bad_value(flag, v, s.str());
  }
  return x;
}

// --resume [PATH] and --resume-from PATH: resume, from the named checkpoint when given.
void set_resume(TrainOptions& o, const char* path) {
  o.resume = true;
  if (!path) return;
  if (*path == '\0') throw std::runtime_error("--resume-from: empty path");
  o.resume_from = path;
}

constexpr std::pair<const char*, Device> kDevices[] = {
    {"auto", Device::kAuto}, {"cpu", Device::kCpu}, {"cuda", Device::kCuda}};
constexpr std::pair<const char*, Precision> kPrecisions[] = {{"fp32", Precision::kFp32}, {"bf16", Precision::kBf16}};

// The value of a flag's word, from its table of (word, value).
template <typename E, size_t N>
E enum_choice(const std::string& flag, const char* v, const std::pair<const char*, E> (&words)[N]) {
  std::string all;
  for (const auto& [word, value] : words) {
    if (std::string(v) == word) return value;
    all += (all.empty() ? "" : ", ") + std::string(word);
  }
  bad_value(flag, v, "one of " + all);
}

// A flag whose value is one of `allowed`, kept as its word.
template <size_t N>
std::string choice(const std::string& flag, const char* v, const char* const (&allowed)[N]) {
  std::pair<const char*, const char*> words[N];
  for (size_t i = 0; i < N; i++) words[i] = {allowed[i], allowed[i]};
  return enum_choice(flag, v, words);
}

template <typename E, size_t N>
const char* enum_word(E e, const std::pair<const char*, E> (&words)[N]) {
  for (const auto& [word, value] : words)
    if (value == e) return word;
  return "?";
}

// --dropout's sites, in the order of its rates in TrainOptions.
constexpr const char* kDropoutSites[3] = {"embd", "resid", "attn"};

// One rate of --dropout, in [0, 1) as a float; `part` is the text an error names.
float dropout_rate(const std::string& text, const std::string& part) {
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(text.c_str(), &end);
  const float p = static_cast<float>(x) + 0.0f;  // (-0 reads as 0)
  if (errno || end == text.c_str() || *end != '\0' || !(p >= 0.0f && p < 1.0f))
    bad_value("dropout", part.c_str(), "a rate in [0, 1)");
  return p;
}

// --dropout P sets the three rates; --dropout embd=P,resid=P,attn=P those it
// names (the others stay the model's). One list, like --config.
void set_dropout(TrainOptions& o, const char* v) {
  float* rates[3] = {&o.dropout_embd, &o.dropout_resid, &o.dropout_attn};
  if (o.dropout_given())
    throw std::runtime_error(std::string("--dropout given twice (then '") + v +
                             "'): give every rate in one list, e.g. --dropout embd=0.1,resid=0.1,attn=0");
  const std::string list = v;
  if (list.find('=') == std::string::npos) {
    const float p = dropout_rate(list, list);
    for (float* r : rates) *r = p;
    return;
  }
  for (const std::string& part : comma_items(list)) {  // "attn=0.1," has an empty item: an error
    const size_t eq = part.find('=');
    int site = 0;
    while (site < 3 && part.substr(0, eq) != kDropoutSites[site]) site++;
    if (eq == std::string::npos || site == 3)
      bad_value("dropout", part.c_str(), "P, or K=P items with K one of embd, resid, attn");
    if (*rates[site] >= 0.0f) throw std::runtime_error("--dropout: '" + part.substr(0, eq) + "' given twice");
    *rates[site] = dropout_rate(part.substr(eq + 1), part);
  }
}

std::string show_dropout(const TrainOptions& o) {
  if (!o.dropout_given()) return "from the model";
  const float rates[3] = {o.dropout_embd, o.dropout_resid, o.dropout_attn};
  std::string s;
  for (int i = 0; i < 3; i++)
    s += std::string(i ? "," : "") + kDropoutSites[i] + "=" + (rates[i] < 0.0f ? "model" : format_number(rates[i]));
  return s;
}

// --profile-steps A:B: 1 <= A <= B, steps as the log numbers them.
void set_profile_steps(TrainOptions& o, const char* v) {
  const std::string s = v;
  const size_t colon = s.find(':');
  if (colon == std::string::npos) bad_value("profile-steps", v, "A:B, the first and last step to capture");
  o.profile_first = static_cast<int>(parse_int("profile-steps", s.substr(0, colon).c_str(), 1, 1 << 30));
  o.profile_last = static_cast<int>(parse_int("profile-steps", s.substr(colon + 1).c_str(), 1, 1 << 30));
  if (o.profile_last < o.profile_first) bad_value("profile-steps", v, "A:B with A <= B");
}

constexpr int64_t kBig = 1LL << 40;

#define STR(field) [](TrainOptions& o, const char* v) { o.field = v; }, [](const TrainOptions& o) { return o.field; }
#define INT(field, flag, lo, hi) \
  [](TrainOptions& o, const char* v) { o.field = parse_int(flag, v, lo, hi); }, \
  [](const TrainOptions& o) { return std::to_string(o.field); }
#define FLT(field, flag, lo, hi) \
  [](TrainOptions& o, const char* v) { o.field = parse_double(flag, v, lo, hi); }, \
  [](const TrainOptions& o) { return format_number(o.field); }
#define FLAG(field) \
  [](TrainOptions& o, const char*) { o.field = true; }, \
  [](const TrainOptions& o) { return std::string(o.field ? "yes" : "no"); }

const std::vector<OptionSpec>& option_table() {
  static const std::vector<OptionSpec> table = {
      // model
      {"model", 0, "dN|PATH", "d12 (124M), d24 (350M), d36 (774M), d48 (1558M), any dN (64N channels, N heads), an llm.c model file (v3 fp32 / v5 bf16), or a Hugging Face GPT-2 directory (config.json + model.safetensors, as save_pretrained writes it) [d12]", [](TrainOptions& o, const char* v) { o.model = v; }, [](const TrainOptions& o) { return o.model; }},
      {"init-from", 0, "PATH", "start a new run from these weights only (fresh optimizer, lr schedule and data position): an llm.c model file, a Hugging Face GPT-2 directory, or a checkpoint directory (its newest complete checkpoint's model file); not with --model", STR(init_from)},
      {"config", 0, "K=V,...", "overrides on the dN preset: n_layer, n_head, n_embd, max_seq, vocab_size, padded_vocab_size (one list; a second --config is an error)", [](TrainOptions& o, const char* v) { if (!o.config_overrides.empty()) throw std::runtime_error("--config given twice ('" + o.config_overrides + "', then '" + v + "'): give every override in one list, e.g. --config " + o.config_overrides + "," + v); o.config_overrides = v; }, [](const TrainOptions& o) { return o.config_overrides; }},
      training_only({"dropout", 0, "P|K=P,...", "dropout in training forwards (HF's embd_pdrop, resid_pdrop, attn_pdrop; inverted, never in evaluation or generation): P sets all three, embd=P,resid=P,attn=P those named, the others staying the model's; each in [0, 1). The model's: a Hugging Face directory's config.json (0.1 where a key is absent, as from_pretrained), 0 for an llm.c model file or a dN preset [from the model]", [](TrainOptions& o, const char* v) { set_dropout(o, v); }, show_dropout}),
      // data
      training_only({"train-data", 0, "GLOB", "training token shards (file, glob or comma list) [data/tinyshakespeare/tiny_shakespeare_train.bin]", STR(train_data)}),
      {"val-data", 0, "GLOB", "validation token shards [data/tinyshakespeare/tiny_shakespeare_val.bin]", STR(val_data)},
      {"batch-size", 'B', "N", "micro-batch size per rank [4]", INT(batch_size, "batch-size", 1, 1 << 20)},
      {"seq-len", 'T', "N", "sequence length (<= the model's max_seq) [1024]", INT(seq_len, "seq-len", 1, 1 << 20)},
      training_only({"total-batch-tokens", 0, "N", "tokens per optimizer step over all ranks; a multiple of B*T*world sets gradient accumulation [B*T*world]", INT(total_batch_tokens, "total-batch-tokens", -1, kBig)}),
      training_only({"no-shuffle", 0, nullptr, "read training shards sequentially from token 0 (default: seeded shuffle of shards and samples)", FLAG(no_shuffle)}),
      training_only({"overfit-batch", 0, nullptr, "debugging a set-up (llm.c's -a): every step trains on the first batch of the training data, so the loss must fall towards zero", FLAG(overfit_batch)}),
      // optimisation
      training_only({"lr", 0, "X", "peak learning rate [3e-4]", FLT(schedule.max_lr, "lr", 0.0, 10.0)}),
      training_only({"lr-schedule", 0, "NAME", "cosine | linear | constant | wsd [cosine]", [](TrainOptions& o, const char* v) { o.schedule.kind = enum_choice("lr-schedule", v, kLrScheduleKinds); }, [](const TrainOptions& o) { return std::string(LrSchedule::kind_name(o.schedule.kind)); }}),
      training_only({"warmup-steps", 0, "N", "linear warmup steps [0]", INT(schedule.warmup_steps, "warmup-steps", 0, 1 << 30)}),
      training_only({"final-lr-frac", 0, "X", "final lr as a fraction of the peak [0.1]", FLT(schedule.final_frac, "final-lr-frac", 0.0, 1.0)}),
      training_only({"wsd-decay-frac", 0, "X", "wsd: fraction of the post-warmup steps spent cooling down [0.2]", FLT(schedule.wsd_decay_frac, "wsd-decay-frac", 0.0, 1.0)}),
      training_only({"weight-decay", 0, "X", "AdamW decoupled weight decay on matmul weights and embeddings [0]", FLT(adamw.weight_decay, "weight-decay", 0.0, 10.0)}),
      training_only({"beta1", 0, "X", "AdamW beta1 [0.9]", FLT(adamw.beta1, "beta1", 0.0, 0.999999)}),
      training_only({"beta2", 0, "X", "AdamW beta2 [0.95]", FLT(adamw.beta2, "beta2", 0.0, 0.999999)}),
      training_only({"adam-eps", 0, "X", "AdamW epsilon, in (0, 1] (0 divides by a zero second moment) [1e-8]", [](TrainOptions& o, const char* v) { o.adamw.eps = parse_double("adam-eps", v, -1e30, 1e30); if (!(o.adamw.eps > 0.0f && o.adamw.eps <= 1.0f)) bad_value("adam-eps", v, "a number in (0, 1]"); }, [](const TrainOptions& o) { return format_number(o.adamw.eps); }}),
      training_only({"grad-clip", 0, "X", "clip the global gradient norm to X; 0 disables [1.0]", FLT(grad_clip, "grad-clip", 0.0, 1e9)}),
      training_only({"max-steps", 0, "N", "optimizer steps (in all, counting those before a --resume); -1 = as many as --epochs means, one epoch of the training data without it [-1]", [](TrainOptions& o, const char* v) { o.max_steps = static_cast<int>(parse_int("max-steps", v, -1, 1 << 30)); if (o.max_steps == 0) throw std::runtime_error("--max-steps must be positive, or -1 for one epoch"); }, [](const TrainOptions& o) { return std::to_string(o.max_steps); }}),
      training_only({"epochs", 0, "E", "train E passes over the training data (fractional: HF's num_train_epochs), ceil(E x steps per epoch) steps at this global batch, as the banner says; the lr schedule spans them. A positive --max-steps overrides it, as in HF [one epoch]", [](TrainOptions& o, const char* v) { o.epochs = parse_double("epochs", v, -HUGE_VAL, HUGE_VAL); if (!(o.epochs > 0.0 && o.epochs <= 1e6)) bad_value("epochs", v, "a number in (0, 1e6]"); }, [](const TrainOptions& o) { return format_number(o.epochs); }}),
      training_only({"on-nan", 0, "skip|stop", "non-finite loss or gradient norm: skip the update, or stop with an error (checkpoints kept) [stop]", [](TrainOptions& o, const char* v) { o.on_nan = choice("on-nan", v, {"skip", "stop"}); }, [](const TrainOptions& o) { return o.on_nan; }}),
      training_only({"max-nan-skips", 0, "N", "--on-nan skip: stop with an error after N consecutive skipped steps [10]", INT(max_nan_skips, "max-nan-skips", 1, 1 << 30)}),
      training_only({"skip-loss-z", 0, "Z", "spike guard (llm.c's -sl): a step whose loss is more than Z standard deviations above the mean of the last --spike-window steps' losses is not applied (weights, AdamW moments and step count untouched; its data consumed); 0 = off [0]", [](TrainOptions& o, const char* v) { o.skip_loss_z = parse_double("skip-loss-z", v, 0.0, 1e6); }, [](const TrainOptions& o) { return format_number(o.skip_loss_z); }}),
      training_only({"skip-grad-z", 0, "Z", "the same for the gradient norm (llm.c's -sg); 0 = off [0]", [](TrainOptions& o, const char* v) { o.skip_grad_z = parse_double("skip-grad-z", v, 0.0, 1e6); }, [](const TrainOptions& o) { return format_number(o.skip_grad_z); }}),
      training_only({"spike-window", 0, "W", "steps the spike guards' mean and deviation cover; none is skipped before W steps have filled it (warm-up) [128]", INT(spike_window, "spike-window", 2, 1 << 20)}),
      {"seed", 0, "N", "seed for init, data shuffling, sampling and the dropout masks [1337]", INT(seed, "seed", 0, kBig)},
      // evaluation and sampling
      training_only({"val-every", 0, "N", "validation every N steps and at the end; 0 disables [20]", INT(val_every, "val-every", 0, 1 << 30)}),
      training_only({"val-steps", 0, "N", "batches per validation [20]", INT(val_steps, "val-steps", 1, 1 << 30)}),
      training_only({"sample-every", 0, "N", "generate a sample every N steps and at the end; 0 disables [20]", INT(sample_every, "sample-every", 0, 1 << 30)}),
      {"gen-tokens", 0, "N", "tokens per sample [64]", INT(gen_tokens, "gen-tokens", 1, 1 << 20)},
      {"prompt", 0, "TEXT", "sample prompt (default: start from <|endoftext|>)", STR(prompt)},
      {"temperature", 0, "X", "sampling temperature [1.0]", FLT(temperature, "temperature", 1e-6, 100.0)},
      {"top-k", 0, "N", "sample from the top k tokens; 0 = all [0]", INT(top_k, "top-k", 0, 1 << 30)},
      {"top-p", 0, "P", "nucleus sampling: the smallest set of most probable tokens (after --temperature and --top-k) whose probability reaches P, renormalised; 1 = off [1.0]", [](TrainOptions& o, const char* v) { o.top_p = parse_double("top-p", v, -1e30, 1e30); if (!(o.top_p > 0.0f && o.top_p <= 1.0f)) bad_value("top-p", v, "a number in (0, 1]"); }, [](const TrainOptions& o) { return format_number(o.top_p); }},
      // modes
      {"eval-only", 0, nullptr, "no training: perplexity of --val-data with Hugging Face's strided sliding window (context --seq-len, --eval-stride) on the weights of --model FILE|HF_DIR or --init-from", FLAG(eval_only)},
      {"eval-stride", 0, "S", "--eval-only: window stride; each window scores only the tokens after the previous window's end [--seq-len]", INT(eval_stride, "eval-stride", 1, 1 << 20)},
      {"eval-json", 0, "PATH", "--eval-only: also write the result as JSON (rank 0; - = standard output; checked before the evaluation)", STR(eval_json)},
      {"eval-hellaswag", 0, "FILE", "HellaSwag accuracy (acc: lowest summed loss of an ending; acc_norm: lowest mean per token, as llm.c) of the official JSONL FILE (ctx, endings, label; a local file) at every validation (--val-every) and in --eval-only (also in --eval-json); needs the GPT-2 vocabulary", STR(eval_hellaswag)},
      {"generate", 0, nullptr, "no training: print --num-samples samples of --gen-tokens tokens after the prompt, from the weights of --model FILE|HF_DIR or --init-from (rank 0)", FLAG(generate)},
      {"prompt-file", 0, "PATH", "--generate: read the prompt from PATH (- = stdin); not with --prompt", STR(prompt_file)},
      {"max-new-tokens", 0, "N", "alias of --gen-tokens", INT(gen_tokens, "max-new-tokens", 1, 1 << 20)},
      {"num-samples", 0, "N", "--generate: samples to print [1]", INT(num_samples, "num-samples", 1, 1 << 20)},
      {"no-stop-at-eos", 0, nullptr, "--generate: keep sampling after <|endoftext|> (default: a sampled <|endoftext|> ends the sample, unprinted)", FLAG(no_stop_at_eos)},
      // output
      training_only({"output-dir", 'o', "DIR", "checkpoints and the final DIR/model.bin (default: none written)", STR(output_dir)}),
      training_only({"checkpoint-every", 0, "N", "checkpoint every N steps (and always at the end) [0]", INT(checkpoint_every, "checkpoint-every", 0, 1 << 30)}),
      training_only({"keep-checkpoints", 0, "K", "keep the newest K checkpoints; 0 keeps all [0]", INT(keep_checkpoints, "keep-checkpoints", 0, 1 << 30)}),
      training_only({"milestone-every", 0, "M", "every checkpoint of a step that is a multiple of M is a milestone (llm.c's major checkpoints): written even between --checkpoint-every, marked DIR/MILESTONE_N, never deleted by --keep-checkpoints; 0 = none [0]", INT(milestone_every, "milestone-every", 0, 1 << 30)}),
      training_only({"keep-best", 0, nullptr, "keep the checkpoint with the lowest validation loss (HF's load_best_model_at_end): every evaluation that lowers it writes a checkpoint, --keep-checkpoints never prunes it, and at the end DIR/model.bin and --save-hf hold its weights; needs --output-dir and --val-every", FLAG(keep_best)}),
      training_only({"early-stopping-patience", 0, "N", "stop the run (final checkpoint written) after N evaluations in a row without an improvement of the best validation loss by more than --early-stopping-threshold (HF's EarlyStoppingCallback); 0 = never [0]", INT(early_stopping_patience, "early-stopping-patience", 0, 1 << 30)}),
      training_only({"early-stopping-threshold", 0, "D", "the improvement an evaluation must exceed to restart the patience count [0]", [](TrainOptions& o, const char* v) { o.early_stopping_threshold = parse_double("early-stopping-threshold", v, 0.0, 1e9); }, [](const TrainOptions& o) { return format_number(o.early_stopping_threshold); }}),
      training_only({"resume", 0, "[PATH]", "continue from the newest complete checkpoint in --output-dir; with PATH, as --resume-from PATH", [](TrainOptions& o, const char* v) { set_resume(o, v); }, [](const TrainOptions& o) { return std::string(!o.resume ? "no" : o.resume_from.empty() ? "yes" : o.resume_from); }, /*optional_value=*/true}),
      training_only({"resume-from", 0, "PATH", "continue from this complete checkpoint (HF's resume_from_checkpoint): its marker DIR/DONE_N or a file of it (model_N.bin), or a checkpoint directory (its newest); verified against its checksums, an incomplete or corrupt one refused; later checkpoints of the same directory are abandoned (DONE_N.abandoned); --output-dir defaults to its directory", [](TrainOptions& o, const char* v) { set_resume(o, v); }, [](const TrainOptions& o) { return o.resume_from; }}),
      training_only({"overwrite-output-dir", 0, nullptr, "start a new run in an --output-dir that holds another run's checkpoints, deleting them first (without it such a directory is refused: --resume continues that run)", FLAG(overwrite_output_dir)}),
      training_only({"resume-fallback", 0, nullptr, "--resume, and if the newest checkpoint fails its checksums, resume from the newest one that passes (warning) instead of stopping", [](TrainOptions& o, const char*) { o.resume = o.resume_fallback = true; }, [](const TrainOptions& o) { return std::string(o.resume_fallback ? "yes" : "no"); }}),
      training_only({"reset-schedule", 0, nullptr, "with --resume: define the lr schedule from this run's flags (--lr, --lr-schedule, --warmup-steps, --final-lr-frac, --wsd-decay-frac, --max-steps or --epochs) instead of keeping the checkpoint's; the step count continues", FLAG(reset_schedule)}),
      training_only({"save-dtype", 0, "fp32|bf16", "element type of saved model files (llm.c v3 / v5) [fp32]", [](TrainOptions& o, const char* v) { o.save_dtype = enum_choice("save-dtype", v, kPrecisions); }, [](const TrainOptions& o) { return std::string(precision_name(o.save_dtype)); }}),
      training_only({"save-hf", 0, "DIR", "also write the final model to DIR as a Hugging Face GPT-2 directory (config.json + model.safetensors, --save-dtype; GPT2LMHeadModel.from_pretrained loads it)", STR(save_hf)}),
      training_only({"log-jsonl", 0, "PATH", "append one JSON object per step and per evaluation", STR(log_jsonl)}),
      // system
      {"device", 0, "auto|cpu|cuda", "auto = CUDA when a GPU is present, else CPU [auto]", [](TrainOptions& o, const char* v) { o.device = enum_choice("device", v, kDevices); }, [](const TrainOptions& o) { return std::string(device_name(o.device)); }},
      {"dtype", 0, "fp32|bf16", "CUDA: parameter/activation storage; bf16 keeps fp32 master weights and moments [fp32]", [](TrainOptions& o, const char* v) { o.dtype = enum_choice("dtype", v, kPrecisions); }, [](const TrainOptions& o) { return std::string(precision_name(o.dtype)); }},
      {"tf32", 0, "on|off|auto", "CUDA, --dtype fp32: run the GEMMs and flash attention on TF32 tensor cores (inputs rounded to a 10-bit mantissa, ~1e-3 relative error, several times faster; off: fp32 GEMMs, 3xTF32 attention); auto = on for a GPU, off in the emulated build [auto]", [](TrainOptions& o, const char* v) { o.tf32 = choice("tf32", v, {"on", "off", "auto"}); }, [](const TrainOptions& o) { return o.tf32; }},
      {"threads", 0, "N", "CPU threads; 0 = OpenMP default [0]", INT(threads, "threads", 0, 4096)},
      training_only({"zero-stage", 0, "0|1|2|3", "ZeRO: 0 all-reduce, 1 shard optimizer state, 2 also shard gradients, 3 also parameters [0]", INT(zero_stage, "zero-stage", 0, 3)}),
      training_only({"offload-optimizer", 0, "none|cpu", "ZeRO-Offload: AdamW's moments and fp32 weights in host memory, the update on the CPU (the CUDA backend; any --zero-stage) [none]", [](TrainOptions& o, const char* v) { o.offload_optimizer = choice("offload-optimizer", v, {"none", "cpu"}) == "cpu"; }, [](const TrainOptions& o) { return std::string(o.offload_optimizer ? "cpu" : "none"); }}),
      {"attention", 0, "auto|cudnn|flash|classic", "CUDA: the attention kernel. cudnn = cuDNN's fused attention (bf16 only, no attention dropout; needs cuDNN at build and run time), flash = our fused kernels (head size <= 64), classic = GEMMs + softmax kernels (any head size); auto = cudnn where it serves the run, else flash. The banner says which runs and why [auto]", [](TrainOptions& o, const char* v) { o.attention = choice("attention", v, {"auto", "cudnn", "flash", "classic"}); }, [](const TrainOptions& o) { return o.attention; }},
      {"gelu-fusion", 0, "on|off", "CUDA: the fc layer's GELU and its gradient in the cuBLASLt GEMM epilogues (one pass over the B*T*4C activations less each way); off runs separate GELU kernels, which also keeps --recompute bitwise neutral (the epilogue's GELU differs from the recomputing kernel's in the last bits) [on]", [](TrainOptions& o, const char* v) { o.gelu_fusion = choice("gelu-fusion", v, {"on", "off"}); }, [](const TrainOptions& o) { return o.gelu_fusion; }},
      training_only({"recompute", 0, "0|1|2", "activation recomputation: 0 keeps all activations; 1 keeps one layer's GELU output and recomputes it in the backward (saves (L-1)*B*T*4C activations, ~2% more FLOPs); 2 also keeps one layernorm output for ln1 and ln2 of all layers and recomputes them (saves another (2L-1)*B*T*C) [0]", INT(recompute, "recompute", 0, 2)}),
      {"dry-run", 0, "W[,W...]", "no training: print the per-rank memory table (parameters, gradients, optimizer state, activations) of this model, --device/--dtype, -B/-T, --zero-stage and --recompute at each world size W, allocating nothing (no GPU or data needed; --device auto plans for the GPU when this binary has the CUDA backend)", [](TrainOptions& o, const char* v) { o.dry_run_worlds = parse_worlds(v); }, [](const TrainOptions& o) { std::string r; for (int w : o.dry_run_worlds) r += (r.empty() ? "" : ",") + std::to_string(w); return r; }},
      training_only({"memory-check", 0, "on|warn|off", "before allocating, compare the memory the run needs (the --dry-run total) with what it has: the CPU backend's, times the ranks on this node, with the machine's (MemAvailable, the cgroup limit); a GPU rank's with its GPU's free memory (cudaMemGetInfo). on = refuse with an error naming both, warn = print that and go on, off = no check [on]", [](TrainOptions& o, const char* v) { o.memory_check = choice("memory-check", v, {"on", "warn", "off"}); }, [](const TrainOptions& o) { return o.memory_check; }}),
      training_only({"profile-steps", 0, "A:B", "CUDA: capture steps A to B (1-based, inclusive) for a profiler: cudaProfilerStart before step A, cudaProfilerStop after step B (nsys profile --capture-range=cudaProfilerApi); the CUDA backend marks phases and layers with NVTX ranges either way (docs/gpu.md) [off]", [](TrainOptions& o, const char* v) { set_profile_steps(o, v); }, [](const TrainOptions& o) { return o.profile_first ? std::to_string(o.profile_first) + ":" + std::to_string(o.profile_last) : std::string("off"); }}),
      training_only({"peak-tflops", 0, "X", "the dense peak of one device in TFLOP/s that the step lines' MFU is held against (6N + 6LCT FLOPs per token, as llm.c) [a GPU: its datasheet peak for bf16, TF32 or fp32 (docs/cli.md lists the GPUs); the CPU: its fp32 FMA peak, measured at start-up]", [](TrainOptions& o, const char* v) { o.peak_tflops = parse_double("peak-tflops", v, 1e-6, 1e6); }, [](const TrainOptions& o) { return o.peak_tflops > 0 ? format_number(o.peak_tflops) : std::string("from the device"); }}),
      {"comm-timeout", 0, "SECONDS", "a collective (MPI or NCCL) waiting longer than this for its peers (one died or hangs) aborts every rank with an error naming the call; must exceed the longest checkpoint write; 0 waits forever [600]", FLT(comm_timeout, "comm-timeout", 0.0, 1e7)},
      {"rendezvous", 0, "tcp|tcp:HOST:PORT|file:DIR", "ranks launched without MPI (torchrun, srun --mpi=none) meet here: rank 0 listens at MASTER_ADDR:MASTER_PORT (tcp), or files in a directory every node sees [tcp]", [](TrainOptions& o, const char* v) { parse_rendezvous(v, "", 1); o.rendezvous = v; }, [](const TrainOptions& o) { return o.rendezvous; }},
  };
  return table;
}

#undef STR
#undef INT
#undef FLT
#undef FLAG

// The modes exclude each other, and flags of one mode are refused in the others.
void check_modes(const TrainOptions& o) {
  if (o.eval_only && o.generate) throw std::runtime_error("--eval-only and --generate are two modes: give one");
  if (!o.dry_run_worlds.empty() && (o.eval_only || o.generate))
    throw std::runtime_error(std::string("--dry-run is a mode of its own: not with ") +
                             (o.eval_only ? "--eval-only" : "--generate"));
  for (const auto& [flag, needs] : {std::pair{"eval-stride", "eval-only"}, {"eval-json", "eval-only"},
                                    {"prompt-file", "generate"}, {"no-stop-at-eos", "generate"}, {"num-samples", "generate"}})
    if (o.given.count(flag) && !o.given.count(needs)) throw std::runtime_error(std::string("--") + flag + " needs --" + needs);
  if (!o.prompt_file.empty() && !o.prompt.empty())
    throw std::runtime_error("--prompt and --prompt-file both give the prompt: give one");
  const std::string mode = o.eval_only ? "--eval-only" : "--generate";
  if ((o.eval_only || o.generate) && o.resume)
    throw std::runtime_error(mode + " does not train: --resume has no meaning (use --init-from CHECKPOINT_DIR)");
  if (o.eval_only || o.generate)
    for (const OptionSpec& spec : option_table())
      if (spec.training_only && o.given.count(spec.long_name))
        throw std::runtime_error(mode + " does not train: --" + spec.long_name + " has no meaning");
}

// The flags of evaluation-driven checkpoints and stopping need validation (and
// --keep-best a directory to keep the checkpoint in); --resume-from names one
// checkpoint, which --resume-fallback cannot replace by another.
void check_eval_driven(const TrainOptions& o) {
  if (o.keep_best && o.output_dir.empty())
    throw std::runtime_error("--keep-best needs --output-dir (where the best checkpoint is kept)");
  if (!o.eval_hellaswag.empty() && o.generate) throw std::runtime_error("--eval-hellaswag does not apply to --generate");
  if (!o.eval_hellaswag.empty() && !o.eval_only && o.val_every == 0)
    throw std::runtime_error("--eval-hellaswag runs with validation: --val-every is 0");
  if (o.keep_best && o.val_every == 0)
    throw std::runtime_error("--keep-best needs validation: --val-every is 0");
  if (o.early_stopping_patience > 0 && o.val_every == 0)
    throw std::runtime_error("--early-stopping-patience needs validation: --val-every is 0");
  if (o.early_stopping_threshold != 0 && o.early_stopping_patience == 0)
    throw std::runtime_error("--early-stopping-threshold needs --early-stopping-patience");
  if (o.given.count("spike-window") && o.skip_loss_z == 0 && o.skip_grad_z == 0)
    throw std::runtime_error("--spike-window is the spike guards' window: it needs --skip-loss-z or --skip-grad-z");
  if (o.given.count("max-nan-skips") && o.on_nan != "skip")
    throw std::runtime_error("--max-nan-skips bounds the steps --on-nan skip skips: it needs --on-nan skip");
  if (!o.resume_from.empty() && o.resume_fallback)
    throw std::runtime_error("--resume-fallback replaces a corrupt newest checkpoint by an older one; --resume-from " +
                             o.resume_from + " names the checkpoint: give one");
}

// Flags that only act with --output-dir, and the model the dN preset and
// --config describe (a bad value is a usage error now, not at start-up).
void check_output_and_model(const TrainOptions& o) {
  if (o.offload_optimizer && o.device == Device::kCpu)
    throw std::runtime_error("--offload-optimizer cpu moves the optimizer off the GPU; with --device cpu it is on the "
                             "CPU already");
  if (o.output_dir.empty() && (o.checkpoint_every != 0 || o.keep_checkpoints != 0 || o.milestone_every != 0))
    throw std::runtime_error(std::string(o.checkpoint_every   ? "--checkpoint-every"
                                         : o.keep_checkpoints ? "--keep-checkpoints"
                                                              : "--milestone-every") +
                             " needs --output-dir (where checkpoints are written; without it none is)");
  if (o.eval_stride > o.seq_len)
    throw std::runtime_error("--eval-stride " + std::to_string(o.eval_stride) + " is larger than --seq-len " +
                             std::to_string(o.seq_len) + " (tokens between windows would never be scored)");
  if (!o.init_from.empty()) return;  // --init-from with --config: refused above
  bool from_file = false;  // (a model file is read at start-up, not now)
  if (names_preset(o.model) || !o.config_overrides.empty()) requested_config(o.model, o.config_overrides, &from_file);
}

}  // namespace

std::string format_number(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

const char* device_name(Device d) { return enum_word(d, kDevices); }
const char* precision_name(Precision p) { return enum_word(p, kPrecisions); }

std::string train_options_help(const char* program) {
  std::ostringstream s;
  s << "usage: " << program << " [options]\n"
    << "Train GPT-2 on token shards (CPU backend, or CUDA when built and present).\n"
    << "Run it plainly, under mpirun -np N, or under srun: one process per GPU/rank.\n"
    << "--eval-only and --generate run a trained model instead of training it.\n\n";
  for (const OptionSpec& o : option_table()) {
    std::string left = "  ";
    left += o.short_name ? std::string("-") + o.short_name + ", " : std::string("    ");
    left += std::string("--") + o.long_name;
    if (o.value_name) left += std::string(" ") + o.value_name;
    s << left;
    if (left.size() < 34) s << std::string(34 - left.size(), ' ');
    else s << "\n" << std::string(34, ' ');
    s << o.help << "\n";
  }
  s << "  -h, --help                      this text\n";
  return s.str();
}

bool parse_train_options(int argc, char** argv, TrainOptions* opts) {
  const auto& table = option_table();
  for (int i = 1; i < argc; i++) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(train_options_help(argv[0]).c_str(), stdout);
      return false;
    }
    const OptionSpec* spec = nullptr;
    const char* inline_value = nullptr;
    if (arg.rfind("--", 0) == 0 && arg.size() > 2) {
      std::string name = arg.substr(2);
      size_t eq = name.find('=');
      if (eq != std::string::npos) {
        inline_value = argv[i] + 2 + eq + 1;
        name = name.substr(0, eq);
      }
      for (const OptionSpec& o : table)
        if (name == o.long_name) spec = &o;
    } else if (arg.size() == 2 && arg[0] == '-') {
      for (const OptionSpec& o : table)
        if (o.short_name == arg[1]) spec = &o;
    }
    if (!spec) throw std::runtime_error("unknown option '" + arg + "' (see --help)");
    const std::string name = spec->long_name;
    const char* value = inline_value;
    if (spec->optional_value) {
      if (!value && i + 1 < argc && argv[i + 1][0] != '-') value = argv[++i];
    } else if (!spec->value_name) {
      if (value) throw std::runtime_error("--" + name + " takes no value");
    } else if (!value) {
      if (i + 1 >= argc) throw std::runtime_error("--" + name + " needs a value (" + spec->value_name + ")");
      value = argv[++i];
    }
    spec->apply(*opts, value);
    opts->given.insert(name);
  }
  if (!opts->init_from.empty() && opts->given.count("model"))
    throw std::runtime_error("--init-from and --model both name the initial weights: give one");
  if (!opts->init_from.empty() && !opts->config_overrides.empty())
    throw std::runtime_error("--config applies to dN presets, not to --init-from weights");
  // A named checkpoint's run continues in its directory unless told otherwise.
  if (!opts->resume_from.empty()) {
    const std::string dir = parse_checkpoint_ref(opts->resume_from).dir;  // names a checkpoint, or throws
    if (opts->output_dir.empty()) opts->output_dir = dir;
  }
  if (opts->resume && opts->output_dir.empty())
    throw std::runtime_error("--resume needs --output-dir (where the checkpoints are)");
  if (opts->overwrite_output_dir && opts->output_dir.empty())
    throw std::runtime_error("--overwrite-output-dir needs --output-dir");
  if (opts->overwrite_output_dir && opts->resume)
    throw std::runtime_error("--overwrite-output-dir deletes the checkpoints that --resume continues: give one");
  check_modes(*opts);
  check_eval_driven(*opts);
  check_output_and_model(*opts);
  return true;
}

std::vector<std::pair<std::string, std::string>> describe_train_options(const TrainOptions& o) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const OptionSpec& s : option_table()) out.emplace_back(s.long_name, s.show(o));
  return out;
}

}  // namespace gpt2
