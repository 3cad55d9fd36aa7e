// GPT-2 hyperparameters: presets (dN), HF-style overrides, validation.
#ifndef MODEL_CONFIG_H
#define MODEL_CONFIG_H

#include <cstddef>
#include <string>

namespace gpt2 {

struct GPT2Config {
  int max_seq_len = 1024;          // wpe rows
  int vocab_size = 50257;          // real tokens
  int padded_vocab_size = 50304;   // wte rows; padded to a multiple of 128 for GEMM-friendly shapes
  int num_layers = 12;
  int num_heads = 12;
  int channels = 768;

  bool operator==(const GPT2Config& o) const;
  bool operator!=(const GPT2Config& o) const { return !(*this == o); }
  std::string describe() const;   // "n_layer=12 n_head=12 n_embd=768 max_seq=1024 vocab=50257 (padded 50304)"
  // Throws std::runtime_error (prefixed with `where`) when the shape is unusable.
  void validate(const std::string& where) const;
};

// "d12" -> GPT-2 124M etc. d12/d24/d36/d48 use GPT-2's published widths
// (768/1024/1280/1600, heads 12/16/20/25); other depths N get 64*N channels and N heads.
GPT2Config config_from_depth_name(const std::string& name);

// Applies "key=value,key=value" overrides (HF config_overrides style). Keys:
// n_layer, n_head, n_embd, max_seq (alias n_positions), vocab_size, padded_vocab_size.
// padded_vocab_size follows vocab_size (rounded up to 128) unless given explicitly.
void apply_config_overrides(GPT2Config& cfg, const std::string& overrides);

// Rounds v up to a multiple of 128 (llm.c's padding rule, 50257 -> 50304).
int padded_vocab_for(int vocab_size);

}  // namespace gpt2

#endif  // MODEL_CONFIG_H
