#include "train/run_config.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "model/hf_checkpoint.h"
#include "train/checkpoint.h"
#include "train/resume_point.h"
#include "train/run_setup.h"

namespace gpt2 {

bool peek_resume_state(const TrainOptions& o, TrainState* st, std::string* path) {
  if (!o.resume || o.output_dir.empty()) return false;
  const CheckpointRef ref =
      o.resume_from.empty() ? CheckpointRef{o.output_dir, -1} : parse_checkpoint_ref(o.resume_from);
  const CheckpointDir dir(ref.dir);
  const std::vector<uint64_t> steps =
      ref.step < 0 ? dir.complete_steps() : std::vector<uint64_t>{static_cast<uint64_t>(ref.step)};
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    try {
      *st = read_state_file(dir.state_path(*it, 0), /*header_only=*/true);
      *path = dir.state_path(*it, 0);
      return true;
    } catch (const std::exception&) {
      // unreadable: the verification of --resume reports it (or falls back)
    }
  }
  return false;
}

int capped_seq_len(const TrainOptions& o, const GPT2Config& cfg, std::string* note) {
  note->clear();
  if (o.seq_len <= cfg.max_seq_len) return o.seq_len;
  *note = "note: --seq-len " + std::to_string(o.seq_len) + " capped to the model's max_seq " +
          std::to_string(cfg.max_seq_len);
  return cfg.max_seq_len;
}

BatchShape batch_shape(const TrainOptions& o, const GPT2Config& cfg, int world, const TrainState* stored,
                       const std::string& stored_path, TrainLogger& log) {
  BatchShape s;
  s.B = o.batch_size;
  std::string cap_note;
  s.T = capped_seq_len(o, cfg, &cap_note);
  if (!cap_note.empty()) log.info(cap_note);
  const int64_t tokens_per_micro = static_cast<int64_t>(s.B) * s.T * world;
  s.total_batch = o.total_batch_tokens < 0 ? tokens_per_micro : o.total_batch_tokens;
  if (stored) {
    const bool adopted = o.total_batch_tokens < 0 && stored->total_batch_tokens > 0;
    if (adopted) s.total_batch = stored->total_batch_tokens;
    check_resumed_batch(*stored, s, world, stored_path);
    if (adopted && s.total_batch != tokens_per_micro)
      log.info("--resume: " + std::to_string(s.total_batch) + " tokens per step, as in the checkpoint (grad_accum " +
               std::to_string(s.total_batch / tokens_per_micro) + " at world " + std::to_string(world) + ")");
  }
  s.grad_accum = grad_accum_for(s.total_batch, tokens_per_micro);
  return s;
}

void check_resumed_batch(const TrainState& st, const BatchShape& s, int world, const std::string& source) {
  const int64_t tokens_per_micro = static_cast<int64_t>(s.B) * s.T * world;
  const int64_t total = st.total_batch_tokens;
  if (total == s.total_batch && total % tokens_per_micro != 0)
    throw std::runtime_error("--resume: the checkpoint's global batch is " + std::to_string(total) +
                             " tokens per step, not a multiple of B*T*world = " + std::to_string(s.B) + "*" +
                             std::to_string(s.T) + "*" + std::to_string(world) + " = " +
                             std::to_string(tokens_per_micro) + " (" + source + " has B=" +
                             std::to_string(st.batch_size) + " T=" + std::to_string(st.seq_len) + " at world " +
                             std::to_string(st.world) + "; B and T must stay the same)");
  if (st.batch_size != s.B || st.seq_len != s.T || total != s.total_batch)
    throw std::runtime_error("--resume: " + source + " was written with B=" + std::to_string(st.batch_size) +
                             " T=" + std::to_string(st.seq_len) + " total-batch-tokens=" + std::to_string(total) +
                             "; this run has B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
                             " total-batch-tokens=" + std::to_string(s.total_batch));
}

DataLoaderOptions train_loader_options(const TrainOptions& o, const BatchShape& s, const DistContext& dist,
                                       int vocab_size) {
  DataLoaderOptions lo;
  lo.pattern = o.train_data;
  lo.B = s.B;
  lo.T = s.T;
  lo.rank = dist.rank;
  lo.world = dist.world;
  lo.grad_accum = s.grad_accum;
  lo.shuffle = !o.no_shuffle;
  lo.seed = o.seed;
  lo.vocab_size = vocab_size;
  return lo;
}

namespace {

std::string rate_text(float p) {
  std::ostringstream s;
  s << p;
  return s.str();
}

// Where the rates --dropout does not set come from.
std::string model_dropout_source(const TrainOptions& o, bool hf) {
  if (hf) return "from " + o.model + "/config.json";
  return names_preset(o.model) ? "none in a random init" : "none in an llm.c model file";
}

}  // namespace

RunDropout run_dropout(const TrainOptions& o) {
  const bool hf = !names_preset(o.model) && is_hf_checkpoint_dir(o.model);
  const DropoutRates model = hf ? read_hf_dropout(o.model) : DropoutRates{};
  const char* const names[3] = {"embd", "resid", "attn"};
  const float flags[3] = {o.dropout_embd, o.dropout_resid, o.dropout_attn};
  const float models[3] = {model.embd, model.resid, model.attn};
  float rates[3];
  std::string text, flagged, modelled;
  for (int i = 0; i < 3; i++) {
    rates[i] = flags[i] >= 0.0f ? flags[i] : models[i];
    text += std::string(i ? ", " : "") + names[i] + " " + rate_text(rates[i]);
    std::string& list = flags[i] >= 0.0f ? flagged : modelled;
    list += (list.empty() ? "" : ", ") + std::string(names[i]);
  }
  RunDropout d;
  d.rates.embd = rates[0];
  d.rates.resid = rates[1];
  d.rates.attn = rates[2];
  const std::string source = model_dropout_source(o, hf);
  if (modelled.empty()) d.described = text + " (--dropout)";
  else if (flagged.empty()) d.described = text + " (" + source + (hf ? "" : "; --dropout sets them") + ")";
  else d.described = text + " (" + flagged + ": --dropout; " + modelled + ": " + source + ")";
  return d;
}

AdamWHyper adamw_hyper(const TrainOptions& o) {
  AdamWHyper h;
  h.beta1 = o.beta1;
  h.beta2 = o.beta2;
  h.eps = o.adam_eps;
  h.weight_decay = o.weight_decay;
  return h;
}

LrSchedule lr_schedule(const TrainOptions& o, int total_steps) {
  LrSchedule s;
  s.kind = LrSchedule::parse_kind(o.lr_schedule);
  s.max_lr = o.lr;
  s.warmup_steps = o.warmup_steps;
  s.total_steps = total_steps;
  s.final_frac = o.final_lr_frac;
  s.wsd_decay_frac = o.wsd_decay_frac;
  return s;
}

std::unique_ptr<Tokenizer> load_tokenizer(const TrainOptions& o, TrainLogger& log) {
  try {
    return std::make_unique<Tokenizer>(Tokenizer::from_default_location());
  } catch (const std::exception& e) {
    if (!o.prompt.empty()) throw std::runtime_error(std::string("--prompt needs the GPT-2 vocabulary: ") + e.what());
    log.info(std::string("note: no GPT-2 vocabulary (") + e.what() + "); samples print token ids");
  }
  return nullptr;
}

std::string join_tokens(const std::vector<int32_t>& ids) {
  std::ostringstream s;
  for (size_t i = 0; i < ids.size(); i++) s << (i ? " " : "") << ids[i];
  return s.str();
}

size_t count_nonfinite(const std::vector<float>& v, size_t* first) {
  size_t bad = 0;
  for (size_t i = 0; i < v.size(); i++)
    if (!std::isfinite(v[i]) && bad++ == 0 && first) *first = i;
  return bad;
}

void require_finite(const std::vector<float>& v, const std::string& what) {
  size_t first = 0;
  if (const size_t bad = count_nonfinite(v, &first))
    throw std::runtime_error(what + ": " + std::to_string(bad) + " non-finite value(s), the first at index " +
                             std::to_string(first));
}

}  // namespace gpt2
