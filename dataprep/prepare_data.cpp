// ./prepare_data: any corpus (plain text files or JSONL) -> GPT-2 token shards in llm.c's format.
//
// Pipeline (bounded memory for inputs of any size):
//   reader thread  reads the inputs in blocks and cuts them into work items of ~--chunk-bytes of
//                  text, each a list of segments (a document, or a piece of a long document cut
//                  where no pre-token can straddle the cut, so the ids do not change)
//   worker threads encode items in parallel (EOT before each document's first segment)
//   main thread    writes the results strictly in input order through ShardWriter: the first
//                  --val-tokens tokens to the val shard, then train shards of --shard-tokens
// At most 2 x threads + 2 items are in flight, so memory stays at a few MiB per thread.
// --sft (instruction data -> packed shards + loss-mask sidecars) lives in dataprep/sft.cpp.
#include "dataloader/shard.h"
#include "dataprep/prep_common.h"
#include "dataprep/sft.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <glob.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace gpt2 {
namespace {

constexpr const char* kUsage = R"(usage: prepare_data [options] --out-prefix PATH INPUT...

Tokenizes documents with GPT-2's BPE into llm.c token shards (header of 256 int32: magic 20240520,
version 1, token count; then uint16 ids; --token-width u32 writes magic 20240801, version 7). Every
document is preceded by <|endoftext|> (50256). The first --val-tokens tokens go to the val shard,
the rest to train shards of --shard-tokens tokens:
  PATH_val_000000.bin  PATH_train_000001.bin  PATH_train_000002.bin ...

inputs:
  INPUT...                 text files (one document per file, or see --doc-separator) or JSONL
                           files (one JSON object per line, document text in --text-field)
  --format F               auto | text | jsonl (default auto: *.jsonl, *.ndjson, *.json -> jsonl)
  --text-field NAME        JSONL field holding the text (default "text")
  --doc-separator SEP      split text files into documents at every SEP (escapes \n \r \t \\ allowed);
                           SEP stays at the end of the document before it, as in llm.c's
                           tinyshakespeare.py ("\n\n": one document per paragraph)
  --invalid-utf8 MODE      error (default): stop, naming the file and byte offset / line;
                           replace: replace invalid sequences by U+FFFD (Python's errors="replace")

outputs:
  --out-prefix PATH        output path prefix (required); directories are created
  --shard-tokens N         tokens per train shard (default 100M); 0 = unlimited (one train shard)
  --val-tokens N           tokens in the val split (default: 10% of the corpus, estimated at
                           4 bytes a token, at least 1K and at most --shard-tokens; 0 = no val shard)
  --no-shard-index         name the outputs PATH_val.bin and PATH_train.bin (error if the train
                           split needs more than one shard)
  --token-width W          u16 (default) or u32

performance and display:
  --threads N              encoding threads (default: all cores)
  --chunk-bytes N          text per work item (default 1M)
  --progress MODE          auto (default: a bar on a terminal, periodic lines otherwise) | bar |
                           lines | none
  --progress-interval S    seconds between progress lines (default 10)
  --vocab-dir DIR          directory with encoder.json + vocab.bpe (default $GPT2_VOCAB_DIR, else
                           data/gpt2, filled by `make vocab`)
  -h, --help               this help

SFT mode (docs/sft.md): JSONL instruction data -> shards of packed examples + loss-mask sidecars
(PATH_val_000000.mask next to PATH_val_000000.bin, ...); the trainer only learns the masked tokens.
  --sft                    (or --format sft) each JSONL line is {"prompt": P, "completion": C} or
                           {"messages": [{"role": "system"|"user"|"assistant", "content": ...}, ...]}
  --seq-len T              block (row) length; required with --sft, must equal the training --seq-len
  --pack                   greedy packing of whole examples into each block, in input order (default)
  --no-pack                one example per block
  --sft-truncate MODE      truncate (default): examples longer than T keep their first T tokens;
                           error: stop, naming the file and line
  --val-examples N         the first N examples go to the val shard (default 0: no val shard)
  --prompt-field NAME      field names of the two forms (defaults prompt, completion, messages)
  --completion-field NAME
  --messages-field NAME
  --shard-tokens, --no-shard-index, --token-width, --invalid-utf8, --vocab-dir apply as above
  (--shard-tokens rounded down to whole blocks); --val-tokens, --text-field, --doc-separator do not.

Numbers accept K, M, G suffixes (powers of 1000 for token counts and of 1024 for --chunk-bytes).
)";

struct Options {
  std::vector<std::string> inputs;
  std::string format = "auto";
  std::string text_field = "text";
  std::string doc_separator;
  bool replace_invalid = false;
  std::string out_prefix;
  uint64_t shard_tokens = 100'000'000;
  uint64_t val_tokens = 0;
  bool val_tokens_set = false;
  bool no_shard_index = false;
  TokenWidth width = TokenWidth::kU16;
  unsigned threads = 0;
  size_t chunk_bytes = 1 << 20;
  std::string progress = "auto";
  double progress_interval = 10.0;
  std::string vocab_dir;
  // --sft
  bool sft = false, sft_flag_seen = false;
  SftOptions sft_options;
};

uint64_t parse_count(const std::string& flag, const std::string& text, uint64_t unit) {
  if (text.empty() || text[0] == '-') throw std::runtime_error(flag + ": expected a non-negative number, got '" + text + "'");
  size_t used = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &used);
  } catch (const std::exception&) {
    throw std::runtime_error(flag + ": expected a number, got '" + text + "'");
  }
  uint64_t mult = 1;
  const std::string suffix = text.substr(used);
  if (suffix == "K" || suffix == "k") mult = unit;
  else if (suffix == "M" || suffix == "m") mult = unit * unit;
  else if (suffix == "G" || suffix == "g") mult = unit * unit * unit;
  else if (!suffix.empty()) throw std::runtime_error(flag + ": bad number '" + text + "'");
  if (mult > 1 && v > UINT64_MAX / mult) throw std::runtime_error(flag + ": number too large '" + text + "'");
  return v * mult;
}

std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    if (c == 'n') out += '\n';
    else if (c == 'r') out += '\r';
    else if (c == 't') out += '\t';
    else if (c == '\\') out += '\\';
    else throw std::runtime_error(std::string("--doc-separator: unknown escape \\") + c);
  }
  return out;
}

Options parse_args(int argc, char** argv, bool& help) {
  Options o;
  help = false;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw std::runtime_error(a + " needs a value (see --help)");
      return args[++i];
    };
    if (a == "-h" || a == "--help") { help = true; return o; }
    else if (a == "--format") o.format = value();
    else if (a == "--text-field") o.text_field = value();
    else if (a == "--doc-separator") o.doc_separator = unescape(value());
    else if (a == "--invalid-utf8") {
      const std::string v = value();
      if (v == "replace") o.replace_invalid = true;
      else if (v != "error") throw std::runtime_error("--invalid-utf8: expected error or replace, got '" + v + "'");
    }
    else if (a == "--out-prefix") o.out_prefix = value();
    else if (a == "--shard-tokens") o.shard_tokens = parse_count(a, value(), 1000);
    else if (a == "--val-tokens") { o.val_tokens = parse_count(a, value(), 1000); o.val_tokens_set = true; }
    else if (a == "--no-shard-index") o.no_shard_index = true;
    else if (a == "--token-width") {
      const std::string v = value();
      if (v == "u16") o.width = TokenWidth::kU16;
      else if (v == "u32") o.width = TokenWidth::kU32;
      else throw std::runtime_error("--token-width: expected u16 or u32, got '" + v + "'");
    }
    else if (a == "--threads") o.threads = static_cast<unsigned>(std::min<uint64_t>(parse_count(a, value(), 1000), 1024));
    else if (a == "--chunk-bytes") o.chunk_bytes = parse_count(a, value(), 1024);
    else if (a == "--progress") o.progress = value();
    else if (a == "--progress-interval") {
      const std::string v = value();
      try { o.progress_interval = std::stod(v); } catch (const std::exception&) { o.progress_interval = -1; }
      if (!(o.progress_interval > 0)) throw std::runtime_error("--progress-interval: expected seconds > 0, got '" + v + "'");
    }
    else if (a == "--vocab-dir") o.vocab_dir = value();
    else if (a == "--sft") o.sft = true;
    else if (a == "--seq-len") {
      const uint64_t T = parse_count(a, value(), 1000);
      if (T == 0 || T > (1u << 30)) throw std::runtime_error("--seq-len: expected 1 .. 2^30, got " + args[i]);
      o.sft_options.T = static_cast<int>(T);
      o.sft_flag_seen = true;
    }
    else if (a == "--pack") { o.sft_options.pack = true; o.sft_flag_seen = true; }
    else if (a == "--no-pack") { o.sft_options.pack = false; o.sft_flag_seen = true; }
    else if (a == "--sft-truncate") {
      const std::string v = value();
      if (v == "truncate") o.sft_options.truncate = true;
      else if (v == "error") o.sft_options.truncate = false;
      else throw std::runtime_error("--sft-truncate: expected truncate or error, got '" + v + "'");
      o.sft_flag_seen = true;
    }
    else if (a == "--val-examples") { o.sft_options.val_examples = parse_count(a, value(), 1000); o.sft_flag_seen = true; }
    else if (a == "--prompt-field") { o.sft_options.prompt_field = value(); o.sft_flag_seen = true; }
    else if (a == "--completion-field") { o.sft_options.completion_field = value(); o.sft_flag_seen = true; }
    else if (a == "--messages-field") { o.sft_options.messages_field = value(); o.sft_flag_seen = true; }
    else if (a == "--") { for (++i; i < args.size(); ++i) o.inputs.push_back(args[i]); }
    else if (a.size() > 1 && a[0] == '-') throw std::runtime_error("unknown option " + a + " (see --help)");
    else o.inputs.push_back(a);
  }
  if (o.inputs.empty()) throw std::runtime_error("no input files (see --help)");
  if (o.out_prefix.empty()) throw std::runtime_error("--out-prefix is required (see --help)");
  if (o.format == "sft") o.sft = true;
  else if (o.format != "auto" && o.format != "text" && o.format != "jsonl") {
    throw std::runtime_error("--format: expected auto, text, jsonl or sft, got '" + o.format + "'");
  }
  if (o.sft) {
    if (o.sft_options.T == 0) throw std::runtime_error("--sft needs --seq-len T (the training run's sequence length)");
    if (o.val_tokens_set) throw std::runtime_error("--val-tokens does not apply to --sft; use --val-examples N");
    if (o.format == "text") throw std::runtime_error("--sft reads JSONL; --format text does not apply");
  } else if (o.sft_flag_seen) {
    throw std::runtime_error("--seq-len, --pack, --no-pack, --sft-truncate, --val-examples and the field options "
                             "need --sft (see --help)");
  }
  if (o.progress != "auto" && o.progress != "bar" && o.progress != "lines" && o.progress != "none") {
    throw std::runtime_error("--progress: expected auto, bar, lines or none, got '" + o.progress + "'");
  }
  if (o.chunk_bytes < 1024) throw std::runtime_error("--chunk-bytes: at least 1024");
  if (!o.val_tokens_set && o.shard_tokens == 0 && !o.sft)
    throw std::runtime_error("--shard-tokens 0 needs an explicit --val-tokens");
  if (o.threads == 0) o.threads = std::max(1u, std::thread::hardware_concurrency());
  return o;
}

bool is_jsonl(const Options& o, const std::string& path) {
  if (o.format != "auto") return o.format == "jsonl";
  for (const char* ext : {".jsonl", ".ndjson", ".json"}) {
    const size_t n = std::strlen(ext);
    if (path.size() >= n && path.compare(path.size() - n, n, ext) == 0) return true;
  }
  return false;
}

// --- work items ---

struct Segment {
  size_t begin = 0, end = 0;  // bytes of WorkItem::text
  uint64_t where = 0;         // text: file byte offset of `begin`; JSONL: 1-based line number
  bool starts_document = false;
};

struct WorkItem {
  uint64_t seq = 0;
  size_t file = 0;
  bool jsonl = false;
  std::string text;
  std::vector<Segment> segments;
  uint64_t input_bytes = 0;
};

struct Result {
  std::vector<uint32_t> tokens;
  uint64_t input_bytes = 0;
  uint64_t documents = 0;
};

bool is_unicode_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Decodes the (possibly invalid) character starting at s[i]; invalid bytes decode as themselves,
// which is never white space above 0x7F, so they are treated as "not white space".
char32_t char_at(const std::string& s, size_t i) {
  const unsigned char b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return b;
  size_t len = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
  if (i + len > s.size()) return 0xFFFD;
  char32_t c = len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  for (size_t k = 1; k < len; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return c;
}
char32_t char_before(const std::string& s, size_t i) {  // the character that ends at s[i-1]
  size_t j = i - 1;
  while (j > 0 && i - j < 4 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
  return char_at(s, j);
}

// Last position p in (lo, hi] where the text can be cut without changing GPT-2's pre-tokens:
// s[p-1] == '\n' with a non-white-space character on both sides. Such a "\n" is a token by
// itself whether the text ends there or goes on (\s+(?!\S) cannot extend it), and no other
// pre-token can contain a "\n". npos when there is none.
size_t find_safe_cut(const std::string& s, size_t lo, size_t hi) {
  size_t p = hi;  // cuts at or before p
  while (p > lo + 1) {
    const void* nl = memrchr(s.data() + lo, '\n', p - lo);
    if (!nl) return std::string::npos;
    const size_t q = static_cast<size_t>(static_cast<const char*>(nl) - s.data());  // the '\n'
    const size_t cut = q + 1;
    if (q > lo && cut < s.size() && !is_unicode_white_space(char_before(s, q)) &&
        !is_unicode_white_space(char_at(s, cut))) {
      return cut;
    }
    p = q;
  }
  return std::string::npos;
}

// --- the pipeline ---

class Pipeline {
 public:
  Pipeline(const Options& o, const Tokenizer& tok) : opt_(o), tok_(tok) {
    max_in_flight_ = 2 * static_cast<size_t>(o.threads) + 2;
  }

  // Runs reader + workers; calls sink(result) in input order on the calling thread.
  template <typename Sink>
  void run(Sink&& sink) {
    std::thread reader([this] { guarded([this] { read_all(); }); });
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < opt_.threads; ++t) workers.emplace_back([this] { guarded([this] { work(); }); });
    uint64_t next = 0;
    try {
      while (true) {
        Result r;
        {
          std::unique_lock<std::mutex> lock(mu_);
          cv_results_.wait(lock, [&] { return failed_ || results_.count(next) || (reader_done_ && next == items_made_); });
          if (failed_) break;
          if (!results_.count(next)) break;  // all done
          r = std::move(results_[next]);
          results_.erase(next);
          ++next;
        }
        cv_reader_.notify_all();  // one slot freed
        sink(r);
      }
    } catch (...) {
      fail(std::current_exception());
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_workers_ = true;
    }
    cv_work_.notify_all();
    cv_reader_.notify_all();
    reader.join();
    for (auto& w : workers) w.join();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  template <typename F>
  void guarded(F&& f) {
    try {
      f();
    } catch (...) {
      fail(std::current_exception());
    }
  }

  void fail(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = e;
      failed_ = true;
    }
    cv_work_.notify_all();
    cv_results_.notify_all();
    cv_reader_.notify_all();
  }

  // Hands a finished item to the workers; blocks while too many items are in flight.
  void push(WorkItem&& item) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_reader_.wait(lock, [&] { return failed_ || queue_.size() + busy_ + results_.size() < max_in_flight_; });
    if (failed_) throw std::runtime_error("");  // stops the reader; the first error is reported
    item.seq = items_made_++;
    queue_.push_back(std::move(item));
    cv_work_.notify_one();
  }

  void read_all() {
    for (size_t f = 0; f < opt_.inputs.size(); ++f) read_file(f);
    std::lock_guard<std::mutex> lock(mu_);
    reader_done_ = true;
    cv_work_.notify_all();
    cv_results_.notify_all();
  }

  void read_file(size_t f) {
    const std::string& path = opt_.inputs[f];
    std::FILE* fp = std::fopen(path.c_str(), "rb");
    if (!fp) throw std::runtime_error(path + ": cannot open (" + std::strerror(errno) + ")");
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(fp, &std::fclose);
    const bool jsonl = is_jsonl(opt_, path);
    const std::string& sep = opt_.doc_separator;

    WorkItem item;
    auto new_item = [&] {
      item = WorkItem();
      item.file = f;
      item.jsonl = jsonl;
    };
    new_item();
    auto add = [&](const std::string& buf, size_t b, size_t e, uint64_t where, bool starts) {
      Segment s;
      s.begin = item.text.size();
      item.text.append(buf, b, e - b);
      s.end = item.text.size();
      s.where = where;
      s.starts_document = starts;
      item.segments.push_back(s);
      item.input_bytes += e - b + (jsonl ? 1 : 0);
      if (item.text.size() >= opt_.chunk_bytes) {
        push(std::move(item));
        new_item();
      }
    };

    std::string buf;
    uint64_t buf_offset = 0;  // file offset of buf[0]
    uint64_t line_no = 0;     // JSONL lines consumed
    bool in_document = false; // text: the current document already has its EOT
    bool eof = false;
    while (!eof) {
      const size_t old = buf.size();
      buf.resize(old + opt_.chunk_bytes);
      const size_t got = std::fread(&buf[old], 1, opt_.chunk_bytes, fp);
      buf.resize(old + got);
      if (got < opt_.chunk_bytes) {
        if (std::ferror(fp)) throw std::runtime_error(path + ": read error");
        eof = true;
      }
      size_t pos = 0;
      if (jsonl) {
        size_t nl;
        while ((nl = buf.find('\n', pos)) != std::string::npos || (eof && pos < buf.size())) {
          const size_t end = nl == std::string::npos ? buf.size() : nl;
          ++line_no;
          if (buf.find_first_not_of(" \t\r", pos) < end) add(buf, pos, end, line_no, true);
          pos = end == buf.size() ? end : end + 1;
        }
      } else {
        if (!sep.empty()) {
          size_t found;
          while ((found = buf.find(sep, pos)) != std::string::npos) {
            const size_t end = found + sep.size();
            add(buf, pos, end, buf_offset + pos, !in_document);
            in_document = false;
            pos = end;
          }
        }
        if (eof) {
          // The last document (possibly empty: llm.c also emits an EOT after a final separator).
          if (!in_document || pos < buf.size()) add(buf, pos, buf.size(), buf_offset + pos, !in_document);
          pos = buf.size();
        } else if (buf.size() - pos > opt_.chunk_bytes) {
          // A long document: cut it where the ids cannot change, away from a partial separator.
          const size_t limit = buf.size() - std::max<size_t>(sep.size(), 1);
          const size_t cut = find_safe_cut(buf, pos, limit);
          if (cut != std::string::npos) {
            add(buf, pos, cut, buf_offset + pos, !in_document);
            in_document = true;
            pos = cut;
          }
        }
      }
      buf.erase(0, pos);
      buf_offset += pos;
    }
    if (!item.segments.empty()) push(std::move(item));
  }

  void work() {
    std::vector<uint32_t> scratch;
    while (true) {
      WorkItem item;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_work_.wait(lock, [&] { return failed_ || stop_workers_ || !queue_.empty() || reader_done_; });
        if (failed_ || stop_workers_) return;
        if (queue_.empty()) return;  // reader done and nothing left
        item = std::move(queue_.front());
        queue_.pop_front();
        ++busy_;
      }
      Result r = encode(item);
      {
        std::lock_guard<std::mutex> lock(mu_);
        --busy_;
        results_.emplace(item.seq, std::move(r));
      }
      cv_results_.notify_one();
    }
  }

  Result encode(const WorkItem& item) const {
    Result r;
    r.input_bytes = item.input_bytes;
    r.tokens.reserve(item.text.size() / 3 + item.segments.size() + 16);
    const std::string& path = opt_.inputs[item.file];
    for (const Segment& s : item.segments) {
      std::string_view text(item.text.data() + s.begin, s.end - s.begin);
      std::string fixed, extracted;
      if (opt_.replace_invalid && find_invalid_utf8(text) != std::string_view::npos) {
        fixed = replace_invalid_utf8(text);
        text = fixed;
      }
      if (item.jsonl) {
        const std::string where = path + ":" + std::to_string(s.where);
        nlohmann::json doc;
        try {
          doc = nlohmann::json::parse(text);
        } catch (const nlohmann::json::exception& e) {
          throw std::runtime_error(where + ": " + e.what());
        }
        if (!doc.is_object()) throw std::runtime_error(where + ": expected a JSON object");
        const auto it = doc.find(opt_.text_field);
        if (it == doc.end() || !it->is_string()) {
          throw std::runtime_error(where + ": no string field \"" + opt_.text_field + "\"");
        }
        extracted = it->get<std::string>();
        text = extracted;
      }
      if (s.starts_document) {
        r.tokens.push_back(Tokenizer::kEndOfText);
        ++r.documents;
      }
      try {
        tok_.encode_append(text, r.tokens);
      } catch (const std::runtime_error& e) {
        const size_t bad = find_invalid_utf8(text);
        if (bad != std::string_view::npos && !item.jsonl) {
          throw std::runtime_error(path + ": invalid UTF-8 at byte offset " + std::to_string(s.where + bad) +
                                   " (--invalid-utf8 replace substitutes U+FFFD)");
        }
        throw std::runtime_error(path + ": " + e.what());
      }
    }
    return r;
  }

  const Options& opt_;
  const Tokenizer& tok_;
  size_t max_in_flight_;

  std::mutex mu_;
  std::condition_variable cv_work_, cv_results_, cv_reader_;
  std::deque<WorkItem> queue_;
  std::map<uint64_t, Result> results_;
  uint64_t items_made_ = 0;
  size_t busy_ = 0;
  bool reader_done_ = false, stop_workers_ = false, failed_ = false;
  std::exception_ptr error_;
};

// --- output: val split, then train shards ---

class ShardSink {
 public:
  explicit ShardSink(const Options& o) : opt_(o) {}

  void append(const uint32_t* p, size_t n) {
    while (n > 0) {
      if (!writer_) open_next();
      const size_t take = static_cast<size_t>(std::min<uint64_t>(n, remaining_));
      writer_->append(p, take);
      p += take;
      n -= take;
      remaining_ -= take;
      total_ += take;
      if (remaining_ == 0) close_current();
    }
  }

  void finish() {
    if (writer_ && writer_->count() > 0) close_current();
    writer_.reset();  // an empty, unfinished shard: its tmp file is removed
  }

  uint64_t total() const { return total_; }
  const std::vector<std::string>& written() const { return written_; }

 private:
  void open_next() {
    const bool val = next_index_ == 0 && opt_.val_tokens > 0;
    if (next_index_ == 0 && !val) next_index_ = 1;  // no val split: train starts at 000001
    std::string path;
    if (opt_.no_shard_index) {
      if (!val && next_index_ > 1) {
        throw std::runtime_error(opt_.out_prefix + "_train.bin: the train split needs more than one shard of " +
                                 with_commas(opt_.shard_tokens) + " tokens; drop --no-shard-index");
      }
      path = opt_.out_prefix + (val ? "_val.bin" : "_train.bin");
    } else {
      char idx[32];
      std::snprintf(idx, sizeof idx, "%06" PRIu64, static_cast<uint64_t>(next_index_));
      path = opt_.out_prefix + (val ? "_val_" : "_train_") + idx + ".bin";
    }
    remaining_ = val ? opt_.val_tokens : (opt_.shard_tokens == 0 ? UINT64_MAX : opt_.shard_tokens);
    current_path_ = path;
    writer_ = std::make_unique<ShardWriter>(path, opt_.width);
    ++next_index_;
  }

  void close_current() {
    writer_->close();
    if (opt_.progress != "none") {
      std::fprintf(stderr, "%swrote %s tokens to %s\n", line_prefix(), with_commas(writer_->count()).c_str(),
                   current_path_.c_str());
    }
    written_.push_back(current_path_);
    writer_.reset();
  }

  const char* line_prefix() const { return isatty(2) ? "\r\033[K" : ""; }

  const Options& opt_;
  std::unique_ptr<ShardWriter> writer_;
  std::string current_path_;
  uint64_t next_index_ = 0, remaining_ = 0, total_ = 0;
  std::vector<std::string> written_;
};

std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) { b /= 1000; ++u; }
  char s[32];
  std::snprintf(s, sizeof s, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return s;
}

std::string human_count(double v) {
  char s[32];
  if (v >= 1e9) std::snprintf(s, sizeof s, "%.2fG", v / 1e9);
  else if (v >= 1e6) std::snprintf(s, sizeof s, "%.2fM", v / 1e6);
  else if (v >= 1e3) std::snprintf(s, sizeof s, "%.1fK", v / 1e3);
  else std::snprintf(s, sizeof s, "%.0f", v);
  return s;
}

// Without --val-tokens: a tenth of the corpus (estimated from its size at GPT-2's
// ~4 bytes per English token) so that a small corpus still gets train tokens,
// at most one shard so that a large one keeps llm.c's one-shard val split.
uint64_t default_val_tokens(uint64_t input_bytes, uint64_t shard_tokens) {
  const uint64_t tenth = input_bytes / 4 / 10;
  return std::min(shard_tokens, std::max<uint64_t>(1000, tenth));
}

// What went where, always (even with --progress none): a split with no train
// tokens is the mistake this guards against.
void report_split(const Options& opt, const ShardSink& sink) {
  const uint64_t total = sink.total();
  const uint64_t val = std::min(total, opt.val_tokens);
  std::fprintf(stderr, "split: %s val tokens%s, %s train tokens in %zu train shard(s)\n", with_commas(val).c_str(),
               opt.val_tokens_set ? "" : " (default: a tenth of the corpus)", with_commas(total - val).c_str(),
               sink.written().size() - (val > 0 ? 1 : 0));
  if (total > 0 && total <= opt.val_tokens)
    std::fprintf(stderr, "warning: all %s tokens went to the validation shard and no train shard was written; "
                 "pass a smaller --val-tokens\n", with_commas(total).c_str());
}

int run(int argc, char** argv) {
  bool help = false;
  Options opt = parse_args(argc, argv, help);
  if (help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  uint64_t total_bytes = 0;
  for (const std::string& in : opt.inputs) {
    struct stat st;
    if (::stat(in.c_str(), &st) != 0) throw std::runtime_error(in + ": cannot stat (" + std::strerror(errno) + ")");
    if (S_ISDIR(st.st_mode)) throw std::runtime_error(in + ": is a directory");
    total_bytes += static_cast<uint64_t>(st.st_size);
  }
  const Tokenizer tok = opt.vocab_dir.empty()
                            ? Tokenizer::from_default_location()
                            : Tokenizer::from_files(opt.vocab_dir + "/encoder.json", opt.vocab_dir + "/vocab.bpe");
  if (opt.sft) {
    SftOptions so = opt.sft_options;
    so.inputs = opt.inputs;
    so.out_prefix = opt.out_prefix;
    so.shard_tokens = opt.shard_tokens;
    so.no_shard_index = opt.no_shard_index;
    so.width = opt.width;
    so.replace_invalid = opt.replace_invalid;
    so.verbose = opt.progress != "none";
    run_sft(so, tok);
    return 0;
  }
  if (!opt.val_tokens_set) opt.val_tokens = default_val_tokens(total_bytes, opt.shard_tokens);
  make_parent_dirs(opt.out_prefix);

  const bool tty = isatty(2);
  const bool bar = opt.progress == "bar" || (opt.progress == "auto" && tty);
  const bool lines = opt.progress == "lines" || (opt.progress == "auto" && !tty);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto last_report = start;
  uint64_t bytes_done = 0, documents = 0;
  ShardSink sink(opt);

  auto status = [&](double seconds) {
    const double tokens = static_cast<double>(sink.total());
    char s[256];
    std::snprintf(s, sizeof s, "%5.1f%%  %s of %s  %s tokens  %s tok/s  %.1f MB/s",
                  total_bytes ? 100.0 * bytes_done / total_bytes : 100.0, human_bytes(bytes_done).c_str(),
                  human_bytes(total_bytes).c_str(), human_count(tokens).c_str(),
                  human_count(seconds > 0 ? tokens / seconds : 0).c_str(),
                  seconds > 0 ? bytes_done / seconds / 1e6 : 0.0);
    return std::string(s);
  };

  Pipeline pipeline(opt, tok);
  pipeline.run([&](const Result& r) {
    sink.append(r.tokens.data(), r.tokens.size());
    bytes_done += r.input_bytes;
    documents += r.documents;
    const auto now = Clock::now();
    const double since = std::chrono::duration<double>(now - last_report).count();
    const double elapsed = std::chrono::duration<double>(now - start).count();
    if (bar && since >= 0.2) {
      const int width = 30;
      const int filled = total_bytes ? static_cast<int>(width * std::min(1.0, double(bytes_done) / total_bytes)) : width;
      std::fprintf(stderr, "\r\033[K[%s%s] %s", std::string(filled, '#').c_str(),
                   std::string(width - filled, '.').c_str(), status(elapsed).c_str());
      std::fflush(stderr);
      last_report = now;
    } else if (lines && since >= opt.progress_interval) {
      std::fprintf(stderr, "progress: %s\n", status(elapsed).c_str());
      last_report = now;
    }
  });
  sink.finish();
  remove_stale_outputs(opt.out_prefix, sink.written(), opt.progress != "none");
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  if (opt.progress != "none") {
    if (bar) std::fprintf(stderr, "\r\033[K");
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::fprintf(stderr,
                 "done: %s documents, %s tokens, %s in %.2f s (%s tok/s, %.1f MB/s, %u threads, peak RSS %ld MB)\n",
                 with_commas(documents).c_str(), with_commas(sink.total()).c_str(), human_bytes(bytes_done).c_str(),
                 elapsed, human_count(elapsed > 0 ? sink.total() / elapsed : 0).c_str(),
                 elapsed > 0 ? bytes_done / elapsed / 1e6 : 0.0, opt.threads, usage.ru_maxrss / 1024);
    if (sink.total() == 0) std::fprintf(stderr, "note: the inputs hold no documents; no shard was written\n");
  }
  report_split(opt, sink);
  return 0;
}

}  // namespace
}  // namespace gpt2

int main(int argc, char** argv) {
  try {
    return gpt2::run(argc, argv);
  } catch (const std::exception& e) {
    if (isatty(2)) std::fputs("\r\033[K", stderr);  // clear a progress bar
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
