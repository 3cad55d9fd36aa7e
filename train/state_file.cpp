// state_N_R.bin's codec and its checks (magic, version, size, checksum);
// format in train/state_file.h and docs/formats.md.
#include "train/state_file.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "util/checked_io.h"
#include "util/checksum.h"

namespace gpt2 {

namespace {

constexpr char kStateMagic[8] = {'G', 'P', 'T', '2', 'S', 'T', 'A', 'T'};

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

// The fixed fields after magic and version, in file order, grouped as
// TrainState declares them; `io` puts (writer) or gets (reader) each group: one
// list, so the two cannot drift apart. `version` says which blocks the file
// has; the schedule's kind travels as an int32 (`kind`), checked by the reader.
template <typename IO, typename State>
void fixed_fields(IO&& io, State& s, uint32_t version, int32_t& kind) {
  auto& c = s.config;
  io(s.step);
  io(c.max_seq_len, c.vocab_size, c.padded_vocab_size, c.num_layers, c.num_heads, c.channels);
  io(s.world, s.rank, s.zero_stage);
  io(s.shard_begin, s.shard_end);
  io(s.num_params);
  io(s.batch_size, s.seq_len);
  io(s.total_batch_tokens);
  io(s.seed);
  io(s.sample_rng);
  io(s.nan_skips);
  if (version >= 2)
    io(kind, s.schedule.max_lr, s.schedule.warmup_steps, s.schedule.total_steps, s.schedule.final_frac,
       s.schedule.wsd_decay_frac);
  if (version >= 3) io(s.eval.best_loss, s.eval.best_step, s.eval.last_step, s.eval.bad_evals);
}

}  // namespace

FileDigest write_state_file(const std::string& path, const TrainState& s) {
  // Everything before the moments, POD values as the host lays them out
  // (little-endian assumed, as llm.c).
  std::vector<uint8_t> header;
  const auto put_bytes = [&header](const void* p, size_t n) {
    header.insert(header.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  };
  const auto put = [&](const auto& x) { put_bytes(&x, sizeof x); };
  put_bytes(kStateMagic, sizeof(kStateMagic));
  put(kStateFileVersion);
  int32_t kind = static_cast<int32_t>(s.schedule.kind);
  fixed_fields([&](const auto&... x) { (put(x), ...); }, s, kStateFileVersion, kind);
  put(s.spikes.skips);
  for (const std::vector<double>* window : {&s.spikes.loss, &s.spikes.grad_norm}) {
    put(static_cast<uint32_t>(window->size()));
    put_bytes(window->data(), window->size() * sizeof(double));
  }
  put(static_cast<uint64_t>(s.master.size()));
  put(static_cast<uint64_t>(s.loader_state.size()));
  put_bytes(s.loader_state.data(), s.loader_state.size());
  const uint64_t n = s.shard_end - s.shard_begin;
  if (s.m.size() != n || s.v.size() != n || (!s.master.empty() && s.master.size() != n))
    throw std::runtime_error(path + ": optimizer state does not match the shard size");
  const uint64_t checksum =
      fnv1a64(header.data(), header.size(),
              fnv1a64(s.m.data(), n * 4, fnv1a64(s.v.data(), n * 4, fnv1a64(s.master.data(), s.master.size() * 4))));
  // The whole-file digest for the completion marker, hashed from the same
  // buffers as they are written.
  Xxh64 digest;
  AtomicOutputFile out(path);
  auto write = [&](const void* p, size_t bytes) {
    digest.update(p, bytes);
    out.write(p, bytes);
  };
  write(header.data(), header.size());
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
  int32_t kind = 0;
  fixed_fields([&](auto&... x) { ((x = r.get<std::remove_reference_t<decltype(x)>>()), ...); }, s, version, kind);
  if (version >= 2) {
    if (kind < 0 || kind > static_cast<int32_t>(LrScheduleKind::kWsd))
      throw std::runtime_error(path + ": corrupt learning-rate schedule kind " + std::to_string(kind));
    s.has_schedule = true;
    s.schedule.kind = static_cast<LrScheduleKind>(kind);
  }
  if (header_only) return s;
  if (version >= 4) {  // the spike guards: the skip count, then each window as a count and its values
    s.spikes.skips = r.get<uint64_t>();
    for (std::vector<double>* window : {&s.spikes.loss, &s.spikes.grad_norm}) {
      const uint32_t n = r.get<uint32_t>();
      if (n > r.remaining() / sizeof(double)) throw std::runtime_error(path + ": truncated state file (spike window)");
      window->resize(n);
      if (n) r.get_bytes(window->data(), n * sizeof(double));
    }
  }
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
  FileDigest d{base_name(path)};
  d.xxh64 = xxh64_file(path, &d.size);
  return d;
}

}  // namespace gpt2
