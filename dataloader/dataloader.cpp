#include "dataloader/dataloader.h"

#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>

namespace gpt2 {
namespace {

// Salts that separate the RNG streams of the shard order and window orders.
constexpr uint64_t kShardOrderStream = 0x5348415244ULL;   // "SHARD"
constexpr uint64_t kWindowOrderStream = 0x57494E444FULL;  // "WINDO"
constexpr const char* kStateHeader = "gpt2-dataloader-state";
constexpr uint64_t kStateVersion = 1;

// Seed of an independent stream for (seed, epoch, stream, index).
uint64_t derive_seed(uint64_t seed, uint64_t epoch, uint64_t stream, uint64_t index) {
  uint64_t h = splitmix64_mix(seed + kSplitMix64Gamma);
  h = splitmix64_mix(h ^ epoch);
  h = splitmix64_mix(h ^ stream);
  return splitmix64_mix(h ^ index);
}

bool is_regular_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string basename_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// FNV-1a over bytes, continued from `h`.
uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001B3ULL;
  }
  return h;
}

}  // namespace

std::vector<uint64_t> random_permutation(uint64_t n, Rng& rng) {
  std::vector<uint64_t> p(n);
  for (uint64_t i = 0; i < n; ++i) p[i] = i;
  for (uint64_t i = n; i > 1; --i) std::swap(p[i - 1], p[rng.below(i)]);
  return p;
}

// ---------------------------------------------------------------- patterns

std::vector<std::string> expand_shard_pattern(const std::string& pattern) {
  if (pattern.empty()) throw std::runtime_error("dataloader: empty shard pattern");
  std::vector<std::string> entries;
  if (is_regular_file(pattern)) {
    entries.push_back(pattern);
  } else {
    size_t start = 0;
    while (true) {
      const size_t comma = pattern.find(',', start);
      entries.push_back(pattern.substr(start, comma == std::string::npos ? std::string::npos
                                                                          : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  std::vector<std::string> files;
  std::set<std::string> seen;
  for (const std::string& entry : entries) {
    if (entry.empty()) throw std::runtime_error("dataloader: empty entry in shard pattern '" + pattern + "'");
    std::vector<std::string> matches;
    glob_t g;
    std::memset(&g, 0, sizeof(g));
    const int rc = ::glob(entry.c_str(), GLOB_NOSORT, nullptr, &g);
    if (rc == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) matches.emplace_back(g.gl_pathv[i]);
    }
    ::globfree(&g);
    if (rc == GLOB_NOSPACE) throw std::runtime_error(entry + ": out of memory expanding the glob");
    if (rc == GLOB_ABORTED) throw std::runtime_error(entry + ": read error expanding the glob");
    if (matches.empty()) throw std::runtime_error(entry + ": no file matches this shard pattern");
    // Bytewise order, independent of the locale, so every rank sees the same list.
    std::sort(matches.begin(), matches.end());
    for (std::string& m : matches) {
      if (!seen.insert(m).second)
        throw std::runtime_error(m + ": listed twice by shard pattern '" + pattern + "'");
      files.push_back(std::move(m));
    }
  }
  return files;
}

// ---------------------------------------------------------------- DataLoader

DataLoader::DataLoader(const DataLoaderOptions& options) : options_(options) {
  const std::string who = "dataloader '" + options.pattern + "'";
  if (options.B <= 0 || options.T <= 0)
    throw std::runtime_error(who + ": B and T must be positive (got B=" + std::to_string(options.B) +
                             " T=" + std::to_string(options.T) + ")");
  if (options.world <= 0 || options.rank < 0 || options.rank >= options.world)
    throw std::runtime_error(who + ": rank " + std::to_string(options.rank) + " outside world of " +
                             std::to_string(options.world));
  if (options.grad_accum <= 0)
    throw std::runtime_error(who + ": grad_accum must be positive (got " +
                             std::to_string(options.grad_accum) + ")");
  // Ids go out as int32, so the vocabulary must fit below 2^31.
  if (options.vocab_size == 0 || options.vocab_size > static_cast<uint32_t>(INT32_MAX))
    throw std::runtime_error(who + ": vocab_size " + std::to_string(options.vocab_size) +
                             " outside [1, 2^31)");
  tokens_per_window_ = static_cast<uint64_t>(options.B) * static_cast<uint64_t>(options.T);
  if (tokens_per_window_ > static_cast<uint64_t>(INT32_MAX))
    throw std::runtime_error(who + ": B*T = " + std::to_string(tokens_per_window_) + " exceeds 2^31-1");
  step_windows_ = static_cast<uint64_t>(options.world) * static_cast<uint64_t>(options.grad_accum);

  files_ = expand_shard_pattern(options.pattern);
  // Headers of every shard are validated up front (cheap); token ids are
  // scanned once per shard when it is first read.
  for (const std::string& path : files_) {
    ShardFile file(path);
    Shard shard;
    shard.count = file.count();
    shard.width = file.width();
    shard.windows = shard.count == 0 ? 0 : (shard.count - 1) / tokens_per_window_;
    if (shard.windows == 0)
      throw std::runtime_error(path + ": shard of " + std::to_string(shard.count) +
                               " tokens is shorter than one window of B*T+1 = " +
                               std::to_string(tokens_per_window_ + 1) + " tokens (B=" +
                               std::to_string(options.B) + " T=" + std::to_string(options.T) + ")");
    if (shard.windows < step_windows_)
      throw std::runtime_error(
          path + ": shard of " + std::to_string(shard.count) + " tokens holds " +
          std::to_string(shard.windows) + " windows of B*T+1 tokens, fewer than world*grad_accum = " +
          std::to_string(step_windows_) + " needed for one optimizer step");
    total_tokens_ += shard.count;
    samples_per_epoch_ += shard.windows / step_windows_ * step_windows_;
    shards_.push_back(shard);
  }
  validate_loss_masks();
  buffer_.resize(tokens_per_window_ + 1);
  if (has_mask_) mask_buffer_.resize(tokens_per_window_);
  reset();
}

// Loss-mask sidecars: all shards or none; each one's count equals its shard's and
// its packed row length (when not 0) equals T.
void DataLoader::validate_loss_masks() {
  std::vector<bool> present(files_.size());
  size_t with = files_.size(), without = files_.size();
  for (size_t i = 0; i < files_.size(); ++i) {
    present[i] = ::access(loss_mask_path(files_[i]).c_str(), F_OK) == 0;
    if (present[i] && with == files_.size()) with = i;
    if (!present[i] && without == files_.size()) without = i;
  }
  has_mask_ = with != files_.size();
  if (!has_mask_) return;
  if (without != files_.size())
    throw std::runtime_error(files_[without] + ": shard has no loss-mask sidecar " +
                             loss_mask_path(files_[without]) + ", but " + files_[with] + " has " +
                             loss_mask_path(files_[with]) + " (" + where() +
                             "; with loss masks every shard needs one)");
  for (size_t i = 0; i < files_.size(); ++i) {
    const LossMaskFile mask(loss_mask_path(files_[i]));
    if (mask.count() != shards_[i].count)
      throw std::runtime_error(mask.path() + ": loss mask has " + std::to_string(mask.count()) +
                               " tokens but its shard " + files_[i] + " has " +
                               std::to_string(shards_[i].count));
    if (mask.info().T != 0 && mask.info().T != options_.T)
      throw std::runtime_error(mask.path() + ": packed for T=" + std::to_string(mask.info().T) +
                               " but the run uses --seq-len " + std::to_string(options_.T) +
                               " (re-run prepare_data --sft --seq-len " + std::to_string(options_.T) +
                               ", or train with --seq-len " + std::to_string(mask.info().T) + ")");
  }
}

std::string DataLoader::where() const { return "dataloader '" + options_.pattern + "'"; }

void DataLoader::reset() {
  epoch_ = 0;
  shard_pos_ = 0;
  cursor_ = 0;
  call_in_step_ = 0;
  begin_epoch(0);
  enter_shard();
}

void DataLoader::begin_epoch(uint64_t epoch) {
  if (options_.shuffle) {
    Rng rng(derive_seed(options_.seed, epoch, kShardOrderStream, 0));
    const std::vector<uint64_t> p = random_permutation(shards_.size(), rng);
    shard_order_.assign(p.begin(), p.end());
  } else {
    shard_order_.resize(shards_.size());
    for (size_t i = 0; i < shard_order_.size(); ++i) shard_order_[i] = i;
  }
}

void DataLoader::enter_shard() {
  const size_t index = shard_order_[shard_pos_];
  Shard& shard = shards_[index];
  if (!file_.is_open() || file_.path() != files_[index]) {
    ShardFile file(files_[index]);
    if (file.count() != shard.count || file.width() != shard.width)
      throw std::runtime_error(files_[index] + ": shard changed since the loader opened it (" +
                               std::to_string(shard.count) + " tokens then, " +
                               std::to_string(file.count()) + " now)");
    file_ = std::move(file);
  }
  if (has_mask_ && (!mask_file_.is_open() || mask_file_.path() != loss_mask_path(files_[index]))) {
    LossMaskFile mask(loss_mask_path(files_[index]));
    if (mask.count() != shard.count)
      throw std::runtime_error(mask.path() + ": loss mask has " + std::to_string(mask.count()) +
                               " tokens but its shard " + files_[index] + " has " +
                               std::to_string(shard.count) + " (changed since the loader opened it?)");
    mask_file_ = std::move(mask);
  }
  if (!shard.ids_checked) {
    file_.check_ids(options_.vocab_size);
    if (has_mask_) mask_file_.check_all();
    shard.ids_checked = true;
  }
  if (options_.shuffle) {
    Rng rng(derive_seed(options_.seed, epoch_, kWindowOrderStream, index));
    window_order_ = random_permutation(shard.windows, rng);
  } else {
    window_order_.clear();
  }
}

void DataLoader::advance_shard() {
  cursor_ = 0;
  if (++shard_pos_ == shards_.size()) {
    shard_pos_ = 0;
    ++epoch_;
    begin_epoch(epoch_);
  }
  enter_shard();
}

void DataLoader::next_batch(int32_t* inputs, int32_t* targets) {
  if (call_in_step_ == 0 && cursor_ + step_windows_ > shards_[current_shard()].windows) advance_shard();
  const uint64_t window = window_at(cursor_ + static_cast<uint64_t>(options_.rank));
  const uint64_t first = window * tokens_per_window_;
  const size_t n = buffer_.size();
  file_.read(first, n, buffer_.data());
  // The shard was scanned when first opened; checking again costs one compare
  // per token and turns a file modified since into an error instead of a crash.
  for (size_t i = 0; i < n; ++i) {
    if (buffer_[i] >= options_.vocab_size) {
      const uint64_t index = first + i;
      throw std::runtime_error(file_.path() + ": token id " + std::to_string(buffer_[i]) +
                               " >= vocab size " + std::to_string(options_.vocab_size) + " at token " +
                               std::to_string(index) + " (byte offset " +
                               std::to_string(shard_token_offset(index, file_.width())) + ")");
    }
  }
  for (size_t i = 0; i + 1 < n; ++i) {
    inputs[i] = static_cast<int32_t>(buffer_[i]);
    targets[i] = static_cast<int32_t>(buffer_[i + 1]);
  }
  if (has_mask_) {
    // Target i is token first+i+1; its mask byte says whether it is supervised.
    mask_file_.read(first + 1, n - 1, mask_buffer_.data());
    for (size_t i = 0; i + 1 < n; ++i)
      if (mask_buffer_[i] == 0) targets[i] = -1;
  }
  cursor_ += static_cast<uint64_t>(options_.world);
  call_in_step_ = (call_in_step_ + 1) % options_.grad_accum;
}

// ---------------------------------------------------------------- state

uint64_t DataLoader::fingerprint() const {
  // Shard basenames (not directories, so a moved data folder still resumes),
  // token counts and widths, in order.
  uint64_t h = 0xCBF29CE484222325ULL;
  for (size_t i = 0; i < files_.size(); ++i) {
    const std::string name = basename_of(files_[i]);
    h = fnv1a(h, name.data(), name.size() + 1);  // include the NUL as a separator
    h = fnv1a(h, &shards_[i].count, sizeof(shards_[i].count));
    const uint8_t width = static_cast<uint8_t>(token_bytes(shards_[i].width));
    h = fnv1a(h, &width, 1);
  }
  return h;
}

std::vector<uint8_t> DataLoader::save_state() const {
  char fp[17];
  std::snprintf(fp, sizeof(fp), "%016llx", static_cast<unsigned long long>(fingerprint()));
  std::string s = std::string(kStateHeader) + " " + std::to_string(kStateVersion) + "\n";
  auto line = [&s](const char* key, const std::string& value) { s += std::string(key) + " " + value + "\n"; };
  line("shards", std::to_string(shards_.size()));
  line("tokens", std::to_string(total_tokens_));
  line("fingerprint", fp);
  line("B", std::to_string(options_.B));
  line("T", std::to_string(options_.T));
  line("shuffle", options_.shuffle ? "1" : "0");
  line("seed", std::to_string(options_.seed));
  line("world", std::to_string(options_.world));
  line("grad_accum", std::to_string(options_.grad_accum));
  line("epoch", std::to_string(epoch_));
  line("shard_pos", std::to_string(shard_pos_));
  line("cursor", std::to_string(cursor_));
  line("call_in_step", std::to_string(call_in_step_));
  return std::vector<uint8_t>(s.begin(), s.end());
}

void DataLoader::load_state(const std::vector<uint8_t>& state) {
  const std::string who = where() + ": cannot restore state: ";
  const std::string text(state.begin(), state.end());
  // Parse "key value" lines strictly: the header first, then each known key once.
  std::map<std::string, std::string> fields;
  size_t pos = 0;
  bool first_line = true;
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    if (end == std::string::npos) throw std::runtime_error(who + "truncated (no final newline)");
    const std::string l = text.substr(pos, end - pos);
    pos = end + 1;
    const size_t space = l.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == l.size() ||
        l.find(' ', space + 1) != std::string::npos)
      throw std::runtime_error(who + "malformed line '" + l.substr(0, 64) + "'");
    const std::string key = l.substr(0, space), value = l.substr(space + 1);
    if (first_line) {
      if (key != kStateHeader) throw std::runtime_error(who + "not a dataloader state");
      if (value != std::to_string(kStateVersion))
        throw std::runtime_error(who + "unsupported version '" + value.substr(0, 32) + "' (this build reads " +
                                 std::to_string(kStateVersion) + ")");
      first_line = false;
      continue;
    }
    if (!fields.emplace(key, value).second)
      throw std::runtime_error(who + "key '" + key.substr(0, 32) + "' repeated");
  }
  if (first_line) throw std::runtime_error(who + "empty");
  auto get = [&](const char* key) -> const std::string& {
    auto it = fields.find(key);
    if (it == fields.end()) throw std::runtime_error(who + "missing key '" + key + "'");
    return it->second;
  };
  auto number = [&](const char* key) -> uint64_t {
    const std::string& v = get(key);
    if (v.empty() || v.size() > 20 || v.find_first_not_of("0123456789") != std::string::npos)
      throw std::runtime_error(who + "key '" + key + "' is not a number: '" + v.substr(0, 32) + "'");
    uint64_t x = 0;
    for (char c : v) {
      const uint64_t d = static_cast<uint64_t>(c - '0');
      if (x > (UINT64_MAX - d) / 10) throw std::runtime_error(who + "key '" + key + "' overflows");
      x = x * 10 + d;
    }
    return x;
  };
  static const char* const kKeys[] = {"shards", "tokens", "fingerprint", "B", "T", "shuffle", "seed",
                                      "world", "grad_accum", "epoch", "shard_pos", "cursor",
                                      "call_in_step"};
  for (const auto& kv : fields)
    if (std::find_if(std::begin(kKeys), std::end(kKeys),
                     [&](const char* k) { return kv.first == k; }) == std::end(kKeys))
      throw std::runtime_error(who + "unknown key '" + kv.first.substr(0, 32) + "'");

  // Identity: same shards, same window size, same order.
  const uint64_t shards = number("shards"), tokens = number("tokens");
  char fp[17];
  std::snprintf(fp, sizeof(fp), "%016llx", static_cast<unsigned long long>(fingerprint()));
  if (shards != shards_.size() || tokens != total_tokens_ || get("fingerprint") != fp)
    throw std::runtime_error(who + "it was saved for other shard files (" + std::to_string(shards) +
                             " shards, " + std::to_string(tokens) + " tokens, fingerprint " +
                             get("fingerprint").substr(0, 32) + "); this loader has " +
                             std::to_string(shards_.size()) + " shards, " + std::to_string(total_tokens_) +
                             " tokens, fingerprint " + fp);
  const uint64_t B = number("B"), T = number("T");
  if (B != static_cast<uint64_t>(options_.B) || T != static_cast<uint64_t>(options_.T))
    throw std::runtime_error(who + "it was saved with B=" + std::to_string(B) + " T=" + std::to_string(T) +
                             ", this loader has B=" + std::to_string(options_.B) +
                             " T=" + std::to_string(options_.T));
  const uint64_t shuffle = number("shuffle"), seed = number("seed");
  if (shuffle > 1) throw std::runtime_error(who + "key 'shuffle' must be 0 or 1");
  if ((shuffle == 1) != options_.shuffle || (options_.shuffle && seed != options_.seed))
    throw std::runtime_error(who + "it was saved with shuffle=" + std::to_string(shuffle) +
                             " seed=" + std::to_string(seed) + ", this loader has shuffle=" +
                             (options_.shuffle ? "1" : "0") + " seed=" + std::to_string(options_.seed));
  const uint64_t world = number("world"), grad_accum = number("grad_accum");
  if (world == 0 || grad_accum == 0 || world > UINT32_MAX || grad_accum > UINT32_MAX)
    throw std::runtime_error(who + "world and grad_accum must be positive 32-bit numbers");
  if (world * grad_accum != step_windows_)
    throw std::runtime_error(who + "it was saved with world*grad_accum = " + std::to_string(world) + "*" +
                             std::to_string(grad_accum) + " = " + std::to_string(world * grad_accum) +
                             " windows per optimizer step, this loader has " +
                             std::to_string(options_.world) + "*" + std::to_string(options_.grad_accum) +
                             " = " + std::to_string(step_windows_));

  // Position.
  const uint64_t epoch = number("epoch"), shard_pos = number("shard_pos"), cursor = number("cursor"),
                 call = number("call_in_step");
  if (call >= grad_accum) throw std::runtime_error(who + "call_in_step out of range");
  if (call != 0 && world != static_cast<uint64_t>(options_.world))
    throw std::runtime_error(who + "it was saved in the middle of an optimizer step (micro-batch " +
                             std::to_string(call) + " of " + std::to_string(grad_accum) + ") with world=" +
                             std::to_string(world) + "; resuming with world=" + std::to_string(options_.world) +
                             " needs a state saved at a step boundary");
  if (shard_pos >= shards_.size()) throw std::runtime_error(who + "shard_pos out of range");
  // The cursor must lie in the shard it points to, at micro-batch `call` of a
  // step: cursor = step_start + call*world with step_start a multiple of S.
  std::vector<size_t> previous_order = shard_order_;
  begin_epoch(epoch);
  const size_t file_index = shard_order_[shard_pos];
  const uint64_t windows = shards_[file_index].windows;
  const uint64_t w = static_cast<uint64_t>(options_.world);
  const uint64_t ga = static_cast<uint64_t>(options_.grad_accum);  // == grad_accum when call != 0
  const bool cursor_ok = cursor <= windows && cursor % w == 0 && (cursor / w) % ga == call &&
                         (call == 0 || (ga - call) * w <= windows - cursor);
  if (!cursor_ok) {
    shard_order_ = std::move(previous_order);
    throw std::runtime_error(who + "cursor " + std::to_string(cursor) + " at micro-batch " +
                             std::to_string(call) + " is not a valid position in shard " +
                             files_[file_index] + " (" + std::to_string(windows) + " windows)");
  }
  epoch_ = epoch;
  shard_pos_ = static_cast<size_t>(shard_pos);
  cursor_ = cursor;
  call_in_step_ = static_cast<int>(call);
  enter_shard();
}

}  // namespace gpt2
