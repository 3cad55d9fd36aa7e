#include "train/generation.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "distributed/preempt.h"
#include "model/gpt2.h"
#include "model/model_file.h"
#include "tokenizer/tokenizer.h"
#include "train/run_plan.h"
#include "train/sampler.h"
#include "util/checked_io.h"
#include "util/rng.h"

namespace gpt2 {

namespace {

// The prompt text: --prompt, or the bytes of --prompt-file exactly ("-":
// stdin; an unreadable file is an error naming it). Empty: no prompt.
std::string read_prompt(const TrainOptions& opts) {
  if (opts.prompt_file.empty()) return opts.prompt;
  try {
    return read_all_bytes(opts.prompt_file);  // every byte: a NUL is text like any other
  } catch (const std::exception& e) {
    throw std::runtime_error("--prompt-file " + std::string(e.what()));
  }
}

// The text printed for sample i of n (0-based): with n > 1 a header line
// "--- sample i+1/n ---" first; the text and a newline.
std::string format_sample(int i, int n, const std::string& text) {
  std::string out;
  if (n > 1) out = "--- sample " + std::to_string(i + 1) + "/" + std::to_string(n) + " ---\n";
  return out + text + "\n";
}

// The context the samples continue: the prompt's tokens, or <|endoftext|>.
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
      throw std::runtime_error("prompt token " + std::to_string(id) + (prompt.empty() ? " (<|endoftext|>, the empty prompt)" : "") +
                               " is outside the model's vocabulary of " + std::to_string(vocab_size));
  return ctx;
}

std::unique_ptr<Tokenizer> try_tokenizer() {
  try {
    return std::make_unique<Tokenizer>(Tokenizer::from_default_location());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "note: no GPT-2 vocabulary (%s); samples print token ids\n", e.what());
  }
  return nullptr;
}

std::string render(const Tokenizer* tok, const std::string& prompt, const std::vector<int32_t>& ids) {
  if (!tok) return join_tokens(ids);
  const std::vector<uint32_t> u(ids.begin(), ids.end());
  return prompt + tok->decode(u);
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
  std::unique_ptr<Backend> backend = make_run_backend(opts, dist);
  const std::string path = weights_path(opts, "--generate");
  ModelFile mf = read_model_file(path);
  std::unique_ptr<Tokenizer> tok = try_tokenizer();
  const std::vector<int32_t> context = prompt_context(prompt, tok.get(), mf.config.vocab_size);
  GPT2 model(*backend, mf.config, 1, mf.config.max_seq_len, GradMode::kNone);  // forward only
  model.set_parameters(mf.params);
  const int32_t stop = opts.no_stop_at_eos ? -1 : static_cast<int32_t>(Tokenizer::kEndOfText);
  std::fprintf(stderr, "generate: %s [%s] on %s; prompt %zu token(s); %d sample(s) of up to %d token(s)\n",
               path.c_str(), mf.config.describe().c_str(), backend->name().c_str(),
               prompt.empty() ? size_t{0} : context.size(), opts.num_samples, opts.gen_tokens);
  Rng rng(opts.seed);
  for (int i = 0; i < opts.num_samples; i++) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids =
        generate(model, context, opts.gen_tokens, opts.temperature, opts.top_k, rng, opts.top_p, stop);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    write_stdout(format_sample(i, opts.num_samples, render(tok.get(), prompt, ids)));
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
