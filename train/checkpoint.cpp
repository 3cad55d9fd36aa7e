#include "train/checkpoint.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <stdexcept>

#include "util/checked_io.h"

namespace gpt2 {

namespace {

constexpr char kStateMagic[8] = {'G', 'P', 'T', '2', 'S', 'T', 'A', 'T'};

// Appends POD values to a byte buffer (little-endian host assumed, as llm.c).
class ByteWriter {
 public:
  template <typename T>
  void put(const T& x) { put_bytes(&x, sizeof(T)); }
  void put_bytes(const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
  }
  const std::vector<uint8_t>& bytes() const { return buf_; }

 private:
  std::vector<uint8_t> buf_;
};

class ByteReader {
 public:
  ByteReader(const std::vector<uint8_t>& b, const std::string& path) : b_(b), path_(path) {}
  template <typename T>
  T get() {
    T x;
    get_bytes(&x, sizeof(T));
    return x;
  }
  void get_bytes(void* p, size_t n) {
    if (n > b_.size() - pos_) throw std::runtime_error(path_ + ": truncated state file");
    std::memcpy(p, b_.data() + pos_, n);
    pos_ += n;
  }
  size_t remaining() const { return b_.size() - pos_; }

 private:
  const std::vector<uint8_t>& b_;
  const std::string& path_;
  size_t pos_ = 0;
};

std::string step_name(const char* prefix, uint64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s_%08" PRIu64, prefix, step);
  return buf;
}

}  // namespace

void write_state_file(const std::string& path, const TrainState& s) {
  ByteWriter w;
  w.put_bytes(kStateMagic, sizeof(kStateMagic));
  w.put(kStateFileVersion);
  w.put(s.step);
  const int32_t cfg[6] = {s.config.max_seq_len, s.config.vocab_size, s.config.padded_vocab_size,
                          s.config.num_layers, s.config.num_heads, s.config.channels};
  w.put_bytes(cfg, sizeof(cfg));
  w.put(s.world);
  w.put(s.rank);
  w.put(s.zero_stage);
  w.put(s.shard_begin);
  w.put(s.shard_end);
  w.put(s.num_params);
  w.put(s.batch_size);
  w.put(s.seq_len);
  w.put(s.total_batch_tokens);
  w.put(s.seed);
  w.put(s.sample_rng);
  w.put(s.nan_skips);
  w.put(static_cast<uint64_t>(s.master.size()));
  w.put(static_cast<uint64_t>(s.loader_state.size()));
  w.put_bytes(s.loader_state.data(), s.loader_state.size());
  const uint64_t n = s.shard_end - s.shard_begin;
  if (s.m.size() != n || s.v.size() != n || (!s.master.empty() && s.master.size() != n))
    throw std::runtime_error(path + ": optimizer state does not match the shard size");
  const uint64_t checksum =
      fnv1a64(w.bytes().data(), w.bytes().size(),
              fnv1a64(s.m.data(), n * 4, fnv1a64(s.v.data(), n * 4, fnv1a64(s.master.data(), s.master.size() * 4))));
  AtomicOutputFile out(path);
  out.write(w.bytes().data(), w.bytes().size());
  out.write(s.m.data(), n * sizeof(float));
  out.write(s.v.data(), n * sizeof(float));
  out.write(s.master.data(), s.master.size() * sizeof(float));
  out.write(&checksum, sizeof(checksum));
  out.commit();
}

TrainState read_state_file(const std::string& path) {
  InputFile in(path);
  if (in.size() < 16) throw std::runtime_error(path + ": truncated state file (" + std::to_string(in.size()) + " bytes)");
  std::vector<uint8_t> all(in.size());
  in.read(all.data(), all.size(), "state");
  ByteReader r(all, path);
  char magic[8];
  r.get_bytes(magic, 8);
  if (std::memcmp(magic, kStateMagic, 8) != 0) throw std::runtime_error(path + ": not a trainer state file (bad magic)");
  const uint32_t version = r.get<uint32_t>();
  if (version != kStateFileVersion)
    throw std::runtime_error(path + ": unsupported state file version " + std::to_string(version) +
                             " (expected " + std::to_string(kStateFileVersion) + ")");
  TrainState s;
  s.step = r.get<uint64_t>();
  int32_t cfg[6];
  r.get_bytes(cfg, sizeof(cfg));
  s.config.max_seq_len = cfg[0];
  s.config.vocab_size = cfg[1];
  s.config.padded_vocab_size = cfg[2];
  s.config.num_layers = cfg[3];
  s.config.num_heads = cfg[4];
  s.config.channels = cfg[5];
  s.world = r.get<uint32_t>();
  s.rank = r.get<uint32_t>();
  s.zero_stage = r.get<uint32_t>();
  s.shard_begin = r.get<uint64_t>();
  s.shard_end = r.get<uint64_t>();
  s.num_params = r.get<uint64_t>();
  s.batch_size = r.get<int32_t>();
  s.seq_len = r.get<int32_t>();
  s.total_batch_tokens = r.get<int64_t>();
  s.seed = r.get<uint64_t>();
  s.sample_rng = r.get<uint64_t>();
  s.nan_skips = r.get<uint64_t>();
  const uint64_t master_count = r.get<uint64_t>();
  const uint64_t loader_bytes = r.get<uint64_t>();
  if (loader_bytes > r.remaining()) throw std::runtime_error(path + ": truncated state file (loader state)");
  s.loader_state.resize(loader_bytes);
  r.get_bytes(s.loader_state.data(), loader_bytes);
  if (s.shard_end < s.shard_begin || s.shard_end > s.num_params)
    throw std::runtime_error(path + ": corrupt shard range");
  const uint64_t n = s.shard_end - s.shard_begin;
  const size_t header_bytes = all.size() - r.remaining();
  if (master_count != 0 && master_count != n) throw std::runtime_error(path + ": corrupt master weight count");
  if (r.remaining() != (2 * n + master_count) * 4 + 8)
    throw std::runtime_error(path + ": size does not match its shard of " + std::to_string(n) +
                             " parameters (truncated or trailing data)");
  s.m.resize(n);
  s.v.resize(n);
  s.master.resize(master_count);
  r.get_bytes(s.m.data(), n * 4);
  r.get_bytes(s.v.data(), n * 4);
  r.get_bytes(s.master.data(), master_count * 4);
  const uint64_t stored = r.get<uint64_t>();
  const uint64_t actual =
      fnv1a64(all.data(), header_bytes,
              fnv1a64(s.m.data(), n * 4, fnv1a64(s.v.data(), n * 4, fnv1a64(s.master.data(), master_count * 4))));
  if (stored != actual) throw std::runtime_error(path + ": checksum mismatch (file is corrupt)");
  return s;
}

CheckpointDir::CheckpointDir(std::string dir) : dir_(std::move(dir)) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
}

std::string CheckpointDir::model_path(uint64_t step) const { return dir_ + "/" + step_name("model", step) + ".bin"; }

std::string CheckpointDir::state_path(uint64_t step, uint32_t rank) const {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "_%05u.bin", rank);
  return dir_ + "/" + step_name("state", step) + buf;
}

std::string CheckpointDir::done_path(uint64_t step) const { return dir_ + "/" + step_name("DONE", step); }

std::vector<uint64_t> CheckpointDir::complete_steps() const {
  std::vector<uint64_t> steps;
  DIR* d = opendir(dir_.c_str());
  if (!d) return steps;
  while (dirent* e = readdir(d)) {
    uint64_t step;
    char tail;
    if (std::sscanf(e->d_name, "DONE_%" SCNu64 "%c", &step, &tail) == 1) steps.push_back(step);
  }
  closedir(d);
  std::sort(steps.begin(), steps.end());
  return steps;
}

void CheckpointDir::read_marker(uint64_t step, uint32_t* world, uint32_t* zero_stage) const {
  const std::string path = done_path(step);
  std::string text = read_text_file(path);
  unsigned long long s = 0;
  unsigned w = 0, z = 0;
  if (std::sscanf(text.c_str(), "step=%llu world=%u zero_stage=%u", &s, &w, &z) != 3 || s != step || w == 0)
    throw std::runtime_error(path + ": malformed completion marker");
  *world = w;
  *zero_stage = z;
}

void CheckpointDir::write_marker(uint64_t step, uint32_t world, uint32_t zero_stage) const {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "step=%" PRIu64 " world=%u zero_stage=%u\n", step, world, zero_stage);
  write_text_file_atomic(done_path(step), buf);
}

void CheckpointDir::prune(int keep) const {
  std::vector<uint64_t> done = complete_steps();
  if (done.empty()) return;
  const uint64_t newest = done.back();
  std::vector<uint64_t> remove_steps;
  if (keep > 0 && done.size() > static_cast<size_t>(keep))
    remove_steps.assign(done.begin(), done.end() - keep);
  // Leftovers of incomplete checkpoints (a crash mid-save) older than the newest complete one.
  DIR* d = opendir(dir_.c_str());
  std::vector<std::string> names;
  if (d) {
    while (dirent* e = readdir(d)) names.push_back(e->d_name);
    closedir(d);
  }
  // Markers of doomed checkpoints go first, so an interrupted prune never
  // leaves a marker vouching for files that are gone.
  for (uint64_t step : remove_steps) std::remove(done_path(step).c_str());
  for (const std::string& name : names) {
    uint64_t step;
    if (std::sscanf(name.c_str(), "model_%" SCNu64, &step) != 1 &&
        std::sscanf(name.c_str(), "state_%" SCNu64, &step) != 1)
      continue;
    const bool complete = std::binary_search(done.begin(), done.end(), step);
    const bool doomed = std::find(remove_steps.begin(), remove_steps.end(), step) != remove_steps.end();
    if (doomed || (!complete && step < newest)) std::remove((dir_ + "/" + name).c_str());
  }
}

void load_resharded_moments(const CheckpointDir& ckpt, uint64_t step, uint32_t old_world, uint64_t begin,
                            uint64_t end, std::vector<float>* m, std::vector<float>* v, std::vector<float>* master) {
  m->assign(end - begin, 0.0f);
  v->assign(end - begin, 0.0f);
  master->assign(end - begin, 0.0f);
  bool all_have_master = true;
  // Shards are contiguous and ascending in rank order (ZeRO-1/2); with stage 0
  // every rank holds everything. Either way, take each element from the first
  // state file that has it.
  uint64_t next = begin;
  for (uint32_t r = 0; r < old_world && next < end; r++) {
    TrainState s = read_state_file(ckpt.state_path(step, r));
    const uint64_t lo = std::max(next, s.shard_begin), hi = std::min(end, s.shard_end);
    if (s.shard_begin > next || lo >= hi) continue;
    std::copy(s.m.begin() + (lo - s.shard_begin), s.m.begin() + (hi - s.shard_begin), m->begin() + (lo - begin));
    std::copy(s.v.begin() + (lo - s.shard_begin), s.v.begin() + (hi - s.shard_begin), v->begin() + (lo - begin));
    if (s.master.empty()) all_have_master = false;
    else std::copy(s.master.begin() + (lo - s.shard_begin), s.master.begin() + (hi - s.shard_begin),
                   master->begin() + (lo - begin));
    next = hi;
  }
  if (!all_have_master) master->clear();
  const uint64_t covered = next - begin;
  if (covered != end - begin)
    throw std::runtime_error(ckpt.dir() + ": checkpoint step " + std::to_string(step) +
                             " does not cover parameters [" + std::to_string(begin) + ", " + std::to_string(end) +
                             ") (missing or overlapping state files)");
}

}  // namespace gpt2
