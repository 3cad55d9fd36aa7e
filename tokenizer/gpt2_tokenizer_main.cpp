// ./gpt2_tokenizer: GPT-2 encode/decode from the command line.
//   ./gpt2_tokenizer encode [FILE]   UTF-8 text (stdin without FILE) -> ids, space-separated, one line
//   ./gpt2_tokenizer decode [FILE]   whitespace-separated ids -> the raw bytes they stand for
//   ./gpt2_tokenizer export-llmc OUT llm.c's decode-only tokenizer file (magic 20240328, version 2)
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "util/checked_io.h"

namespace {

constexpr const char* kUsage =
    "usage: gpt2_tokenizer [--vocab-dir DIR] COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  encode [--replace-invalid] [FILE]  encode UTF-8 text from FILE (stdin when absent) and print the\n"
    "                                     GPT-2 token ids space-separated on one line. <|endoftext|> in\n"
    "                                     the text is ordinary text. Invalid UTF-8 is an error, or with\n"
    "                                     --replace-invalid becomes U+FFFD (Python's errors=\"replace\").\n"
    "  decode [FILE]                      read whitespace-separated ids from FILE (stdin when absent) and\n"
    "                                     write the bytes they decode to (no newline added)\n"
    "  export-llmc OUT                    write llm.c's tokenizer file (magic 20240328, version 2) to OUT\n"
    "\n"
    "options:\n"
    "  --vocab-dir DIR   directory with encoder.json + vocab.bpe (default: $GPT2_VOCAB_DIR, else\n"
    "                    data/gpt2, filled by `make vocab` / scripts/get_gpt2_vocab.sh)\n"
    "  -h, --help        this help\n";

// The word as it can be printed: bytes outside printable ASCII as \xHH (a NUL
// shows as \x00 instead of ending the message).
std::string printable(const std::string& word) {
  std::string out;
  char hex[8];
  for (unsigned char c : word) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

// decode's input: ids in decimal separated by ASCII whitespace. Anything else
// in a word (a sign, a NUL, a letter) or an id outside the vocabulary is an
// error naming the word and its byte offset.
std::vector<uint32_t> parse_ids(const std::string& input, const std::string& name, size_t vocab_size) {
  std::vector<uint32_t> ids;
  constexpr const char* kSpace = " \t\n\r\v\f";
  size_t pos = input.find_first_not_of(kSpace);
  while (pos != std::string::npos) {
    const size_t end = std::min(input.find_first_of(kSpace, pos), input.size());
    const std::string word = input.substr(pos, end - pos);
    uint64_t v = 0;  // stays below 10 * vocab_size: digits stop counting at the first id out of range
    bool ok = true;
    for (char c : word) ok = ok && c >= '0' && c <= '9' && (v = v * 10 + static_cast<uint64_t>(c - '0')) < vocab_size;
    if (!ok)
      throw std::runtime_error(name + ": bad token id '" + printable(word) + "' at byte offset " +
                               std::to_string(pos) + " (expected 0.." + std::to_string(vocab_size - 1) + ")");
    ids.push_back(static_cast<uint32_t>(v));
    pos = input.find_first_not_of(kSpace, end);
  }
  return ids;
}

gpt2::Tokenizer load(const std::string& vocab_dir) {
  if (vocab_dir.empty()) return gpt2::Tokenizer::from_default_location();
  return gpt2::Tokenizer::from_files(vocab_dir + "/encoder.json", vocab_dir + "/vocab.bpe");
}

void write_all(const std::string& s) {
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size() || std::fflush(stdout) != 0) {
    throw std::runtime_error("<stdout>: write error");
  }
}

int run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string vocab_dir, command;
  std::vector<std::string> rest;
  bool replace_invalid = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--vocab-dir") {
      if (i + 1 >= args.size()) throw std::runtime_error("--vocab-dir needs a directory");
      vocab_dir = args[++i];
    } else if (a == "--replace-invalid") {
      replace_invalid = true;
    } else if (a.size() > 1 && a[0] == '-') {
      throw std::runtime_error("unknown option " + a + " (see --help)");
    } else if (command.empty()) {
      command = a;
    } else {
      rest.push_back(a);
    }
  }
  if (command.empty()) {
    std::fputs(kUsage, stderr);
    return 1;
  }
  if (replace_invalid && command != "encode") throw std::runtime_error("--replace-invalid only applies to encode");

  if (command == "encode" || command == "decode") {
    if (rest.size() > 1) throw std::runtime_error(command + " takes at most one FILE");
    const std::string file = rest.empty() ? "" : rest[0];
    const std::string name = file.empty() ? "<stdin>" : file;
    const gpt2::Tokenizer tok = load(vocab_dir);
    std::string input = gpt2::read_all_bytes(file.empty() ? "-" : file);
    if (command == "encode") {
      if (replace_invalid) input = gpt2::replace_invalid_utf8(input);
      std::vector<uint32_t> ids;
      try {
        ids = tok.encode(input);
      } catch (const std::runtime_error& e) {
        throw std::runtime_error(name + ": " + e.what());
      }
      std::string line;
      line.reserve(ids.size() * 6 + 1);
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i) line += ' ';
        line += std::to_string(ids[i]);
      }
      line += '\n';
      write_all(line);
    } else {
      const std::vector<uint32_t> ids = parse_ids(input, name, tok.vocab_size());
      write_all(tok.decode(ids));
    }
    return 0;
  }
  if (command == "export-llmc") {
    if (rest.size() != 1) throw std::runtime_error("export-llmc needs exactly one output path");
    load(vocab_dir).write_llmc_file(rest[0]);
    std::fprintf(stderr, "wrote %s\n", rest[0].c_str());
    return 0;
  }
  throw std::runtime_error("unknown command '" + command + "' (see --help)");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
