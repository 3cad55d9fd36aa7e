// The trainer state file's codec: writing and reading state_N_R.bin with its
// checks (magic, version, size, checksum); format in train/state_file.h and
// docs/formats.md.
#include "train/state_file.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "util/checked_io.h"
#include "util/checksum.h"

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

// Version 4's spike guard block: the skip count, then each window as a count and its values.
void read_spike_state(ByteReader& r, const std::string& path, SpikeState* s) {
  s->skips = r.get<uint64_t>();
  for (std::vector<double>* window : {&s->loss, &s->grad_norm}) {
    const uint32_t n = r.get<uint32_t>();
    if (n > r.remaining() / sizeof(double)) throw std::runtime_error(path + ": truncated state file (spike window)");
    window->resize(n);
    if (n) r.get_bytes(window->data(), n * sizeof(double));
  }
}

}  // namespace

FileDigest write_state_file(const std::string& path, const TrainState& s) {
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
  w.put(static_cast<int32_t>(s.schedule.kind));
  w.put(s.schedule.max_lr);
  w.put(static_cast<int32_t>(s.schedule.warmup_steps));
  w.put(static_cast<int32_t>(s.schedule.total_steps));
  w.put(s.schedule.final_frac);
  w.put(s.schedule.wsd_decay_frac);
  w.put(s.eval.best_loss);
  w.put(s.eval.best_step);
  w.put(s.eval.last_step);
  w.put(s.eval.bad_evals);
  w.put(s.spikes.skips);
  for (const std::vector<double>* window : {&s.spikes.loss, &s.spikes.grad_norm}) {
    w.put(static_cast<uint32_t>(window->size()));
    if (!window->empty()) w.put_bytes(window->data(), window->size() * sizeof(double));
  }
  w.put(static_cast<uint64_t>(s.master.size()));
  w.put(static_cast<uint64_t>(s.loader_state.size()));
  w.put_bytes(s.loader_state.data(), s.loader_state.size());
  const uint64_t n = s.shard_end - s.shard_begin;
  if (s.m.size() != n || s.v.size() != n || (!s.master.empty() && s.master.size() != n))
    throw std::runtime_error(path + ": optimizer state does not match the shard size");
  const uint64_t checksum =
      fnv1a64(w.bytes().data(), w.bytes().size(),
              fnv1a64(s.m.data(), n * 4, fnv1a64(s.v.data(), n * 4, fnv1a64(s.master.data(), s.master.size() * 4))));
  // The whole-file digest for the completion marker, hashed from the same
  // buffers as they are written.
  Xxh64 digest;
  AtomicOutputFile out(path);
  auto write = [&](const void* p, size_t bytes) {
    digest.update(p, bytes);
    out.write(p, bytes);
  };
  write(w.bytes().data(), w.bytes().size());
  write(s.m.data(), n * sizeof(float));
  write(s.v.data(), n * sizeof(float));
  write(s.master.data(), s.master.size() * sizeof(float));
  write(&checksum, sizeof(checksum));
  out.commit();
  return FileDigest{base_name(path), digest.total_bytes(), digest.digest()};
}

TrainState read_state_file(const std::string& path, bool header_only) {
  InputFile in(path);
  if (in.size() < 16) throw std::runtime_error(path + ": truncated state file (" + std::to_string(in.size()) + " bytes)");
  // The fixed fields take under 200 bytes.
  std::vector<uint8_t> all(header_only ? std::min<uint64_t>(in.size(), 512) : in.size());
  in.read(all.data(), all.size(), "state");
  ByteReader r(all, path);
  char magic[8];
  r.get_bytes(magic, 8);
  if (std::memcmp(magic, kStateMagic, 8) != 0) throw std::runtime_error(path + ": not a trainer state file (bad magic)");
  const uint32_t version = r.get<uint32_t>();
  if (version < 1 || version > kStateFileVersion)
    throw std::runtime_error(path + ": unsupported state file version " + std::to_string(version) +
                             " (expected 1 to " + std::to_string(kStateFileVersion) + ")");
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
  if (version >= 2) {
    const int32_t kind = r.get<int32_t>();
    if (kind < 0 || kind > static_cast<int32_t>(LrScheduleKind::kWsd))
      throw std::runtime_error(path + ": corrupt learning-rate schedule kind " + std::to_string(kind));
    s.has_schedule = true;
    s.schedule.kind = static_cast<LrScheduleKind>(kind);
    s.schedule.max_lr = r.get<float>();
    s.schedule.warmup_steps = r.get<int32_t>();
    s.schedule.total_steps = r.get<int32_t>();
    s.schedule.final_frac = r.get<float>();
    s.schedule.wsd_decay_frac = r.get<float>();
  }
  if (version >= 3) {
    s.eval.best_loss = r.get<double>();
    s.eval.best_step = r.get<int64_t>();
    s.eval.last_step = r.get<int64_t>();
    s.eval.bad_evals = r.get<uint32_t>();
  }
  if (header_only) return s;
  if (version >= 4) read_spike_state(r, path, &s.spikes);
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

FileDigest digest_file(const std::string& path) {
  FileDigest d;
  d.name = base_name(path);
  d.xxh64 = xxh64_file(path, &d.size);
  return d;
}

}  // namespace gpt2
