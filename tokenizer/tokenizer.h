#ifndef GPT2_TOKENIZER_TOKENIZER_H
#define GPT2_TOKENIZER_TOKENIZER_H

// GPT-2 byte-level BPE tokenizer (OpenAI's encoder.json + vocab.bpe).
// encode() reproduces tiktoken's "gpt2" encode_ordinary exactly: text is split by GPT-2's
// pre-tokenizer regex (PCRE2, UTF + UCP, JIT), each piece is mapped to its UTF-8 bytes and merged
// by BPE, always merging the adjacent pair whose concatenation has the lowest rank (leftmost on ties).
// See docs/tokenizer.md.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpt2 {

class Tokenizer {
 public:
  static constexpr uint32_t kEndOfText = 50256;

  // Loads OpenAI's encoder.json + vocab.bpe; std::runtime_error naming the file on any problem.
  static Tokenizer from_files(const std::string& encoder_json, const std::string& vocab_bpe);
  // Looks in $GPT2_VOCAB_DIR, then data/gpt2/ (the cache scripts/get_gpt2_vocab.sh fills).
  static Tokenizer from_default_location();
  static std::string default_dir();  // where from_default_location looks
  // From already parsed files (parse_encoder_json / parse_vocab_bpe); names are for messages.
  static Tokenizer from_parsed(const std::vector<std::pair<std::string, uint64_t>>& encoder_entries,
                               const std::vector<std::pair<std::string, std::string>>& merges,
                               const std::string& encoder_json, const std::string& vocab_bpe);

  // == tiktoken gpt2 encode_ordinary; thread-safe. "<|endoftext|>" in the text is ordinary text.
  // Invalid UTF-8 throws std::runtime_error("invalid UTF-8 at byte offset N ..."); use
  // replace_invalid_utf8() first for Python's errors="replace" behaviour.
  std::vector<uint32_t> encode(std::string_view utf8) const;
  // Appends the ids to `out` (avoids a copy when encoding many documents into one stream).
  void encode_append(std::string_view utf8, std::vector<uint32_t>& out) const;

  // Concatenated token bytes; may end in a partial UTF-8 sequence. Ids >= vocab_size() throw.
  std::string decode(const uint32_t* ids, size_t n) const;
  std::string decode(const std::vector<uint32_t>& ids) const;
  // Bytes of one token (the special token decodes to "<|endoftext|>").
  const std::string& token_bytes(uint32_t id) const;

  size_t vocab_size() const;  // 50257

  // Writes llm.c's decode-only tokenizer file (header of 256 uint32: 20240328, version 2,
  // vocab size, EOT id; then per token: uint8 length + bytes).
  void write_llmc_file(const std::string& path) const;
  // Reads such a file (versions 1 and 2) back into id -> bytes; used by tests and tools.
  static std::vector<std::string> read_llmc_file(const std::string& path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Returns the offset of the first invalid UTF-8 byte (overlong forms, surrogates and code points
// above U+10FFFF are invalid), or std::string_view::npos when the text is valid.
size_t find_invalid_utf8(std::string_view text);
// Replaces every maximal invalid subsequence with U+FFFD, like Python's bytes.decode(errors="replace").
std::string replace_invalid_utf8(std::string_view text);

// encoder.json -> (token bytes, id) pairs, GPT-2's byte map undone ("<|endoftext|>" kept as text).
// vocab.bpe -> merges in file order as (left bytes, right bytes). Both throw std::runtime_error
// starting with `name` (and ":LINE" for vocab.bpe) on malformed input; fuzzed in test/tokenizer.
std::vector<std::pair<std::string, uint64_t>> parse_encoder_json(std::string_view text, const std::string& name);
std::vector<std::pair<std::string, std::string>> parse_vocab_bpe(std::string_view text, const std::string& name);

// GPT-2's reversible byte <-> printable code point map used in encoder.json / vocab.bpe.
char32_t gpt2_byte_to_codepoint(uint8_t byte);

}  // namespace gpt2

#endif  // GPT2_TOKENIZER_TOKENIZER_H
