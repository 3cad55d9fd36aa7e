#include <gtest/gtest.h>

#include <stdexcept>

#include "model/config.h"
#include "model/gpt2.h"
#include "test/tiny_config.h"

namespace gpt2 {
namespace {

TEST(Config, PublishedGpt2Sizes) {
  struct { const char* name; int C, H; size_t params; } cases[] = {
      {"d12", 768, 12, 124475904}, {"d24", 1024, 16, 354871296},
      {"d36", 1280, 20, 774090240}, {"d48", 1600, 25, 1557686400}};
  for (auto& c : cases) {
    GPT2Config cfg = config_from_depth_name(c.name);
    EXPECT_EQ(cfg.channels, c.C) << c.name;
    EXPECT_EQ(cfg.num_heads, c.H) << c.name;
    EXPECT_EQ(cfg.padded_vocab_size, 50304);
    EXPECT_EQ(ParamLayout::for_config(cfg).total, c.params) << c.name;
  }
  GPT2Config d6 = config_from_depth_name("d6");
  EXPECT_EQ(d6.channels, 384);
  EXPECT_EQ(d6.num_heads, 6);
}

TEST(Config, Overrides) {
  GPT2Config c = config_from_depth_name("d12");
  apply_config_overrides(c, "n_layer=4,n_head=4,n_embd=256,max_seq=256");
  EXPECT_EQ(c.num_layers, 4);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.channels, 256);
  EXPECT_EQ(c.max_seq_len, 256);
  apply_config_overrides(c, "vocab_size=1000");
  EXPECT_EQ(c.padded_vocab_size, 1024);
  EXPECT_THROW(apply_config_overrides(c, "n_lyer=2"), std::runtime_error);
  EXPECT_THROW(apply_config_overrides(c, "n_layer"), std::runtime_error);
  EXPECT_THROW(apply_config_overrides(c, "n_layer=-1"), std::runtime_error);
  EXPECT_THROW(apply_config_overrides(c, "n_head=3"), std::runtime_error);  // 256 % 3
  EXPECT_THROW(config_from_depth_name("dx"), std::runtime_error);
  EXPECT_THROW(config_from_depth_name("d0"), std::runtime_error);
}

TEST(ParamLayout, OrderOffsetsAndDecay) {
  const GPT2Config c = tiny_gpt2_config(2, 2, 8, 4, 10, 16);
  ParamLayout p = ParamLayout::for_config(c);
  EXPECT_EQ(p.offset[kWte], 0u);
  EXPECT_EQ(p.offset[kWpe], 16u * 8);
  EXPECT_EQ(p.numel[kQkvw], 2u * 3 * 8 * 8);
  EXPECT_EQ(p.offset[kLnfb] + p.numel[kLnfb], p.total);
  EXPECT_EQ(p.layer_offset(kFcw, 1), p.offset[kFcw] + 4u * 8 * 8);
  EXPECT_TRUE(ParamLayout::decays(kWte));
  EXPECT_TRUE(ParamLayout::decays(kFcprojw));
  EXPECT_FALSE(ParamLayout::decays(kQkvb));
  EXPECT_FALSE(ParamLayout::decays(kLn1w));
  EXPECT_STREQ(ParamLayout::name(kAttprojw), "attprojw");
}

}  // namespace
}  // namespace gpt2
