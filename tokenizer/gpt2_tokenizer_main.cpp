// ./gpt2_tokenizer: GPT-2 encode/decode from the command line.
//   ./gpt2_tokenizer encode [FILE]   UTF-8 text (stdin without FILE) -> ids, space-separated, one line
//   ./gpt2_tokenizer decode [FILE]   whitespace-separated ids -> the raw bytes they stand for
//   ./gpt2_tokenizer export-llmc OUT llm.c's decode-only tokenizer file (magic 20240328, version 2)
#include "tokenizer/tokenizer.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

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

std::string read_input(const std::string& file) {
  std::ostringstream ss;
  if (file.empty()) {
    ss << std::cin.rdbuf();
    if (std::cin.bad()) throw std::runtime_error("<stdin>: read error");
    return ss.str();
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error(file + ": cannot open (" + std::strerror(errno) + ")");
  ss << in.rdbuf();
  if (in.bad()) throw std::runtime_error(file + ": read error");
  return ss.str();
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
    std::string input = read_input(file);
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
      std::vector<uint32_t> ids;
      std::istringstream in(input);
      std::string word;
      while (in >> word) {
        char* end = nullptr;
        errno = 0;
        const unsigned long v = std::strtoul(word.c_str(), &end, 10);
        if (word[0] == '-' || *end != '\0' || errno == ERANGE || v >= tok.vocab_size()) {
          throw std::runtime_error(name + ": bad token id '" + word + "' (expected 0.." +
                                   std::to_string(tok.vocab_size() - 1) + ")");
        }
        ids.push_back(static_cast<uint32_t>(v));
      }
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
