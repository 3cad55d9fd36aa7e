// libFuzzer target for the vocabulary parsers (encoder.json, vocab.bpe) and for encode/decode.
// Every input is fed to parse_encoder_json and parse_vocab_bpe; malformed input must end in
// std::runtime_error, nothing else (a crash, sanitizer report or other exception fails the run).
// When the input is valid UTF-8 it is also encoded with the real GPT-2 vocabulary (data/gpt2)
// and must decode back to itself.
#include "tokenizer/tokenizer.h"

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const gpt2::Tokenizer tok = gpt2::Tokenizer::from_default_location();
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::pair<std::string, uint64_t>> entries;
  std::vector<std::pair<std::string, std::string>> merges;
  bool parsed_json = false, parsed_bpe = false;
  try {
    entries = gpt2::parse_encoder_json(input, "fuzz/encoder.json");
    parsed_json = true;
  } catch (const std::runtime_error&) {
  }
  try {
    merges = gpt2::parse_vocab_bpe(input, "fuzz/vocab.bpe");
    parsed_bpe = true;
  } catch (const std::runtime_error&) {
  }
  if (parsed_json || parsed_bpe) {
    try {
      gpt2::Tokenizer::from_parsed(entries, merges, "fuzz/encoder.json", "fuzz/vocab.bpe");
    } catch (const std::runtime_error&) {
    }
  }
  if (gpt2::find_invalid_utf8(input) == std::string_view::npos) {
    if (tok.decode(tok.encode(input)) != input) std::abort();  // round trip must be exact
  } else {
    try {
      tok.encode(input);
      std::abort();  // invalid UTF-8 must be rejected
    } catch (const std::runtime_error&) {
    }
    const std::string fixed = gpt2::replace_invalid_utf8(input);
    if (gpt2::find_invalid_utf8(fixed) != std::string_view::npos) std::abort();
    if (tok.decode(tok.encode(fixed)) != fixed) std::abort();
  }
  return 0;
}
