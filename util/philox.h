// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC'11; the generator of cuRAND's Philox4_32_10 and PyTorch's CUDA dropout):
// a counter-based generator. Four 32-bit outputs are a pure function of a
// 128-bit counter and a 64-bit key, so any element's random number is computed
// where it is needed, on the CPU or in a CUDA kernel, in any order, and again
// in the backward: nothing is stored, nothing depends on how the work is split.
//
// Dropout masks (DropoutMask): element (token, column) of a dropout site keeps
// its value iff its 32-bit draw is >= p 2^32, with
//   key     = the run's seed (two words)
//   counter = {column / 4, token bits 0-31, the optimizer step,
//              site stream (bits 0-23) | token bits 32-39 (bits 24-31)}
// and the draw = output word column % 4. `token` is the global index of the
// token in the optimizer step's batch (over ranks and micro-steps), `stream`
// names the layer and the site (layer * 16 + site), so a mask is the same
// whatever the ranks, micro-batches or backend, and different per step, layer
// and site.
#ifndef UTIL_PHILOX_H
#define UTIL_PHILOX_H

#include <cstdint>

#if defined(__CUDACC__)
#define GPT2_HOST_DEVICE __host__ __device__
#else
#define GPT2_HOST_DEVICE
#endif

namespace gpt2 {

struct Philox4 {
  uint32_t v[4];
};

GPT2_HOST_DEVICE inline Philox4 philox4x32_10(Philox4 c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule (Weyl) increments
  for (int round = 0; round < 10; round++) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c.v[0], p1 = static_cast<uint64_t>(kM1) * c.v[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = Philox4{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

// One dropout site of one forward: [rows, cols] elements, row r is global token token0 + r.
struct DropoutMask {
  uint64_t seed = 0;
  uint32_t step = 0;    // optimizer step
  uint32_t stream = 0;  // layer * 16 + site (< 2^24)
  uint64_t token0 = 0;  // global token index of row 0 (< 2^40 with its rows)
  float p = 0.0f;       // drop probability in [0, 1); 0: no dropout

  enum Site : uint32_t { kEmbedding = 0, kAttentionProj = 1, kMlpProj = 2, kAttentionProbs = 3 };
  static constexpr uint32_t stream_of(int layer, Site site) { return static_cast<uint32_t>(layer) * 16u + site; }

  // Drop iff the draw is below this (p 2^32, rounded down; p < 1).
  GPT2_HOST_DEVICE uint32_t threshold() const { return static_cast<uint32_t>(static_cast<double>(p) * 4294967296.0); }
  // 1 / (1 - p): what a kept element is multiplied by (inverted dropout).
  GPT2_HOST_DEVICE float keep_scale() const { return 1.0f / (1.0f - p); }
  // The four draws of columns 4q .. 4q+3 of global token `token`.
  GPT2_HOST_DEVICE Philox4 draws(uint64_t token, uint32_t q) const {
    const Philox4 counter{{q, static_cast<uint32_t>(token), step,
                           (stream & 0xFFFFFFu) | (static_cast<uint32_t>(token >> 32) << 24)}};
    return philox4x32_10(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  }
  GPT2_HOST_DEVICE bool keep(uint64_t token, uint32_t col) const { return draws(token, col / 4).v[col % 4] >= threshold(); }

  // Attention-probability dropout (site kAttentionProbs): element (query q,
  // key j) of head h in a sequence of T tokens whose token 0 is global token
  // `row_token`. One Philox call covers the 2x2 block {q, q+8} x {j, j+8}
  // (q, j with bit 3 clear): the rows and columns an mma.sync C fragment gives
  // one lane, so the flash kernels use every word they draw, forward (rows are
  // queries) and backward (rows are keys) alike. The call is draws() of token
  // row_token + q with column word h * T16 + j (T16 = T rounded up to 16):
  // word 2 * (q bit 3) + (j bit 3) of it is the element's draw.
  GPT2_HOST_DEVICE static uint32_t attention_column(int T, int h, int j) {
    return static_cast<uint32_t>(h) * ((static_cast<uint32_t>(T) + 15u) & ~15u) + static_cast<uint32_t>(j);
  }
  // The four draws of {q, q+8} x {j, j+8}; q and j have bit 3 clear.
  GPT2_HOST_DEVICE Philox4 attention_draws(uint64_t row_token, int T, int h, int q, int j) const {
    const Philox4 counter{{attention_column(T, h, j), static_cast<uint32_t>(row_token + q), step,
                           (stream & 0xFFFFFFu) | (static_cast<uint32_t>((row_token + q) >> 32) << 24)}};
    return philox4x32_10(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  }
  GPT2_HOST_DEVICE bool keep_attention(uint64_t row_token, int T, int h, int q, int j) const {
    const Philox4 d = attention_draws(row_token, T, h, q & ~8, j & ~8);
    return d.v[((q >> 3) & 1) * 2 + ((j >> 3) & 1)] >= threshold();
  }
};

}  // namespace gpt2

#endif  // UTIL_PHILOX_H
