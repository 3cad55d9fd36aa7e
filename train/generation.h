// Sampling (temperature, top-k, top-p, a prompt or <|endoftext|>, an optional
// stop token); the text handling training samples and --generate share
// (tokenizer, prompt, output); and --generate itself (rank 0; others exit 0).
#ifndef TRAIN_GENERATION_H
#define TRAIN_GENERATION_H

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/context.h"
#include "model/gpt2.h"
#include "tokenizer/tokenizer.h"
#include "train/options.h"
#include "util/rng.h"

namespace gpt2 {

// Rounding slack of the nucleus: a cumulative probability within this of p
// counts as reaching p (softmax of float logits is only that exact).
constexpr double kTopPSlack = 1e-6;

// Draws one token id from logits (V entries), in this order:
//   1. top_k > 0: keep the top_k largest logits (ties: lower id first);
//   2. probabilities softmax(logits / temperature) over what is kept;
//   3. top_p < 1: keep the smallest set of the most probable tokens whose
//      cumulative probability reaches top_p (within kTopPSlack), renormalised;
//   4. one draw of rng.uniform(). top_p = 1 and top_k = 0 leave all tokens.
// Deterministic in rng. top_p must be in (0, 1].
int sample_token(const std::vector<float>& logits, float temperature, int top_k, Rng& rng, float top_p = 1.0f);

// Samples up to `count` tokens after `context`; returns only the new ones. A
// sampled `stop_token` (>= 0; -1: none) ends it and is not returned; so does a
// stop signal (local_stop_signal(), checked per token; the caller sees it).
// One full forward over the last max_seq() tokens per token (no KV cache);
// overwrites the model's activations.
std::vector<int32_t> generate(GPT2& model, std::vector<int32_t> context, int count, float temperature, int top_k,
                              Rng& rng, float top_p = 1.0f, int32_t stop_token = -1);

// The GPT-2 tokenizer, or nullptr without the vocabulary (`note` hears why;
// samples then print token ids); an error instead if `prompt` needs encoding.
std::unique_ptr<Tokenizer> sample_tokenizer(const std::string& prompt,
                                            const std::function<void(const std::string&)>& note);

// The context samples continue: the prompt's tokens, or <|endoftext|>. A token
// outside the model's vocabulary (a small test vocabulary) is an error.
std::vector<int32_t> prompt_context(const std::string& prompt, const Tokenizer* tok, int vocab_size);

// A sample as text: the prompt and the decoded new tokens, or without a
// vocabulary (tok nullptr) the new token ids, space-separated.
std::string sample_text(const Tokenizer* tok, const std::string& prompt, const std::vector<int32_t>& ids);

// --generate on this rank. Returns the exit code.
int run_generation(const TrainOptions& opts, const DistContext& dist);

}  // namespace gpt2

#endif  // TRAIN_GENERATION_H
