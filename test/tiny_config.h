// The unit tests' one builder of small GPT-2 shapes, so a test states its shape
// in one line instead of six assignments.
#ifndef GPT2_TEST_TINY_CONFIG_H
#define GPT2_TEST_TINY_CONFIG_H

#include "model/config.h"

namespace gpt2 {

// L layers, H heads, C channels, T positions, V tokens in Vp embedding rows
// (Vp defaults to the trainer's padding, V rounded up to 128).
inline GPT2Config tiny_gpt2_config(int L, int H, int C, int T, int V, int Vp = 0) {
  GPT2Config c;
  c.num_layers = L;
  c.num_heads = H;
  c.channels = C;
  c.max_seq_len = T;
  c.vocab_size = V;
  c.padded_vocab_size = Vp > 0 ? Vp : padded_vocab_for(V);
  return c;
}

}  // namespace gpt2

#endif  // GPT2_TEST_TINY_CONFIG_H
