#include "tokenizer/tokenizer.h"

#include "util/checked_io.h"
#include "util/rng.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace gpt2 {

namespace {

// Unicode White_Space, spelled out: Rust's regex `\s` (tiktoken) is exactly this property, while
// PCRE2's UCP `\s` additionally matches U+180E, so the pattern below never uses `\s` directly.
constexpr const char* kWhiteSpace =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

// Letters and numbers assigned in Unicode 15.0-16.0. Debian 12's PCRE2 (10.42) implements
// Unicode 14, tiktoken's Rust regex Unicode 16; without these ranges, text in e.g. Kawi, Garay,
// Todhri or CJK extensions H/I would split differently. Derived from Unicode 17 data (Node's ICU)
// restricted to what tiktoken classifies as letter/number; checked by the all-code-point sweep
// in test/tokenizer.
constexpr const char* kLettersSinceUnicode14 =
    "\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}\\x{105C0}-\\x{105F3}"
    "\\x{10D4A}-\\x{10D65}\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC4}\\x{1123F}-\\x{11240}"
    "\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}"
    "\\x{113D3}\\x{11BC0}-\\x{11BE0}\\x{11F02}\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}"
    "\\x{1342F}\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}\\x{16100}-\\x{1611D}\\x{16D40}-"
    "\\x{16D6C}\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}\\x{1E030}-\\x{1E06D}"
    "\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}\\x{2B739}\\x{2EBF0}-\\x{2EE5D}"
    "\\x{31350}-\\x{323AF}";
constexpr const char* kNumbersSinceUnicode14 =
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}\\x{11F50}-\\x{11F59}"
    "\\x{16130}-\\x{16139}\\x{16D70}-\\x{16D79}\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}"
    "\\x{1E4F0}-\\x{1E4F9}\\x{1E5F1}-\\x{1E5FA}";

// GPT-2's pre-tokenizer: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
std::string gpt2_pattern() {
  const std::string ws = kWhiteSpace;
  const std::string letter = std::string("\\p{L}") + kLettersSinceUnicode14;
  const std::string number = std::string("\\p{N}") + kNumbersSinceUnicode14;
  return "'s|'t|'re|'ve|'m|'ll|'d| ?[" + letter + "]+| ?[" + number + "]+| ?[^" + ws + letter + number +
         "]+|[" + ws + "]+(?![^" + ws + "])|[" + ws + "]+";
}

// GPT-2's byte -> code point table: printable Latin-1 bytes map to themselves, the other 68 bytes
// to U+0100.. in byte order, so every byte has a visible, non-whitespace character in the files.
bool byte_is_self_mapped(unsigned b) {
  return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

// Hash of a short byte string (pre-tokens average ~4 bytes): 8 bytes at a time through splitmix64_mix,
// inline, cheaper than std::hash's out-of-line murmur.
uint64_t hash_piece(std::string_view s) {
  uint64_t h = kSplitMix64Gamma ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = splitmix64_mix(h ^ w);
  }
  if (i < s.size()) {
    uint64_t w = 0;
    std::memcpy(&w, s.data() + i, s.size() - i);
    h = splitmix64_mix(h ^ w ^ 0xff51afd7ed558ccdULL);
  }
  return h;
}

struct PieceHash {
  size_t operator()(std::string_view s) const { return static_cast<size_t>(hash_piece(s)); }
};

size_t next_pow2(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw std::runtime_error(path + ": read error");
  return ss.str();
}

// Length of the valid UTF-8 sequence starting at s[i], or 0 if the bytes there are not one.
// Follows Unicode Table 3-7 (no overlongs, no surrogates, nothing above U+10FFFF).
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + 1 >= s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if (i + k >= s.size() || (byte(i + k) & 0xC0) != 0x80) return 0;
  }
  return len;
}

// Decodes one code point of valid UTF-8 (as produced by the JSON parser / checked beforehand).
char32_t decode_utf8_at(std::string_view s, size_t i, size_t len) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  switch (len) {
    case 1: return byte(i);
    case 2: return ((byte(i) & 0x1F) << 6) | (byte(i + 1) & 0x3F);
    case 3: return ((byte(i) & 0x0F) << 12) | ((byte(i + 1) & 0x3F) << 6) | (byte(i + 2) & 0x3F);
    default:
      return ((byte(i) & 0x07) << 18) | ((byte(i + 1) & 0x3F) << 12) | ((byte(i + 2) & 0x3F) << 6) |
             (byte(i + 3) & 0x3F);
  }
}

// Only object-of-(string -> non-negative integer) at the top level is accepted; anything else
// stops the parse at once, so hostile input (deep nesting, huge arrays) never builds a DOM.
class EncoderJsonHandler : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::vector<std::pair<std::string, uint64_t>> entries;
  std::string problem;

  bool null() override { return fail("expected an integer token id, got null"); }
  bool boolean(bool) override { return fail("expected an integer token id, got a boolean"); }
  bool number_integer(number_integer_t v) override {
    if (v < 0) return fail("negative token id " + std::to_string(v));
    return value(static_cast<uint64_t>(v));
  }
  bool number_unsigned(number_unsigned_t v) override { return value(v); }
  bool number_float(number_float_t, const string_t&) override {
    return fail("expected an integer token id, got a float");
  }
  bool string(string_t&) override { return fail("expected an integer token id, got a string"); }
  bool binary(binary_t&) override { return fail("unexpected binary value"); }
  bool start_object(std::size_t) override {
    if (depth_ != 0) return fail("nested object (expected {\"token\": id, ...})");
    ++depth_;
    return true;
  }
  bool key(string_t& k) override {
    key_ = k;
    have_key_ = true;
    return true;
  }
  bool end_object() override {
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override { return fail("unexpected array (expected an object)"); }
  bool end_array() override { return fail("unexpected array"); }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    if (problem.empty()) problem = "JSON parse error at byte " + std::to_string(position) + ": " + ex.what();
    return false;
  }

 private:
  bool value(uint64_t v) {
    if (depth_ != 1 || !have_key_) return fail("expected a top-level object of token -> id");
    entries.emplace_back(std::move(key_), v);
    have_key_ = false;
    return true;
  }
  bool fail(const std::string& why) {
    if (problem.empty()) problem = why;
    return false;
  }
  int depth_ = 0;
  bool have_key_ = false;
  std::string key_;
};

}  // namespace

char32_t gpt2_byte_to_codepoint(uint8_t byte) {
  if (byte_is_self_mapped(byte)) return byte;
  unsigned n = 0;  // rank of this byte among the non-self-mapped ones
  for (unsigned b = 0; b < byte; ++b) n += byte_is_self_mapped(b) ? 0 : 1;
  return 256 + n;
}

size_t find_invalid_utf8(std::string_view text) {
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, text.data() + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    const size_t len = utf8_sequence_length(text, i);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string replace_invalid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const size_t len = utf8_sequence_length(text, i);
    if (len > 0) {
      out.append(text.data() + i, len);
      i += len;
      continue;
    }
    // Maximal subpart of an ill-formed sequence: the longest prefix of a valid sequence
    // (Unicode "U+FFFD substitution of maximal subparts", which Python's decoder follows).
    const unsigned char b0 = static_cast<unsigned char>(text[i]);
    size_t want = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) want = 2;
    else if (b0 >= 0xE0 && b0 <= 0xEF) { want = 3; if (b0 == 0xE0) lo = 0xA0; if (b0 == 0xED) hi = 0x9F; }
    else if (b0 >= 0xF0 && b0 <= 0xF4) { want = 4; if (b0 == 0xF0) lo = 0x90; if (b0 == 0xF4) hi = 0x8F; }
    size_t consumed = 1;
    if (want > 0 && i + 1 < text.size()) {
      const unsigned char b1 = static_cast<unsigned char>(text[i + 1]);
      if (b1 >= lo && b1 <= hi) {
        consumed = 2;
        while (consumed < want && i + consumed < text.size() &&
               (static_cast<unsigned char>(text[i + consumed]) & 0xC0) == 0x80) {
          ++consumed;
        }
      }
    }
    out += "\xEF\xBF\xBD";
    i += consumed;
  }
  return out;
}

struct Tokenizer::Impl {
  std::vector<std::string> id_to_bytes;
  uint32_t byte_to_id[256] = {};
  uint32_t eot_id = kEndOfText;

  // bytes -> id (ordinary tokens only), open addressing. A slot packs the upper 32 bits of the
  // hash with id + 1 (0 = empty), so probes that cannot match never touch the token's bytes.
  std::vector<uint64_t> token_slots;
  size_t token_mask = 0;

  uint32_t find_token(std::string_view s) const {  // id or UINT32_MAX
    const uint64_t h = hash_piece(s);
    const uint64_t fingerprint = h >> 32;
    size_t i = h & token_mask;
    while (true) {
      const uint64_t slot = token_slots[i];
      if (slot == 0) return UINT32_MAX;
      if ((slot >> 32) == fingerprint) {
        const auto id = static_cast<uint32_t>(slot) - 1;
        if (id_to_bytes[id] == s) return id;
      }
      i = (i + 1) & token_mask;
    }
  }

  void insert_token(uint32_t id) {
    const uint64_t h = hash_piece(id_to_bytes[id]);
    size_t i = h & token_mask;
    while (token_slots[i] != 0) i = (i + 1) & token_mask;
    token_slots[i] = ((h >> 32) << 32) | (static_cast<uint64_t>(id) + 1);
  }

  // (left id, right id) -> id of their concatenation, for every split of every ordinary token.
  // tiktoken merges any adjacent pair whose concatenation is a token, lowest rank first; for GPT-2
  // rank == id, so this table is exactly its merge rule.
  struct PairSlot {
    uint64_t key;
    uint32_t merged;
  };
  static constexpr uint64_t kEmptyPair = ~0ULL;
  std::vector<PairSlot> pair_slots;
  size_t pair_mask = 0;

  pcre2_code* regex = nullptr;
  bool jit = false;

  ~Impl() {
    if (regex) pcre2_code_free(regex);
  }

  uint32_t find_pair(uint32_t a, uint32_t b) const {  // merged id or UINT32_MAX
    const uint64_t key = (static_cast<uint64_t>(a) << 32) | b;
    size_t h = splitmix64_mix(key) & pair_mask;
    while (true) {
      const PairSlot& slot = pair_slots[h];
      if (slot.key == key) return slot.merged;
      if (slot.key == kEmptyPair) return UINT32_MAX;
      h = (h + 1) & pair_mask;
    }
  }

  void build_tables() {
    token_slots.assign(next_pow2(id_to_bytes.size() * 2 + 1), 0);
    token_mask = token_slots.size() - 1;
    for (uint32_t id = 0; id < id_to_bytes.size(); ++id) {
      if (id != eot_id) insert_token(id);
    }
    std::vector<std::pair<uint64_t, uint32_t>> pairs;
    for (uint32_t id = 0; id < id_to_bytes.size(); ++id) {
      if (id == eot_id) continue;
      const std::string_view t = id_to_bytes[id];
      for (size_t k = 1; k < t.size(); ++k) {
        const uint32_t a = find_token(t.substr(0, k));
        if (a == UINT32_MAX) continue;
        const uint32_t b = find_token(t.substr(k));
        if (b == UINT32_MAX) continue;
        pairs.emplace_back((static_cast<uint64_t>(a) << 32) | b, id);
      }
    }
    pair_slots.assign(next_pow2(pairs.size() * 2 + 1), PairSlot{kEmptyPair, 0});
    pair_mask = pair_slots.size() - 1;
    for (const auto& [key, merged] : pairs) {
      size_t h = splitmix64_mix(key) & pair_mask;
      while (pair_slots[h].key != kEmptyPair) h = (h + 1) & pair_mask;
      pair_slots[h] = PairSlot{key, merged};
    }
  }

  void compile_regex() {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    const std::string pattern = gpt2_pattern();
    regex = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
    if (!regex) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(error_code, msg, sizeof msg);
      throw std::runtime_error(std::string("tokenizer: cannot compile the GPT-2 regex: ") +
                               reinterpret_cast<const char*>(msg));
    }
    // JIT is an optimisation only: without it (unsupported CPU) pcre2_match interprets.
    jit = pcre2_jit_compile(regex, PCRE2_JIT_COMPLETE) == 0;
  }

  // BPE on one pre-token: start from single bytes, repeatedly merge the adjacent pair with the
  // lowest merged id (leftmost on ties), as tiktoken's byte_pair_merge does.
  void bpe(std::string_view piece, std::vector<uint32_t>& parts, std::vector<uint32_t>& ranks,
           std::vector<uint32_t>& out) const {
    const size_t n = piece.size();
    if (n > kLongPiece) {
      bpe_long(piece, out);
      return;
    }
    parts.resize(n);
    for (size_t i = 0; i < n; ++i) parts[i] = byte_to_id[static_cast<unsigned char>(piece[i])];
    ranks.resize(n);  // ranks[i] = merged id of (parts[i], parts[i+1]) or UINT32_MAX
    for (size_t i = 0; i + 1 < n; ++i) ranks[i] = find_pair(parts[i], parts[i + 1]);
    size_t len = n;
    while (len > 1) {
      uint32_t best = UINT32_MAX;
      size_t at = 0;
      for (size_t i = 0; i + 1 < len; ++i) {
        if (ranks[i] < best) {
          best = ranks[i];
          at = i;
        }
      }
      if (best == UINT32_MAX) break;
      // parts[at] absorbs parts[at+1]; shift the tail (and its pair ranks) left by one.
      parts[at] = best;
      for (size_t i = at + 1; i + 1 < len; ++i) parts[i] = parts[i + 1];
      for (size_t i = at + 1; i + 2 < len; ++i) ranks[i] = ranks[i + 1];
      --len;
      if (at + 1 < len) ranks[at] = find_pair(parts[at], parts[at + 1]);
      if (at > 0) ranks[at - 1] = find_pair(parts[at - 1], parts[at]);
    }
    out.insert(out.end(), parts.begin(), parts.begin() + len);
  }

  // The scan above is O(n^2) per piece; a megabyte-long piece ("=====...", base64 runs) would
  // take hours. Same merge order with a min-heap keyed (merged id, position), O(n log n):
  // stale heap entries are skipped by checking them against the current list.
  static constexpr size_t kLongPiece = 256;
  void bpe_long(std::string_view piece, std::vector<uint32_t>& out) const {
    const size_t n = piece.size();
    constexpr uint32_t kNone = UINT32_MAX;
    std::vector<uint32_t> id(n), next(n), prev(n), rank(n);
    std::vector<bool> alive(n, true);
    for (size_t i = 0; i < n; ++i) {
      id[i] = byte_to_id[static_cast<unsigned char>(piece[i])];
      next[i] = i + 1 < n ? static_cast<uint32_t>(i + 1) : kNone;
      prev[i] = i > 0 ? static_cast<uint32_t>(i - 1) : kNone;
    }
    using Entry = std::pair<uint32_t, uint32_t>;  // (merged id, node index = original position)
    std::vector<Entry> heap;
    auto push = [&](uint32_t i) {
      rank[i] = next[i] == kNone ? kNone : find_pair(id[i], id[next[i]]);
      if (rank[i] != kNone) {
        heap.emplace_back(rank[i], i);
        std::push_heap(heap.begin(), heap.end(), std::greater<Entry>());
      }
    };
    for (uint32_t i = 0; i < n; ++i) push(i);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<Entry>());
      const auto [r, i] = heap.back();
      heap.pop_back();
      if (!alive[i] || rank[i] != r) continue;  // stale
      const uint32_t j = next[i];
      id[i] = r;
      alive[j] = false;
      next[i] = next[j];
      if (next[j] != kNone) prev[next[j]] = i;
      push(i);
      if (prev[i] != kNone) push(prev[i]);
    }
    for (uint32_t i = 0; i != kNone; i = next[i]) out.push_back(id[i]);
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

namespace {

// Undoes GPT-2's byte map: "Ġthe" -> " the". False on an empty string, invalid UTF-8 or a
// character outside the map.
bool unmap_token(std::string_view mapped, std::string& bytes) {
  static const auto table = [] {  // code point (< 324) -> byte + 1, 0 = not in the map
    std::vector<uint16_t> t(324, 0);
    for (unsigned b = 0; b < 256; ++b) t[gpt2_byte_to_codepoint(static_cast<uint8_t>(b))] = static_cast<uint16_t>(b + 1);
    return t;
  }();
  bytes.clear();
  size_t i = 0;
  while (i < mapped.size()) {
    const size_t len = utf8_sequence_length(mapped, i);
    if (len == 0) return false;
    const char32_t cp = decode_utf8_at(mapped, i, len);
    if (cp >= table.size() || table[cp] == 0) return false;
    bytes += static_cast<char>(table[cp] - 1);
    i += len;
  }
  return !bytes.empty();
}

}  // namespace

std::vector<std::pair<std::string, uint64_t>> parse_encoder_json(std::string_view text, const std::string& name) {
  EncoderJsonHandler handler;
  const bool ok = nlohmann::json::sax_parse(text.begin(), text.end(), &handler,
                                            nlohmann::json::input_format_t::json, /*strict=*/true);
  if (!ok || !handler.problem.empty()) {
    throw std::runtime_error(name + ": " + (handler.problem.empty() ? "invalid JSON" : handler.problem));
  }
  std::string bytes;
  for (auto& [key, id] : handler.entries) {
    if (key == "<|endoftext|>") continue;  // special token: kept as its text
    if (!unmap_token(key, bytes)) {
      throw std::runtime_error(name + ": token " + std::to_string(id) +
                               " is empty or uses a character outside GPT-2's byte map");
    }
    key = bytes;
  }
  return std::move(handler.entries);
}

std::vector<std::pair<std::string, std::string>> parse_vocab_bpe(std::string_view text, const std::string& name) {
  const size_t bad = find_invalid_utf8(text);
  if (bad != std::string_view::npos) {
    throw std::runtime_error(name + ": invalid UTF-8 at byte offset " + std::to_string(bad));
  }
  std::vector<std::pair<std::string, std::string>> merges;
  size_t pos = 0, line_no = 0;
  std::string left, right;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos ||
        !unmap_token(line.substr(0, space), left) || !unmap_token(line.substr(space + 1), right)) {
      throw std::runtime_error(name + ":" + std::to_string(line_no) +
                               ": expected two GPT-2 byte-mapped tokens separated by one space");
    }
    merges.emplace_back(left, right);
  }
  return merges;
}

Tokenizer Tokenizer::from_files(const std::string& encoder_json, const std::string& vocab_bpe) {
  const auto entries = parse_encoder_json(read_file(encoder_json), encoder_json);
  const auto merges = parse_vocab_bpe(read_file(vocab_bpe), vocab_bpe);
  return from_parsed(entries, merges, encoder_json, vocab_bpe);
}

Tokenizer Tokenizer::from_parsed(const std::vector<std::pair<std::string, uint64_t>>& entries,
                                 const std::vector<std::pair<std::string, std::string>>& merges,
                                 const std::string& encoder_json, const std::string& vocab_bpe) {
  auto impl = std::make_unique<Impl>();
  const size_t n = entries.size();
  if (n < 257) {
    throw std::runtime_error(encoder_json + ": only " + std::to_string(n) +
                             " entries (a GPT-2 vocabulary has 256 byte tokens + merges + <|endoftext|>)");
  }
  impl->id_to_bytes.assign(n, std::string());
  std::vector<bool> seen(n, false);
  bool have_eot = false;
  for (const auto& [bytes, id] : entries) {
    if (id >= n) {
      throw std::runtime_error(encoder_json + ": token id " + std::to_string(id) +
                               " is out of range (ids must be 0.." + std::to_string(n - 1) + ")");
    }
    if (seen[id]) throw std::runtime_error(encoder_json + ": token id " + std::to_string(id) + " appears twice");
    seen[id] = true;
    impl->id_to_bytes[id] = bytes;
    if (bytes == "<|endoftext|>") {
      if (id != kEndOfText) {
        throw std::runtime_error(encoder_json + ": <|endoftext|> has id " + std::to_string(id) + " (expected " +
                                 std::to_string(kEndOfText) + ")");
      }
      have_eot = true;
    }
  }
  if (!have_eot) throw std::runtime_error(encoder_json + ": no <|endoftext|> entry");
  // Byte tokens: tiktoken ranks the 256 single bytes first, in the byte map's order.
  unsigned rank = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (unsigned b = 0; b < 256; ++b) {
      if (byte_is_self_mapped(b) != (pass == 0)) continue;
      const std::string& t = impl->id_to_bytes[rank];
      if (t.size() != 1 || static_cast<unsigned char>(t[0]) != b) {
        throw std::runtime_error(encoder_json + ": id " + std::to_string(rank) + " should be the single byte " +
                                 std::to_string(b) + " (GPT-2 byte tokens come first, in byte-map order)");
      }
      impl->byte_to_id[b] = rank++;
    }
  }
  // Merge i creates token 256 + i (tiktoken's ranks == encoder.json's ids for GPT-2).
  for (size_t i = 0; i < merges.size(); ++i) {
    const size_t expected = 256 + i;
    if (expected >= n || expected == kEndOfText ||
        impl->id_to_bytes[expected] != merges[i].first + merges[i].second) {
      throw std::runtime_error(vocab_bpe + ": merge " + std::to_string(i + 1) + " does not produce token " +
                               std::to_string(expected) + " of " + encoder_json);
    }
  }
  if (256 + merges.size() + 1 != n) {
    throw std::runtime_error(vocab_bpe + ": " + std::to_string(merges.size()) + " merges, but " + encoder_json +
                             " has " + std::to_string(n) + " tokens (expected 256 + merges + 1)");
  }
  impl->build_tables();
  impl->compile_regex();
  return Tokenizer(std::move(impl));
}

std::string Tokenizer::default_dir() {
  const char* env = std::getenv("GPT2_VOCAB_DIR");
  return env && *env ? env : "data/gpt2";
}

Tokenizer Tokenizer::from_default_location() {
  const std::string dir = default_dir();
  const std::string enc = dir + "/encoder.json", bpe = dir + "/vocab.bpe";
  if (!std::ifstream(enc) || !std::ifstream(bpe)) {
    throw std::runtime_error(enc + ": GPT-2 vocabulary not found (run `make vocab` or "
                             "scripts/get_gpt2_vocab.sh; $GPT2_VOCAB_DIR selects another directory)");
  }
  return from_files(enc, bpe);
}

std::vector<uint32_t> Tokenizer::encode(std::string_view utf8) const {
  std::vector<uint32_t> out;
  out.reserve(utf8.size() / 3 + 16);
  encode_append(utf8, out);
  return out;
}

void Tokenizer::encode_append(std::string_view utf8, std::vector<uint32_t>& out) const {
  const size_t bad = find_invalid_utf8(utf8);
  if (bad != std::string_view::npos) {
    throw std::runtime_error("invalid UTF-8 at byte offset " + std::to_string(bad) +
                             " (the GPT-2 tokenizer needs valid UTF-8 text)");
  }
  const Impl& im = *impl_;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(im.regex, nullptr);
  if (!md) throw std::bad_alloc();
  struct Free {
    pcre2_match_data* md;
    ~Free() { pcre2_match_data_free(md); }
  } free_md{md};

  // Pieces repeat a lot (words); cache the BPE result of the ones that are not a single token.
  std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>, PieceHash> cache;  // -> [begin, end) in `cached`
  std::vector<uint32_t> cached, parts, ranks;
  constexpr size_t kMaxCachedPieces = 1 << 16;

  const auto* subject = reinterpret_cast<PCRE2_SPTR>(utf8.data());
  const size_t n = utf8.size();
  size_t start = 0;
  while (start < n) {
    // Validity was checked once above; PCRE2 would otherwise re-check the whole subject per call.
    const int rc = im.jit ? pcre2_jit_match(im.regex, subject, n, start, 0, md, nullptr)
                          : pcre2_match(im.regex, subject, n, start, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;  // cannot happen: every character matches some branch
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw std::runtime_error(std::string("tokenizer: regex match failed at byte offset ") +
                               std::to_string(start) + ": " + reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (e <= b) {  // empty match: step one character (never happens with this pattern)
      start = b + 1;
      while (start < n && (static_cast<unsigned char>(utf8[start]) & 0xC0) == 0x80) ++start;
      continue;
    }
    start = e;
    const std::string_view piece = utf8.substr(b, e - b);
    const uint32_t whole = im.find_token(piece);
    if (whole != UINT32_MAX) {
      out.push_back(whole);
      continue;
    }
    if (const auto it = cache.find(piece); it != cache.end()) {
      out.insert(out.end(), cached.begin() + it->second.first, cached.begin() + it->second.second);
      continue;
    }
    const size_t before = out.size();
    im.bpe(piece, parts, ranks, out);
    if (cache.size() < kMaxCachedPieces) {
      const auto begin = static_cast<uint32_t>(cached.size());
      cached.insert(cached.end(), out.begin() + before, out.end());
      cache.emplace(piece, std::make_pair(begin, static_cast<uint32_t>(cached.size())));
    }
  }
}

std::string Tokenizer::decode(const uint32_t* ids, size_t n) const {
  std::string out;
  const auto& table = impl_->id_to_bytes;
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] >= table.size()) {
      throw std::runtime_error("decode: token id " + std::to_string(ids[i]) + " out of range (vocab size " +
                               std::to_string(table.size()) + ")");
    }
    out += table[ids[i]];
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<uint32_t>& ids) const { return decode(ids.data(), ids.size()); }

const std::string& Tokenizer::token_bytes(uint32_t id) const {
  if (id >= impl_->id_to_bytes.size()) {
    throw std::runtime_error("token id " + std::to_string(id) + " out of range (vocab size " +
                             std::to_string(impl_->id_to_bytes.size()) + ")");
  }
  return impl_->id_to_bytes[id];
}

size_t Tokenizer::vocab_size() const { return impl_->id_to_bytes.size(); }

void Tokenizer::write_llmc_file(const std::string& path) const {
  uint32_t header[256] = {};
  header[0] = 20240328;
  header[1] = 2;
  header[2] = static_cast<uint32_t>(vocab_size());
  header[3] = impl_->eot_id;
  std::string data(reinterpret_cast<const char*>(header), sizeof header);
  for (const std::string& t : impl_->id_to_bytes) {
    // llm.c stores the length in one byte and asserts it is > 0.
    if (t.empty() || t.size() > 255)
      throw std::runtime_error(path + ": token of " + std::to_string(t.size()) + " bytes cannot be stored (1..255)");
    data += static_cast<char>(static_cast<unsigned char>(t.size()));
    data += t;
  }
  write_text_file_atomic(path, data);  // a regular file atomically; "-", devices and FIFOs in place
}

std::vector<std::string> Tokenizer::read_llmc_file(const std::string& path) {
  const std::string data = read_file(path);
  if (data.size() < 1024) throw std::runtime_error(path + ": too short for the 1024-byte header");
  uint32_t header[256];
  std::memcpy(header, data.data(), sizeof header);
  if (header[0] != 20240328) {
    throw std::runtime_error(path + ": bad magic " + std::to_string(header[0]) + " (expected 20240328)");
  }
  if (header[1] != 1 && header[1] != 2) {
    throw std::runtime_error(path + ": unsupported version " + std::to_string(header[1]) + " (expected 1 or 2)");
  }
  const uint32_t vocab = header[2];
  std::vector<std::string> tokens;
  size_t pos = 1024;
  for (uint32_t i = 0; i < vocab; ++i) {
    if (pos >= data.size()) throw std::runtime_error(path + ": truncated at token " + std::to_string(i));
    const size_t len = static_cast<unsigned char>(data[pos++]);
    if (len == 0 || pos + len > data.size()) {
      throw std::runtime_error(path + ": bad or truncated token " + std::to_string(i));
    }
    tokens.emplace_back(data.data() + pos, len);
    pos += len;
  }
  if (pos != data.size()) throw std::runtime_error(path + ": " + std::to_string(data.size() - pos) + " trailing bytes");
  return tokens;
}

}  // namespace gpt2
