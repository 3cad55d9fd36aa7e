#include "train/generation.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "distributed/preempt.h"
#include "model/gpt2.h"
#include "tokenizer/tokenizer.h"
#include "train/run_plan.h"
#include "util/checked_io.h"
#include "util/rng.h"

namespace gpt2 {

namespace {

// Candidate ids: all of them, or the top_k largest logits (ties by id so the
// result never depends on the sort implementation).
std::vector<int> top_k_ids(const std::vector<float>& logits, int top_k) {
  const int V = static_cast<int>(logits.size());
  std::vector<int> ids(V);
  for (int i = 0; i < V; i++) ids[i] = i;
  const int k = (top_k <= 0 || top_k > V) ? V : top_k;
  if (k < V) {
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int a, int b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    ids.resize(k);
  }
  return ids;
}

// Unnormalised softmax weights of the candidates at `temperature`; returns their sum.
double softmax_weights(const std::vector<float>& logits, const std::vector<int>& ids, float temperature,
                       std::vector<double>* w) {
  double maxv = -INFINITY;
  for (int id : ids) maxv = std::max(maxv, static_cast<double>(logits[id]));
  w->resize(ids.size());
  double sum = 0.0;
  for (size_t i = 0; i < ids.size(); i++) {
    (*w)[i] = std::exp((logits[ids[i]] - maxv) / temperature);
    sum += (*w)[i];
  }
  return sum;
}

// Keeps the nucleus: the most probable candidates (ties by id) until their
// share of `sum` reaches top_p. Returns the kept weights' sum.
double keep_nucleus(std::vector<int>* ids, std::vector<double>* w, double sum, double top_p) {
  std::vector<size_t> order(ids->size());
  for (size_t i = 0; i < order.size(); i++) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return (*w)[a] > (*w)[b] || ((*w)[a] == (*w)[b] && (*ids)[a] < (*ids)[b]);
  });
  std::vector<int> kept_ids;
  std::vector<double> kept_w;
  double acc = 0.0;
  for (size_t i : order) {
    kept_ids.push_back((*ids)[i]);
    kept_w.push_back((*w)[i]);
    acc += (*w)[i];
    if (acc >= (top_p - kTopPSlack) * sum) break;
  }
  *ids = std::move(kept_ids);
  *w = std::move(kept_w);
  return acc;
}

}  // namespace

int sample_token(const std::vector<float>& logits, float temperature, int top_k, Rng& rng, float top_p) {
  if (logits.empty()) throw std::runtime_error("sample_token: empty logits");
  if (!(top_p > 0.0f && top_p <= 1.0f))
    throw std::runtime_error("sample_token: top_p " + std::to_string(top_p) + " outside (0, 1]");
  std::vector<int> ids = top_k_ids(logits, top_k);
  std::vector<double> w;
  double sum = softmax_weights(logits, ids, temperature, &w);
  if (top_p < 1.0f) sum = keep_nucleus(&ids, &w, sum, top_p);
  const double u = rng.uniform() * sum;
  double acc = 0.0;
  for (size_t i = 0; i < ids.size(); i++) {
    acc += w[i];
    if (u < acc) return ids[i];
  }
  return ids.back();
}

std::vector<int32_t> generate(GPT2& model, std::vector<int32_t> context, int count, float temperature, int top_k,
                              Rng& rng, float top_p, int32_t stop_token) {
  if (context.empty()) throw std::runtime_error("generate: empty context");
  std::vector<int32_t> out;
  const int window = model.max_seq();
  for (int i = 0; i < count && local_stop_signal() == 0; i++) {
    const int T = std::min<int>(window, static_cast<int>(context.size()));
    const int32_t* start = context.data() + context.size() - T;
    model.forward(start, nullptr, 1, T);
    const int tok = sample_token(model.logits_at(0, T - 1), temperature, top_k, rng, top_p);
    if (stop_token >= 0 && tok == stop_token) break;
    context.push_back(tok);
    out.push_back(tok);
  }
  return out;
}

std::unique_ptr<Tokenizer> sample_tokenizer(const std::string& prompt,
                                            const std::function<void(const std::string&)>& note) {
  try {
    return std::make_unique<Tokenizer>(Tokenizer::from_default_location());
  } catch (const std::exception& e) {
    if (!prompt.empty())
      throw std::runtime_error(std::string("a prompt needs the GPT-2 vocabulary (scripts/get_gpt2_vocab.sh): ") +
                               e.what());
    note(std::string("note: no GPT-2 vocabulary (") + e.what() + "); samples print token ids");
  }
  return nullptr;
}

std::vector<int32_t> prompt_context(const std::string& prompt, const Tokenizer* tok, int vocab_size) {
  std::vector<int32_t> ctx;
  if (!prompt.empty()) {
    if (!tok) throw std::runtime_error("a prompt needs the GPT-2 vocabulary (scripts/get_gpt2_vocab.sh)");
    for (uint32_t id : tok->encode(prompt)) ctx.push_back(static_cast<int32_t>(id));
  } else {
    ctx.push_back(static_cast<int32_t>(Tokenizer::kEndOfText));
  }
  for (int32_t id : ctx)
    if (id >= vocab_size)
      throw std::runtime_error("prompt token " + std::to_string(id) +
                               (prompt.empty() ? " (<|endoftext|>, the empty prompt)" : "") +
                               " is outside the model's vocabulary of " + std::to_string(vocab_size));
  return ctx;
}

std::string sample_text(const Tokenizer* tok, const std::string& prompt, const std::vector<int32_t>& ids) {
  if (tok) return prompt + tok->decode(std::vector<uint32_t>(ids.begin(), ids.end()));
  std::ostringstream s;
  for (size_t i = 0; i < ids.size(); i++) s << (i ? " " : "") << ids[i];
  return s.str();
}

// ---------------------------------------------------------------- --generate

namespace {

// The prompt text: --prompt, or the bytes of --prompt-file exactly ("-":
// stdin; an unreadable file is an error naming it). Empty: no prompt.
std::string read_prompt(const TrainOptions& opts) {
  if (opts.prompt_file.empty()) return opts.prompt;
  try {
    return read_all_bytes(opts.prompt_file, throw_if_local_stop);  // every byte: a NUL is text like any other
  } catch (const std::exception& e) {
    if (dynamic_cast<const StopRequested*>(&e)) throw;  // a stop while stdin is silent, not a read error
    throw std::runtime_error("--prompt-file " + std::string(e.what()));
  }
}

// Every byte (a NUL included), and a failed write (a full disk, /dev/full) is
// an error at once, not exit 0 after the last sample.
void write_stdout(const std::string& text) {
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0)
    throw std::runtime_error(std::string("--generate: standard output: write failed: ") + std::strerror(errno));
}

}  // namespace

int run_generation(const TrainOptions& opts, const DistContext& dist) {
  if (!dist.is_main()) return 0;  // one stream of text: rank 0 generates
  const std::string prompt = read_prompt(opts);
  TrainedModel trained(opts, dist, "--generate");
  const GPT2Config cfg = trained.weights.config;
  std::unique_ptr<Tokenizer> tok =
      sample_tokenizer(prompt, [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
  const std::vector<int32_t> context = prompt_context(prompt, tok.get(), cfg.vocab_size);
  GPT2& model = trained.load(1, cfg.max_seq_len);
  const int32_t stop = opts.no_stop_at_eos ? -1 : static_cast<int32_t>(Tokenizer::kEndOfText);
  std::fprintf(stderr, "generate: %s [%s] on %s; prompt %zu token(s); %d sample(s) of up to %d token(s)\n",
               trained.path.c_str(), cfg.describe().c_str(), trained.backend->name().c_str(),
               prompt.empty() ? size_t{0} : context.size(), opts.num_samples, opts.gen_tokens);
  Rng rng(opts.seed);
  for (int i = 0; i < opts.num_samples; i++) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids =
        generate(model, context, opts.gen_tokens, opts.temperature, opts.top_k, rng, opts.top_p, stop);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (opts.num_samples > 1)
      write_stdout("--- sample " + std::to_string(i + 1) + "/" + std::to_string(opts.num_samples) + " ---\n");
    write_stdout(sample_text(tok.get(), prompt, ids) + "\n");
    if (const int sig = local_stop_signal()) {  // generate() returned early: print what there is and go
      std::fprintf(stderr, "generate: sample %d: stopped by signal %d after %zu token(s) (exit %d)\n", i + 1, sig,
                   ids.size(), stopped_exit_code(sig));
      return stopped_exit_code(sig);
    }
    std::fprintf(stderr, "generate: sample %d: %zu token(s)%s, %.1f tokens/s\n", i + 1, ids.size(),
                 static_cast<int>(ids.size()) < opts.gen_tokens ? " (stopped at <|endoftext|>)" : "",
                 ids.size() / std::max(s, 1e-9));
  }
  return 0;
}

}  // namespace gpt2
