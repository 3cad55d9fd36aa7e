#include "model/config.h"

#include <cstdlib>
#include <sstream>
#include <stdexcept>

namespace gpt2 {

bool GPT2Config::operator==(const GPT2Config& o) const {
  return max_seq_len == o.max_seq_len && vocab_size == o.vocab_size &&
         padded_vocab_size == o.padded_vocab_size && num_layers == o.num_layers &&
         num_heads == o.num_heads && channels == o.channels;
}

std::string GPT2Config::describe() const {
  std::ostringstream s;
  s << "n_layer=" << num_layers << " n_head=" << num_heads << " n_embd=" << channels
    << " max_seq=" << max_seq_len << " vocab=" << vocab_size << " (padded " << padded_vocab_size << ")";
  return s.str();
}

void GPT2Config::validate(const std::string& where) const {
  auto fail = [&](const std::string& why) { throw std::runtime_error(where + ": " + why); };
  if (num_layers < 1) fail("n_layer must be >= 1");
  if (num_heads < 1) fail("n_head must be >= 1");
  if (channels < 1) fail("n_embd must be >= 1");
  if (channels % num_heads != 0)
    fail("n_embd (" + std::to_string(channels) + ") must be divisible by n_head (" +
         std::to_string(num_heads) + ")");
  if (max_seq_len < 1) fail("max_seq must be >= 1");
  if (vocab_size < 1) fail("vocab_size must be >= 1");
  if (padded_vocab_size < vocab_size) fail("padded_vocab_size must be >= vocab_size");
}

int padded_vocab_for(int vocab_size) { return (vocab_size + 127) / 128 * 128; }

GPT2Config config_from_depth_name(const std::string& name) {
  if (name.size() < 2 || name[0] != 'd')
    throw std::runtime_error("--model " + name + ": expected dN (e.g. d12) or a model file");
  char* end = nullptr;
  long depth = std::strtol(name.c_str() + 1, &end, 10);
  if (*end != '\0' || depth < 1 || depth > 1000)
    throw std::runtime_error("--model " + name + ": bad depth (expected dN with 1 <= N <= 1000)");
  GPT2Config c;
  c.num_layers = static_cast<int>(depth);
  switch (depth) {
    case 12: c.channels = 768;  c.num_heads = 12; break;  // 124M
    case 24: c.channels = 1024; c.num_heads = 16; break;  // 350M
    case 36: c.channels = 1280; c.num_heads = 20; break;  // 774M
    case 48: c.channels = 1600; c.num_heads = 25; break;  // 1558M
    default: c.channels = 64 * c.num_layers; c.num_heads = c.num_layers; break;
  }
  return c;
}

void apply_config_overrides(GPT2Config& cfg, const std::string& overrides) {
  bool padded_given = false;
  std::stringstream ss(overrides);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos)
      throw std::runtime_error("--config: '" + item + "' is not key=value");
    std::string key = item.substr(0, eq), val = item.substr(eq + 1);
    char* end = nullptr;
    long v = std::strtol(val.c_str(), &end, 10);
    if (val.empty() || *end != '\0' || v < 1 || v > (1L << 30))
      throw std::runtime_error("--config: '" + item + "' needs a positive integer value");
    int iv = static_cast<int>(v);
    if (key == "n_layer") cfg.num_layers = iv;
    else if (key == "n_head") cfg.num_heads = iv;
    else if (key == "n_embd") cfg.channels = iv;
    else if (key == "max_seq" || key == "n_positions") cfg.max_seq_len = iv;
    else if (key == "vocab_size") cfg.vocab_size = iv;
    else if (key == "padded_vocab_size") { cfg.padded_vocab_size = iv; padded_given = true; }
    else
      throw std::runtime_error("--config: unknown key '" + key +
                               "' (known: n_layer, n_head, n_embd, max_seq, n_positions, "
                               "vocab_size, padded_vocab_size)");
  }
  if (!padded_given) cfg.padded_vocab_size = padded_vocab_for(cfg.vocab_size);
  cfg.validate("--config");
}

}  // namespace gpt2
