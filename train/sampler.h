// Text generation from the model: temperature, top-k, a prompt or <|endoftext|>.
#ifndef TRAIN_SAMPLER_H
#define TRAIN_SAMPLER_H

#include <cstdint>
#include <vector>

#include "model/gpt2.h"
#include "util/rng.h"

namespace gpt2 {

// Draws one token id from logits (V entries): softmax(logits / temperature)
// restricted to the top_k largest (top_k <= 0: all). Deterministic in rng.
int sample_token(const std::vector<float>& logits, float temperature, int top_k, Rng& rng);

// Appends `count` sampled tokens to `context` and returns only the new ones.
// Runs a full forward over the last max_seq() tokens per new token (no KV
// cache: sampling is a progress check, not a serving path). Overwrites the
// model's activations.
std::vector<int32_t> generate(GPT2& model, std::vector<int32_t> context, int count, float temperature, int top_k,
                              Rng& rng);

}  // namespace gpt2

#endif  // TRAIN_SAMPLER_H
