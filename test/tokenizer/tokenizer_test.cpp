// Tokenizer tests: exact ids against references generated at test time by node with the npm
// packages tiktoken (WASM) and gpt-3-encoder (test/tokenizer/make_refs.js, run by `make test`
// into build/test/tokenizer/refs), round trips, invalid UTF-8, the llm.c tokenizer file and
// malformed vocabulary files.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace gpt2 {
namespace {

const std::string kRefs = "build/test/tokenizer/refs/";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": missing (run `make test`, which generates the references)");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out << data;
  if (!out) throw std::runtime_error(path + ": write failed");
}

// Splits after every '\n', keeping it (the same split make_refs.js uses).
std::vector<std::string> split_lines_keep(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    size_t end = nl == std::string::npos ? text.size() : nl + 1;
    lines.push_back(text.substr(start, end - start));
    start = end;
  }
  return lines;
}

std::vector<std::string> split_lines_drop(const std::string& text) {
  std::vector<std::string> lines;
  for (const std::string& l : split_lines_keep(text)) {
    lines.push_back(l.back() == '\n' ? l.substr(0, l.size() - 1) : l);
  }
  return lines;
}

std::vector<uint32_t> parse_ids(const std::string& line) {
  std::vector<uint32_t> ids;
  std::istringstream in(line);
  unsigned long v;
  while (in >> v) ids.push_back(static_cast<uint32_t>(v));
  return ids;
}

std::vector<std::vector<uint32_t>> read_id_lines(const std::string& path) {
  std::vector<std::vector<uint32_t>> out;
  for (const std::string& l : split_lines_drop(slurp(path))) out.push_back(parse_ids(l));
  return out;
}

std::string from_hex(const std::string& hex) {
  std::string out;
  std::istringstream in(hex);
  std::string byte;
  if (hex.find(' ') == std::string::npos) {
    for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    return out;
  }
  while (in >> byte) out += static_cast<char>(std::stoi(byte, nullptr, 16));
  return out;
}

class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tok_ = new Tokenizer(Tokenizer::from_default_location()); }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  static const Tokenizer& tok() { return *tok_; }

  // Every line of TEXT_FILE encodes to the same line of IDS_FILE; reports the first mismatches.
  static void expect_lines_match(const std::string& text_file, const std::string& ids_file) {
    const auto lines = split_lines_keep(slurp(text_file));
    const auto refs = read_id_lines(ids_file);
    ASSERT_EQ(lines.size(), refs.size()) << text_file << " vs " << ids_file;
    int mismatches = 0;
    for (size_t i = 0; i < lines.size() && mismatches < 5; ++i) {
      const auto ours = tok().encode(lines[i]);
      if (ours != refs[i]) {
        ++mismatches;
        ADD_FAILURE() << text_file << " line " << i + 1 << ": ids differ from " << ids_file << "\n  text: "
                      << lines[i];
      }
    }
  }

 private:
  static Tokenizer* tok_;
};
Tokenizer* TokenizerTest::tok_ = nullptr;

TEST_F(TokenizerTest, VocabularyShape) {
  EXPECT_EQ(tok().vocab_size(), 50257u);
  EXPECT_EQ(tok().token_bytes(Tokenizer::kEndOfText), "<|endoftext|>");
  EXPECT_EQ(tok().token_bytes(198), "\n");
  EXPECT_EQ(tok().token_bytes(220), " ");
  EXPECT_EQ(tok().token_bytes(0), "!");
  EXPECT_THROW(tok().token_bytes(50257), std::runtime_error);
}

TEST_F(TokenizerTest, StressLinesMatchTiktoken) {
  expect_lines_match(kRefs + "stress.lines.txt", kRefs + "stress.lines.tiktoken");
}

TEST_F(TokenizerTest, StressWholeMatchesTiktoken) {
  const std::string text = slurp("test/tokenizer/stress.txt");
  const auto ref = read_id_lines(kRefs + "stress.whole.tiktoken");
  ASSERT_EQ(ref.size(), 1u);
  EXPECT_EQ(tok().encode(text), ref[0]);
}

// gpt-3-encoder (JavaScript regex) agrees with tiktoken except where JavaScript's \s includes
// U+FEFF (BOM) and Unicode's White_Space (Rust, and our pattern) does not.
TEST_F(TokenizerTest, StressLinesMatchGpt3EncoderExceptBom) {
  const auto lines = split_lines_keep(slurp(kRefs + "stress.lines.txt"));
  const auto tiktoken = read_id_lines(kRefs + "stress.lines.tiktoken");
  const auto gpt3 = read_id_lines(kRefs + "stress.lines.gpt3");
  ASSERT_EQ(lines.size(), gpt3.size());
  ASSERT_EQ(lines.size(), tiktoken.size());
  int bom_lines = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const bool has_bom = lines[i].find("\xEF\xBB\xBF") != std::string::npos;
    bom_lines += has_bom;
    if (has_bom) {
      EXPECT_NE(gpt3[i], tiktoken[i]) << "line " << i + 1 << ": expected the known BOM divergence";
      EXPECT_EQ(tok().encode(lines[i]), tiktoken[i]) << "line " << i + 1;
    } else {
      EXPECT_EQ(tok().encode(lines[i]), gpt3[i]) << "line " << i + 1 << ": " << lines[i];
    }
  }
  EXPECT_GE(bom_lines, 1);
}

TEST_F(TokenizerTest, TinyShakespeareMatchesTiktokenAndGpt3Encoder) {
  const std::string text = slurp("data/tinyshakespeare/input.txt");
  const auto tiktoken = read_id_lines(kRefs + "shakespeare.whole.tiktoken");
  const auto gpt3 = read_id_lines(kRefs + "shakespeare.whole.gpt3");
  ASSERT_EQ(tiktoken.size(), 1u);
  ASSERT_EQ(gpt3.size(), 1u);
  const auto ours = tok().encode(text);
  ASSERT_GT(tiktoken[0].size(), 300000u);  // the reference really is the whole text
  EXPECT_EQ(ours, tiktoken[0]);
  EXPECT_EQ(ours, gpt3[0]);
  EXPECT_EQ(tok().decode(ours), text);
}

TEST_F(TokenizerTest, EveryCodePointOfPlanes0To3And14MatchesTiktoken) {
  expect_lines_match(kRefs + "unicode_sweep.txt", kRefs + "unicode_sweep.tiktoken");
}

TEST_F(TokenizerTest, LongRunsMatchTiktoken) {
  const auto cases = split_lines_drop(slurp(kRefs + "long.cases"));
  const auto refs = read_id_lines(kRefs + "long.tiktoken");
  ASSERT_EQ(cases.size(), refs.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string text = from_hex(cases[i]);
    EXPECT_EQ(tok().encode(text), refs[i]) << "long case " << i;
    EXPECT_EQ(tok().decode(refs[i]), text) << "long case " << i;
  }
}

TEST_F(TokenizerTest, DecodeOfReferenceIdsGivesTheTextBack) {
  const auto lines = split_lines_keep(slurp(kRefs + "stress.lines.txt"));
  const auto refs = read_id_lines(kRefs + "stress.lines.tiktoken");
  ASSERT_EQ(lines.size(), refs.size());
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(tok().decode(refs[i]), lines[i]) << "line " << i + 1;
}

TEST_F(TokenizerTest, RoundTripOfTheUnicodeSweep) {
  const std::string text = slurp(kRefs + "unicode_sweep.txt");
  EXPECT_EQ(tok().decode(tok().encode(text)), text);
}

TEST_F(TokenizerTest, EndOfTextInTextIsOrdinary) {
  const auto ids = tok().encode("a<|endoftext|>b");
  ASSERT_FALSE(ids.empty());
  for (uint32_t id : ids) EXPECT_NE(id, Tokenizer::kEndOfText);
  EXPECT_EQ(tok().decode(ids), "a<|endoftext|>b");
  // and decoding the special id gives its text
  const uint32_t eot = Tokenizer::kEndOfText;
  EXPECT_EQ(tok().decode(&eot, 1), "<|endoftext|>");
}

TEST_F(TokenizerTest, EmptyInput) {
  EXPECT_TRUE(tok().encode("").empty());
  EXPECT_EQ(tok().decode(std::vector<uint32_t>{}), "");
}

TEST_F(TokenizerTest, DecodeRejectsOutOfRangeIds) {
  const std::vector<uint32_t> ids = {15496, 50257};
  EXPECT_THROW(tok().decode(ids), std::runtime_error);
}

TEST_F(TokenizerTest, InvalidUtf8IsAClearError) {
  const auto cases = split_lines_drop(slurp(kRefs + "invalid_utf8.cases"));
  ASSERT_FALSE(cases.empty());
  for (const std::string& hex : cases) {
    const std::string bytes = from_hex(hex);
    const size_t bad = find_invalid_utf8(bytes);
    ASSERT_NE(bad, std::string::npos) << hex;
    try {
      tok().encode(bytes);
      ADD_FAILURE() << hex << ": no error";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("invalid UTF-8 at byte offset " + std::to_string(bad)), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(find_invalid_utf8("abc\xc3"), 3u);
  EXPECT_EQ(find_invalid_utf8("ok \xe2\x82\xac"), std::string::npos);
}

TEST_F(TokenizerTest, ReplacedInvalidUtf8MatchesNodeDecoderThenTiktoken) {
  const auto cases = split_lines_drop(slurp(kRefs + "invalid_utf8.cases"));
  const auto refs = read_id_lines(kRefs + "invalid_utf8.replaced.tiktoken");
  ASSERT_EQ(cases.size(), refs.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string fixed = replace_invalid_utf8(from_hex(cases[i]));
    EXPECT_EQ(find_invalid_utf8(fixed), std::string::npos);
    EXPECT_EQ(tok().encode(fixed), refs[i]) << cases[i];
  }
}

TEST_F(TokenizerTest, EncodeIsThreadSafe) {
  const std::string text = slurp("test/tokenizer/stress.txt");
  const auto expected = tok().encode(text);
  std::vector<std::vector<uint32_t>> results(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep) results[t] = tok().encode(text);
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& r : results) EXPECT_EQ(r, expected);
}

TEST_F(TokenizerTest, LlmcTokenizerFileRoundTrip) {
  const std::string path = "build/test/tokenizer/gpt2_tokenizer_" + std::to_string(getpid()) + ".bin";
  tok().write_llmc_file(path);
  const std::string raw = slurp(path);
  ASSERT_GE(raw.size(), 1024u);
  uint32_t header[256];
  std::memcpy(header, raw.data(), sizeof header);
  EXPECT_EQ(header[0], 20240328u);
  EXPECT_EQ(header[1], 2u);
  EXPECT_EQ(header[2], 50257u);
  EXPECT_EQ(header[3], 50256u);
  for (int i = 4; i < 256; ++i) EXPECT_EQ(header[i], 0u) << "header[" << i << "]";
  size_t expected_size = 1024;
  for (uint32_t id = 0; id < tok().vocab_size(); ++id) expected_size += 1 + tok().token_bytes(id).size();
  EXPECT_EQ(raw.size(), expected_size);
  const auto tokens = Tokenizer::read_llmc_file(path);
  ASSERT_EQ(tokens.size(), tok().vocab_size());
  for (uint32_t id = 0; id < tokens.size(); ++id) ASSERT_EQ(tokens[id], tok().token_bytes(id)) << id;
  // Truncation and a bad magic are errors naming the file.
  spit(path, raw.substr(0, raw.size() - 3));
  EXPECT_THROW(Tokenizer::read_llmc_file(path), std::runtime_error);
  std::string bad = raw;
  bad[0] = 1;
  spit(path, bad);
  try {
    Tokenizer::read_llmc_file(path);
    ADD_FAILURE() << "bad magic accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": bad magic"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

// --- malformed vocabulary files: errors name the file, never crash ---

class BadVocabTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = "build/test/tokenizer/badvocab_" + std::to_string(getpid());
    std::string cmd = "mkdir -p " + dir_;
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    encoder_ = slurp("data/gpt2/encoder.json");
    bpe_ = slurp("data/gpt2/vocab.bpe");
  }
  void TearDown() override {
    std::string cmd = "rm -rf " + dir_;
    (void)std::system(cmd.c_str());
  }
  // Loads the given file contents and returns the error message ("" when it loads).
  std::string load_error(const std::string& encoder, const std::string& bpe) {
    spit(dir_ + "/encoder.json", encoder);
    spit(dir_ + "/vocab.bpe", bpe);
    try {
      Tokenizer::from_files(dir_ + "/encoder.json", dir_ + "/vocab.bpe");
      return "";
    } catch (const std::runtime_error& e) {
      return e.what();
    }
  }
  std::string dir_, encoder_, bpe_;
};

TEST_F(BadVocabTest, OriginalFilesLoad) { EXPECT_EQ(load_error(encoder_, bpe_), ""); }

TEST_F(BadVocabTest, MissingFile) {
  try {
    Tokenizer::from_files(dir_ + "/nope.json", dir_ + "/nope.bpe");
    ADD_FAILURE() << "missing file accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("nope.json"), std::string::npos) << e.what();
  }
}

TEST_F(BadVocabTest, TruncatedEncoderJson) {
  const std::string err = load_error(encoder_.substr(0, encoder_.size() / 2), bpe_);
  EXPECT_NE(err.find("encoder.json"), std::string::npos) << err;
}

TEST_F(BadVocabTest, EncoderJsonNotAnObject) {
  EXPECT_NE(load_error("[1, 2, 3]", bpe_).find("encoder.json"), std::string::npos);
  EXPECT_NE(load_error("{\"a\": {\"b\": 1}}", bpe_).find("nested object"), std::string::npos);
  EXPECT_NE(load_error(std::string(100000, '['), bpe_).find("encoder.json"), std::string::npos);
  EXPECT_NE(load_error("{\"a\": -1}", bpe_).find("negative"), std::string::npos);
}

TEST_F(BadVocabTest, WrongMergeNamesFileAndLine) {
  std::string bpe = bpe_;
  const size_t line3 = bpe.find('\n', bpe.find('\n', bpe.find('\n') + 1) + 1) + 1;  // start of line 4
  bpe.replace(line3, bpe.find('\n', line3) - line3, "x y");
  const std::string err = load_error(encoder_, bpe);
  EXPECT_NE(err.find("vocab.bpe: merge 3 does not produce token 258"), std::string::npos) << err;
}

TEST_F(BadVocabTest, MissingMerges) {
  const std::string err = load_error(encoder_, bpe_.substr(0, bpe_.size() / 2));
  EXPECT_NE(err.find("vocab.bpe"), std::string::npos) << err;
}

TEST_F(BadVocabTest, MalformedMergeLine) {
  std::string bpe = bpe_;
  bpe.insert(bpe.find('\n') + 1, "onlyonetoken\n");
  EXPECT_NE(load_error(encoder_, bpe).find("vocab.bpe:2: expected two"), std::string::npos);
}

}  // namespace
}  // namespace gpt2
