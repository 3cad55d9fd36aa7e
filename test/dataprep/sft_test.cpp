// prepare_data --sft (dataprep/sft.h): exact tokens and loss masks of both JSONL forms, every
// malformed line named by file:line, the packer's invariants (whole examples per block, block
// starts and padding unsupervised, one example per block with --no-pack), truncation, the
// val/train split and file names, and the DataLoader over the packed shards: its rows are
// exactly the blocks and its targets are -1 exactly where the mask is 0.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "dataloader/dataloader.h"
#include "dataloader/loss_mask.h"
#include "dataloader/shard.h"
#include "dataprep/sft.h"
#include "test/temp_dir.h"
#include "test/dataloader/test_util.h"
#include "tokenizer/tokenizer.h"

namespace gpt2 {
namespace {

constexpr uint32_t kEot = 50256;

class Sft : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tok_ = new Tokenizer(Tokenizer::from_default_location()); }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  static SftExample example(const std::string& line, const SftOptions& o = SftOptions()) {
    return sft_example_from_line(line, o, *tok_, "in.jsonl:7");
  }
  static std::vector<uint32_t> enc(const std::string& s) { return tok_->encode(s); }
  static Tokenizer* tok_;
};
Tokenizer* Sft::tok_ = nullptr;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

TEST_F(Sft, PromptCompletionExactTokensAndMask) {
  const SftExample e = example(R"({"prompt": "What is the capital of France?\n", "completion": "Paris."})");
  // "What is the capital of France?\n" = 2061 318 262 3139 286 4881 30 198; "Paris." = 40313 13.
  EXPECT_EQ(e.tokens, (std::vector<uint32_t>{2061, 318, 262, 3139, 286, 4881, 30, 198, 40313, 13, kEot}));
  EXPECT_EQ(e.mask, (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1}));
  // Encoded separately (TRL): "?\n" + "Paris." and the whole string tokenize alike here, but " Paris."
  // as a completion keeps its own leading-space token.
  const SftExample s = example(R"({"prompt": "Q:", "completion": " Paris."})");
  EXPECT_EQ(s.tokens, (std::vector<uint32_t>{48, 25, 6342, 13, kEot}));
  EXPECT_EQ(s.mask, (std::vector<uint8_t>{0, 0, 1, 1, 1}));
  EXPECT_EQ(tok_->decode(s.tokens), "Q: Paris.<|endoftext|>");
}

TEST_F(Sft, FirstTokenIsNeverSupervised) {
  const SftExample e = example(R"({"prompt": "", "completion": "Paris."})");
  EXPECT_EQ(e.tokens, (std::vector<uint32_t>{40313, 13, kEot}));
  EXPECT_EQ(e.mask, (std::vector<uint8_t>{0, 1, 1}));
  const SftExample empty = example(R"({"prompt": "", "completion": ""})");
  EXPECT_EQ(empty.tokens, (std::vector<uint32_t>{kEot}));
  EXPECT_EQ(empty.mask, (std::vector<uint8_t>{0}));
}

TEST_F(Sft, MessagesTemplateExactTokensAndMask) {
  // The worked example of docs/sft.md.
  const SftExample e = example(
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},)"
      R"( {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"},)"
      R"( {"role": "assistant", "content": "Bye."}]})");
  const std::vector<uint32_t> want = {
      3856, 4506, 13, 628,     // "Be brief." "\n\n"             0
      12982, 25, 15902, 198,   // "User" ":" " Hi" "\n"          0
      48902, 25,               // "Assistant" ":"                0
      18435, 0, 198,           // " Hello" "!" "\n"              1
      12982, 25, 47843, 198,   // "User" ":" " Bye" "\n"         0
      48902, 25,               // "Assistant" ":"                0
      47843, 13, kEot};        // " Bye" "." <|endoftext|>       1
  const std::vector<uint8_t> mask = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1};
  EXPECT_EQ(e.tokens, want);
  EXPECT_EQ(e.mask, mask);
  EXPECT_EQ(tok_->decode(e.tokens),
            "Be brief.\n\nUser: Hi\nAssistant: Hello!\nUser: Bye\nAssistant: Bye.<|endoftext|>");
  // Each piece is encoded on its own: the same as encoding the pieces' text one by one.
  std::vector<uint32_t> pieces;
  for (const char* p : {"Be brief.\n\n", "User: Hi\n", "Assistant:", " Hello!", "\n", "User: Bye\n", "Assistant:", " Bye."})
    for (uint32_t id : enc(p)) pieces.push_back(id);
  pieces.push_back(kEot);
  EXPECT_EQ(e.tokens, pieces);
}

TEST_F(Sft, MessagesWithoutSystemStartUnsupervised) {
  const SftExample e =
      example(R"({"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]})");
  std::vector<uint32_t> want = enc("User: 2+2?\n");
  const size_t prompt = want.size() + 2;  // + "Assistant" ":"
  for (uint32_t id : enc("Assistant:")) want.push_back(id);
  for (uint32_t id : enc(" 4")) want.push_back(id);
  want.push_back(kEot);
  EXPECT_EQ(e.tokens, want);
  ASSERT_EQ(e.mask.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(e.mask[i], i >= prompt ? 1 : 0) << i;
  EXPECT_EQ(e.mask.back(), 1);  // the final <|endoftext|> is learned
}

TEST_F(Sft, ConfigurableFieldNames) {
  SftOptions o;
  o.prompt_field = "instruction";
  o.completion_field = "output";
  o.messages_field = "conversation";
  const SftExample e = example(R"({"instruction": "Q:", "output": " Paris."})", o);
  EXPECT_EQ(e.tokens, (std::vector<uint32_t>{48, 25, 6342, 13, kEot}));
  const SftExample m = example(R"({"conversation": [{"role": "assistant", "content": "Paris."}]})", o);
  EXPECT_EQ(tok_->decode(m.tokens), "Assistant: Paris.<|endoftext|>");
  expect_error([&] { example(R"({"prompt": "Q:", "completion": "A"})", o); }, {"in.jsonl:7: neither"});
}

TEST_F(Sft, MalformedLinesAreNamedByFileAndLine) {
  expect_error([] { example(R"({"text": "plain"})"); },
               {"in.jsonl:7: neither \"prompt\"/\"completion\" nor \"messages\""});
  expect_error([] { example(R"({"prompt": "a", "completion": "b", "messages": []})"); },
               {"in.jsonl:7: has both \"messages\""});
  expect_error([] { example(R"({"prompt": "a"})"); }, {"in.jsonl:7: the line has no \"completion\" field"});
  expect_error([] { example(R"({"prompt": "a", "completion": 5})"); },
               {"in.jsonl:7: the line field \"completion\" is not a string (number)"});
  expect_error([] { example(R"({"messages": [{"role": "tool", "content": "x"}, {"role": "assistant", "content": "y"}]})"); },
               {"in.jsonl:7: message 1: unknown role \"tool\" (expected system, user or assistant)"});
  expect_error([] { example(R"({"messages": [{"role": "user", "content": "x"}, {"role": "system", "content": "y"}]})"); },
               {"in.jsonl:7: message 2: a system message must be the first message"});
  expect_error([] { example(R"({"messages": [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]})"); },
               {"in.jsonl:7: the last message must be the assistant's (got \"user\")"});
  expect_error([] { example(R"({"messages": [{"role": "user"}]})"); }, {"in.jsonl:7: message 1 has no \"content\" field"});
  expect_error([] { example(R"({"messages": []})"); }, {"in.jsonl:7: \"messages\" must be a non-empty array"});
  expect_error([] { example(R"({"messages": ["hi"]})"); }, {"in.jsonl:7: message 1 is not a JSON object"});
  expect_error([] { example(R"([1, 2])"); }, {"in.jsonl:7: expected a JSON object"});
  expect_error([] { example(R"({"prompt": "unterminated)"); }, {"in.jsonl:7: ", "parse error"});
}

// --- packing ---

SftExample synthetic(uint32_t id, size_t n) {
  SftExample e;
  for (size_t i = 0; i < n; ++i) {
    e.tokens.push_back(id * 100 + static_cast<uint32_t>(i));
    e.mask.push_back(i == 0 ? 0 : 1);
  }
  return e;
}

struct Blocks {
  std::vector<std::vector<uint32_t>> tokens;
  std::vector<std::vector<uint8_t>> mask;
  std::vector<uint32_t> examples;
};

Blocks pack(const std::vector<SftExample>& examples, int T, bool packed) {
  Blocks b;
  SftPacker p(T, packed, [&](const uint32_t* t, const uint8_t* m, uint32_t n) {
    b.tokens.emplace_back(t, t + T);
    b.mask.emplace_back(m, m + T);
    b.examples.push_back(n);
  });
  for (const SftExample& e : examples) p.add(e);
  p.finish();
  EXPECT_EQ(p.blocks(), b.tokens.size());
  return b;
}

TEST(SftPacker, GreedyInInputOrderNeverCrossesABlock) {
  // T = 10, lengths 4 3 5 10 2 2 2 2 1: blocks [4 3 | pad 3], [5 | pad 5], [10], [2 2 2 2 1 | pad 1].
  std::vector<SftExample> ex;
  const std::vector<size_t> lengths = {4, 3, 5, 10, 2, 2, 2, 2, 1};
  for (size_t i = 0; i < lengths.size(); ++i) ex.push_back(synthetic(static_cast<uint32_t>(i + 1), lengths[i]));
  const Blocks b = pack(ex, 10, true);
  ASSERT_EQ(b.tokens.size(), 4u);
  EXPECT_EQ(b.examples, (std::vector<uint32_t>{2, 1, 1, 5}));
  EXPECT_EQ(b.tokens[0], (std::vector<uint32_t>{100, 101, 102, 103, 200, 201, 202, kEot, kEot, kEot}));
  EXPECT_EQ(b.mask[0], (std::vector<uint8_t>{0, 1, 1, 1, 0, 1, 1, 0, 0, 0}));
  EXPECT_EQ(b.tokens[1], (std::vector<uint32_t>{300, 301, 302, 303, 304, kEot, kEot, kEot, kEot, kEot}));
  EXPECT_EQ(b.tokens[2], ex[3].tokens);
  EXPECT_EQ(b.tokens[3], (std::vector<uint32_t>{500, 501, 600, 601, 700, 701, 800, 801, 900, kEot}));
  EXPECT_EQ(b.mask[3], (std::vector<uint8_t>{0, 1, 0, 1, 0, 1, 0, 1, 0, 0}));
  for (const auto& m : b.mask) EXPECT_EQ(m[0], 0);  // every block starts unsupervised
}

TEST(SftPacker, NoPackPutsOneExamplePerBlock) {
  std::vector<SftExample> ex;
  for (uint32_t i = 1; i <= 5; ++i) ex.push_back(synthetic(i, i));
  const Blocks b = pack(ex, 8, false);
  ASSERT_EQ(b.tokens.size(), 5u);
  for (size_t k = 0; k < 5; ++k) {
    EXPECT_EQ(b.examples[k], 1u);
    for (size_t i = 0; i < 8; ++i) {
      EXPECT_EQ(b.tokens[k][i], i <= k ? ex[k].tokens[i] : kEot) << k << " " << i;
      EXPECT_EQ(b.mask[k][i], i <= k ? ex[k].mask[i] : 0) << k << " " << i;
    }
  }
}

TEST(SftPacker, RejectsExamplesLongerThanT) {
  SftPacker p(4, true, [](const uint32_t*, const uint8_t*, uint32_t) {});
  expect_error([&] { p.add(synthetic(1, 5)); }, {"example of 5 tokens does not fit T=4"});
}

// --- the whole mode, through files ---

// Examples 0..n-1: prompt "Question k:" and a completion of k%7+1 words, for varied lengths.
std::string make_jsonl(int n) {
  std::string s;
  for (int k = 0; k < n; ++k) {
    std::string completion;
    for (int w = 0; w <= k % 7; ++w) completion += " word" + std::to_string(w);
    if (k % 5 == 3)
      s += R"({"messages": [{"role": "user", "content": "Question )" + std::to_string(k) +
           R"("}, {"role": "assistant", "content": ")" + completion.substr(1) + "\"}]}\n";
    else
      s += R"({"prompt": "Question )" + std::to_string(k) + R"(:", "completion": ")" + completion + "\"}\n";
    if (k % 9 == 4) s += "\n";  // blank lines are skipped
  }
  return s;
}

// Reference layout, computed independently: greedy whole examples per block of T, pad 50256/0.
void expected_layout(const std::vector<SftExample>& ex, size_t T, bool packed, std::vector<uint32_t>& tokens,
                     std::vector<uint8_t>& mask) {
  size_t used = 0;
  auto close = [&] {
    for (; used < T; ++used) {
      tokens.push_back(kEot);
      mask.push_back(0);
    }
    used = 0;
  };
  for (const SftExample& e : ex) {
    if (used > 0 && (!packed || used + e.tokens.size() > T)) close();
    tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
    mask.insert(mask.end(), e.mask.begin(), e.mask.end());
    used += e.tokens.size();
  }
  if (used > 0) close();
  tokens.push_back(kEot);  // the trailing pad token
  mask.push_back(0);
}

TEST_F(Sft, RunWritesPackedShardsAndSidecarsTheDataLoaderReadsRowByRow) {
  TempDir dir;
  const std::string in = dir.file("data.jsonl");
  const int n = 60;
  write_text(in, make_jsonl(n));
  // The examples as the library makes them (each checked against its own line above).
  std::vector<SftExample> all;
  {
    std::ifstream f(in);
    std::string line;
    while (std::getline(f, line))
      if (!line.empty()) all.push_back(example(line));
  }
  ASSERT_EQ(all.size(), static_cast<size_t>(n));
  size_t longest = 0;
  for (const SftExample& e : all) longest = std::max(longest, e.tokens.size());
  ASSERT_LE(longest, 24u);  // none truncated at T = 24
  ASSERT_GE(longest, 13u);  // but long enough that packing leaves gaps
  for (bool packed : {true, false}) {
    SCOPED_TRACE(packed ? "--pack" : "--no-pack");
    SftOptions o;
    o.inputs = {in};
    o.out_prefix = dir.file(packed ? "out/p" : "out/np");
    o.T = 24;
    o.pack = packed;
    o.val_examples = 6;
    o.verbose = false;
    const SftSummary s = run_sft(o, *tok_);
    EXPECT_EQ(s.examples, 60u);
    EXPECT_EQ(s.val_examples, 6u);
    EXPECT_EQ(s.train_examples, 54u);
    EXPECT_EQ(s.truncated, 0u);
    const std::string val = o.out_prefix + "_val_000000.bin", train = o.out_prefix + "_train_000001.bin";
    EXPECT_EQ(s.written, (std::vector<std::string>{o.out_prefix + "_val_000000.mask", val,
                                                   o.out_prefix + "_train_000001.mask", train}));
    for (int split = 0; split < 2; ++split) {
      const std::vector<SftExample> part(all.begin() + (split ? 6 : 0), split ? all.end() : all.begin() + 6);
      std::vector<uint32_t> want_tokens;
      std::vector<uint8_t> want_mask;
      expected_layout(part, 24, packed, want_tokens, want_mask);
      const std::string path = split ? train : val;
      const std::vector<uint32_t> tokens = read_shard(path, 50257);
      LossMaskInfo info;
      const std::vector<uint8_t> mask = read_loss_mask(loss_mask_path(path), &info);
      EXPECT_EQ(tokens, want_tokens);
      EXPECT_EQ(mask, want_mask);
      EXPECT_EQ(info.T, 24);
      EXPECT_EQ(info.examples, part.size());
      const uint64_t blocks = split ? s.train_blocks : s.val_blocks;
      EXPECT_EQ(tokens.size(), blocks * 24 + 1);
      if (!packed) EXPECT_EQ(blocks, part.size());
      else EXPECT_LT(blocks, part.size());
      for (uint64_t b = 0; b <= blocks; ++b) EXPECT_EQ(mask[b * 24], 0) << "block start " << b;
    }
    uint64_t supervised = 0;
    for (const SftExample& e : all)
      for (uint8_t m : e.mask) supervised += m;
    EXPECT_EQ(s.supervised, supervised);

    // The DataLoader with B=2: row b of window w is block 2w+b, targets shifted by one and -1
    // exactly where the mask is 0.
    const std::vector<uint32_t> tokens = read_shard(train);
    const std::vector<uint8_t> mask = read_loss_mask(loss_mask_path(train));
    DataLoaderOptions lo;
    lo.pattern = o.out_prefix + "_train_*.bin";
    lo.B = 2;
    lo.T = 24;
    DataLoader loader(lo);
    ASSERT_TRUE(loader.has_loss_mask());
    ASSERT_EQ(loader.files(), std::vector<std::string>{train});
    const uint64_t windows = s.train_blocks / 2;
    ASSERT_EQ(loader.samples_per_epoch(), windows);
    std::vector<int32_t> x(48), y(48);
    for (uint64_t w = 0; w < windows; ++w) {
      loader.next_batch(x.data(), y.data());
      for (int b = 0; b < 2; ++b)
        for (int t = 0; t < 24; ++t) {
          const size_t tok = (2 * w + b) * 24 + t;  // token index in the shard
          ASSERT_EQ(x[b * 24 + t], static_cast<int32_t>(tokens[tok]));
          ASSERT_EQ(y[b * 24 + t], mask[tok + 1] ? static_cast<int32_t>(tokens[tok + 1]) : -1);
        }
      // The last target of each row is the next block's first token (or the trailing pad): masked.
      EXPECT_EQ(y[23], -1);
      EXPECT_EQ(y[47], -1);
    }
  }
}

TEST_F(Sft, TruncationCountsOrRefusesNamingTheLine) {
  TempDir dir;
  const std::string in = dir.file("long.jsonl");
  write_text(in, "{\"prompt\": \"a\", \"completion\": \" b\"}\n"
                 "{\"prompt\": \"one two three\", \"completion\": \" four five six seven eight\"}\n");
  SftOptions o;
  o.inputs = {in};
  o.out_prefix = dir.file("t/x");
  o.T = 6;
  o.verbose = false;
  const SftSummary s = run_sft(o, *tok_);
  EXPECT_EQ(s.truncated, 1u);
  // Example 2 is 3 + 5 + 1 = 9 tokens, cut to its first 6: it no longer fits after example 1 (3 tokens).
  const std::vector<uint32_t> tokens = read_shard(dir.file("t/x_train_000001.bin"));
  const std::vector<uint8_t> mask = read_loss_mask(dir.file("t/x_train_000001.mask"));
  std::vector<uint32_t> want = {64, 275, kEot, kEot, kEot, kEot};
  for (uint32_t id : enc("one two three")) want.push_back(id);
  for (uint32_t id : enc(" four five six")) want.push_back(id);
  want.push_back(kEot);
  EXPECT_EQ(tokens, want);
  EXPECT_EQ(mask, (std::vector<uint8_t>{0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0}));

  o.truncate = false;
  o.out_prefix = dir.file("e/x");
  expect_error([&] { run_sft(o, *tok_); },
               {in + ":2: example of 9 tokens is longer than --seq-len 6 (--sft-truncate error"});
  EXPECT_FALSE(exists(dir.file("e/x_train_000001.bin")));
  EXPECT_FALSE(exists(dir.file("e/x_train_000001.mask")));
  EXPECT_FALSE(exists(dir.file("e/x_train_000001.bin.tmp")));
}

TEST_F(Sft, BadLineInTheSecondFileIsNamedAndNothingIsWritten) {
  TempDir dir;
  write_text(dir.file("a.jsonl"), "{\"prompt\": \"a\", \"completion\": \" b\"}\n");
  write_text(dir.file("b.jsonl"), "{\"prompt\": \"a\", \"completion\": \" b\"}\n\n{\"text\": \"c\"}\n");
  SftOptions o;
  o.inputs = {dir.file("a.jsonl"), dir.file("b.jsonl")};
  o.out_prefix = dir.file("o/x");
  o.T = 8;
  o.verbose = false;
  expect_error([&] { run_sft(o, *tok_); }, {dir.file("b.jsonl") + ":3: neither"});
  EXPECT_FALSE(exists(dir.file("o/x_train_000001.bin")));
  EXPECT_FALSE(exists(dir.file("o/x_train_000001.mask")));
}

TEST_F(Sft, TrainShardsHoldWholeBlocksAndStaleOutputsGo) {
  TempDir dir;
  std::string text;
  for (int k = 0; k < 10; ++k) text += "{\"prompt\": \"p\", \"completion\": \" c\"}\n";  // 3 tokens each
  write_text(dir.file("d.jsonl"), text);
  SftOptions o;
  o.inputs = {dir.file("d.jsonl")};
  o.out_prefix = dir.file("x");
  o.T = 4;
  o.pack = false;         // 10 blocks
  o.shard_tokens = 11;    // -> 2 blocks per shard: 5 train shards of 2*4+1 tokens
  o.verbose = false;
  SftSummary s = run_sft(o, *tok_);
  EXPECT_EQ(s.train_blocks, 10u);
  for (int k = 1; k <= 5; ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "x_train_%06d", k);
    EXPECT_EQ(ShardFile(dir.file(std::string(name) + ".bin")).count(), 9u) << name;
    EXPECT_EQ(LossMaskFile(dir.file(std::string(name) + ".mask")).info().examples, 2u) << name;
  }
  EXPECT_FALSE(exists(dir.file("x_val_000000.bin")));
  // A re-run with bigger shards removes shards and sidecars it no longer writes.
  o.shard_tokens = 0;
  s = run_sft(o, *tok_);
  EXPECT_TRUE(exists(dir.file("x_train_000001.bin")));
  EXPECT_EQ(ShardFile(dir.file("x_train_000001.bin")).count(), 41u);
  for (const char* gone : {"x_train_000002.bin", "x_train_000002.mask", "x_train_000005.mask"})
    EXPECT_FALSE(exists(dir.file(gone))) << gone;
}

}  // namespace
}  // namespace gpt2
