#include "train/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <sys/file.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include "distributed/comm.h"
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

std::string step_name(const char* prefix, uint64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s_%08" PRIu64, prefix, step);
  return buf;
}

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

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

CheckpointDir::CheckpointDir(std::string dir, bool lock, const Notify& note) : dir_(std::move(dir)) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  if (lock) {
    make_directories(dir_);
    lock_ = std::make_unique<OutputDirLock>(dir_, note);
  }
}

CheckpointDir::~CheckpointDir() = default;

std::string CheckpointDir::model_path(uint64_t step) const { return dir_ + "/" + step_name("model", step) + ".bin"; }

std::string CheckpointDir::state_path(uint64_t step, uint32_t rank) const {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "_%05u.bin", rank);
  return dir_ + "/" + step_name("state", step) + buf;
}

std::string CheckpointDir::done_path(uint64_t step) const { return dir_ + "/" + step_name("DONE", step); }
std::string CheckpointDir::milestone_path(uint64_t step) const {
  return dir_ + "/" + step_name("MILESTONE", step);
}
bool CheckpointDir::is_milestone(uint64_t step) const { return file_exists(milestone_path(step)); }

void CheckpointDir::mark_milestone(uint64_t step, int every) const {
  AtomicOutputFile out(milestone_path(step));
  const std::string text = "milestone checkpoint step " + std::to_string(step) + " (--milestone-every " +
                           std::to_string(every) + "): never pruned\n";
  out.write(text.data(), text.size());
  out.commit();
}

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

namespace {

// The files a checkpoint of `world` ranks consists of, in marker order.
std::vector<std::string> checkpoint_file_names(const CheckpointDir& ck, uint64_t step, uint32_t world) {
  std::vector<std::string> names{base_name(ck.model_path(step))};
  for (uint32_t r = 0; r < world; r++) names.push_back(base_name(ck.state_path(step, r)));
  return names;
}

// Marker text (docs/formats.md): the old first line, so older readers still
// parse it, then "file NAME size=N xxh64=H" per file, then "end xxh64=H" over
// everything before that line, so a damaged marker is recognised as such.
// Errors start with `label` (the marker's path or name).
CheckpointMarker parse_marker(const std::string& text, uint64_t step, const std::string& label) {
  auto malformed = [&](const std::string& why) {
    return std::runtime_error(label + ": malformed completion marker (" + why + ")");
  };
  // The marker's own checksum first, so any damaged byte reads as "corrupt".
  const size_t end_nl = text.rfind("\nend xxh64=");
  if (end_nl != std::string::npos) {
    uint64_t stored = 0;
    if (text.size() != end_nl + 28 || text.back() != '\n' || !parse_hex64(text.substr(end_nl + 11, 16), &stored))
      throw malformed("bad end line");
    const uint64_t actual = xxh64(text.data(), end_nl + 1);
    if (stored != actual)
      throw std::runtime_error(label + " is corrupt (its own checksum does not match: expected " + hex64(stored) +
                               ", got " + hex64(actual) + ")");
  }
  CheckpointMarker mk;
  unsigned long long s = 0;
  unsigned w = 0, z = 0;
  if (std::sscanf(text.c_str(), "step=%llu world=%u zero_stage=%u", &s, &w, &z) != 3 || s != step || w == 0)
    throw malformed("first line");
  mk.step = s;
  mk.world = w;
  mk.zero_stage = z;
  const size_t first_end = text.find('\n');
  if (first_end == std::string::npos || first_end + 1 == text.size()) return mk;  // no checksums: older version
  if (end_nl == std::string::npos) throw malformed("no end line");
  std::istringstream lines(text.substr(first_end + 1, end_nl - first_end));
  for (std::string line; std::getline(lines, line);) {
    char name[256], hex[17];
    unsigned long long size = 0;
    FileDigest d;
    if (std::sscanf(line.c_str(), "file %255s size=%llu xxh64=%16s", name, &size, hex) != 3 ||
        !parse_hex64(hex, &d.xxh64))
      throw malformed("line '" + line + "'");
    d.name = name;
    d.size = size;
    mk.files.push_back(d);
  }
  if (mk.files.empty()) throw malformed("an end line but no files");
  return mk;
}

// Parses the marker of `step` and checks it lists exactly the checkpoint's files.
CheckpointMarker load_marker(const CheckpointDir& ck, uint64_t step, const std::string& label) {
  CheckpointMarker mk = parse_marker(read_text_file(ck.done_path(step)), step, label);
  if (mk.files.empty()) return mk;
  const std::vector<std::string> expected = checkpoint_file_names(ck, step, mk.world);
  bool same = mk.files.size() == expected.size();
  for (size_t i = 0; same && i < expected.size(); i++) same = mk.files[i].name == expected[i];
  if (!same)
    throw std::runtime_error(label + ": malformed completion marker (does not list the model file and " +
                             std::to_string(mk.world) + " state file(s))");
  return mk;
}

}  // namespace

CheckpointMarker CheckpointDir::read_marker(uint64_t step) const { return load_marker(*this, step, done_path(step)); }

void CheckpointDir::read_marker(uint64_t step, uint32_t* world, uint32_t* zero_stage) const {
  const CheckpointMarker mk = read_marker(step);
  *world = mk.world;
  *zero_stage = mk.zero_stage;
}

void CheckpointDir::write_marker(uint64_t step, uint32_t world, uint32_t zero_stage,
                                 const std::vector<FileDigest>& files) const {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "step=%" PRIu64 " world=%u zero_stage=%u\n", step, world, zero_stage);
  std::string text = buf;
  if (!files.empty()) {
    for (const FileDigest& d : files)
      text += "file " + d.name + " size=" + std::to_string(d.size) + " xxh64=" + hex64(d.xxh64) + "\n";
    text += "end xxh64=" + hex64(xxh64(text.data(), text.size())) + "\n";
  }
  write_text_file_atomic(done_path(step), text);
}

// Rank 0 needs every rank's state file digest. The ranks send them through the
// communicator (16 bytes each) instead of rank 0 re-reading the files: with
// ZeRO-0 every rank writes a full copy of the optimizer state, and in a
// multi-node run rank 0 would read world x that over the shared filesystem at
// every checkpoint. Each rank hashed its file while writing it. Rank 0 hashes
// the model file by re-reading it (just written: from its page cache), since
// model/model_file.h writes it. Sizes and hashes travel as int32 pairs, which
// an all-gather copies bit for bit.
void CheckpointDir::complete_checkpoint(Communicator& comm, uint64_t step, uint32_t zero_stage,
                                        const FileDigest& my_state) const {
  const int world = comm.world();
  uint64_t mine[2] = {my_state.size, my_state.xxh64};
  std::vector<uint64_t> all(2 * static_cast<size_t>(world));
  comm.all_gather(mine, all.data(), 4, DataType::kInt32);
  if (comm.rank() != 0) return;
  std::vector<FileDigest> files{digest_file(model_path(step))};
  for (int r = 0; r < world; r++)
    files.push_back(FileDigest{base_name(state_path(step, r)), all[2 * r], all[2 * r + 1]});
  write_marker(step, static_cast<uint32_t>(world), zero_stage, files);
}

std::string CheckpointDir::verify(uint64_t step, std::string* note) const {
  const std::string marker_name = base_name(done_path(step));
  CheckpointMarker mk;
  try {
    mk = load_marker(*this, step, marker_name);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    return what.rfind(dir_ + "/", 0) == 0 ? what.substr(dir_.size() + 1) : what;
  }
  if (mk.files.empty()) {  // older marker: at least every file must be there
    if (note) *note = "note: " + marker_name + " predates checksums; checkpoint step " + std::to_string(step) +
                      " is not verified";
    for (const std::string& name : checkpoint_file_names(*this, step, mk.world))
      if (!file_exists(dir_ + "/" + name)) return name + " is missing";
    return "";
  }
  for (const FileDigest& want : mk.files) {
    const std::string path = dir_ + "/" + want.name;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return want.name + " is missing";
    if (static_cast<uint64_t>(st.st_size) != want.size)
      return want.name + " has " + std::to_string(st.st_size) + " bytes, expected " + std::to_string(want.size) +
             " (truncated or overwritten)";
    uint64_t size = 0, got = 0;
    try {
      got = xxh64_file(path, &size);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    if (got != want.xxh64)
      return want.name + " checksum mismatch (expected xxh64 " + hex64(want.xxh64) + ", got " + hex64(got) + ")";
  }
  return "";
}

uint64_t CheckpointDir::pick_resume_step(bool fallback, const Notify& note) const {
  const std::vector<uint64_t> steps = complete_steps();
  const uint64_t newest = steps.back();
  std::string old_note;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string problem = verify(newest, &old_note);
  if (problem.empty()) {
    char secs[32];
    std::snprintf(secs, sizeof(secs), "%.2f s",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (note)
      note(old_note.empty() ? "checkpoint step " + std::to_string(newest) + ": checksums verified (" + secs + ")"
                            : old_note);
    return newest;
  }
  // The newest older checkpoint that verifies; the ones skipped are corrupt too.
  std::vector<uint64_t> failed{newest};
  int64_t good = -1;
  for (size_t i = steps.size() - 1; i-- > 0;) {
    if (verify(steps[i]).empty()) {
      good = static_cast<int64_t>(steps[i]);
      break;
    }
    failed.push_back(steps[i]);
  }
  const std::string head = "checkpoint step " + std::to_string(newest) + " in " + dir_ + " is corrupt: " + problem;
  if (good < 0)
    throw std::runtime_error(head + "; no older complete checkpoint verifies either (start over in another "
                             "--output-dir, or without --resume)");
  const std::string older = "the previous complete checkpoint that verifies is step " + std::to_string(good);
  if (!fallback) throw std::runtime_error(head + "; " + older + ": rerun with --resume-fallback to resume from it");
  std::string renamed;
  for (uint64_t step : failed) {
    std::rename(done_path(step).c_str(), (done_path(step) + ".corrupt").c_str());
    renamed += (renamed.empty() ? "" : ", ") + base_name(done_path(step)) + ".corrupt";
  }
  if (note)
    note("WARNING: " + head + "; --resume-fallback: resuming from step " + std::to_string(good) + " instead (" +
         std::to_string(newest - good) + " step(s) are trained again); marker(s) renamed to " + renamed);
  return static_cast<uint64_t>(good);
}

int64_t CheckpointDir::select_resume_step(Communicator& comm, bool fallback, const Notify& note) const {
  // Rank 0 alone reads and hashes (the files are shared); a refusal throws on
  // rank 0, whose error exit aborts the ranks waiting in the broadcast.
  int64_t step = -1;
  if (comm.rank() == 0 && !complete_steps().empty()) step = static_cast<int64_t>(pick_resume_step(fallback, note));
  comm.broadcast(&step, sizeof(step), 0);
  return step;
}

void CheckpointDir::prune(int keep, uint64_t written, int64_t protect) const {
  std::vector<uint64_t> done = complete_steps();
  if (done.empty()) return;
  const uint64_t newest = done.back();
  std::vector<uint64_t> remove_steps;
  if (keep > 0 && done.size() > static_cast<size_t>(keep))
    for (auto it = done.begin(); it != done.end() - keep; ++it)
      if (*it != written && static_cast<int64_t>(*it) != protect && !is_milestone(*it)) remove_steps.push_back(*it);
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
    const bool marker_tmp = name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0 &&
                            std::sscanf(name.c_str(), "DONE_%" SCNu64, &step) == 1;  // a marker write cut short
    if (!marker_tmp && std::sscanf(name.c_str(), "model_%" SCNu64, &step) != 1 &&
        std::sscanf(name.c_str(), "state_%" SCNu64, &step) != 1)
      continue;
    const bool complete = std::binary_search(done.begin(), done.end(), step);
    const bool doomed = std::find(remove_steps.begin(), remove_steps.end(), step) != remove_steps.end();
    // A milestone's files stay even when its marker is gone (abandoned, found corrupt).
    if (doomed || (!complete && step < newest && !is_milestone(step))) std::remove((dir_ + "/" + name).c_str());
  }
}

std::vector<uint64_t> CheckpointDir::remove_all() const {
  const std::vector<uint64_t> done = complete_steps();
  for (uint64_t step : done) std::remove(done_path(step).c_str());  // markers first
  DIR* d = opendir(dir_.c_str());
  std::vector<std::string> names;
  if (d) {
    while (dirent* e = readdir(d)) names.push_back(e->d_name);
    closedir(d);
  }
  for (const std::string& name : names) {
    uint64_t step;
    if (std::sscanf(name.c_str(), "DONE_%" SCNu64, &step) == 1 || std::sscanf(name.c_str(), "model_%" SCNu64, &step) == 1 ||
        std::sscanf(name.c_str(), "state_%" SCNu64, &step) == 1 ||
        std::sscanf(name.c_str(), "MILESTONE_%" SCNu64, &step) == 1 || name == "model.bin")
      std::remove((dir_ + "/" + name).c_str());
  }
  return done;
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

// ---- the output directory lock ---------------------------------------------------

namespace {

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

std::string utc_time(int64_t t) {
  const std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string read_fd_text(int fd) {
  std::string text;
  char buf[512];
  for (off_t off = 0;;) {
    const ssize_t n = pread(fd, buf, sizeof(buf), off);
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    off += n;
  }
  return text;
}

std::string describe_holder(const LockHolder& h) {
  std::string s = "PID " + std::to_string(h.pid) + " on host " + h.host + " (started " + utc_time(h.started) +
                  ", heartbeat " + std::to_string(std::max<int64_t>(0, unix_now() - h.heartbeat)) + " s ago";
  if (!h.slurm_job.empty()) s += ", Slurm job " + h.slurm_job + " restart " + h.slurm_restart;
  return s + ")";
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::runtime_error in_use_error(const std::string& lock_path, const std::string& holder) {
  const std::string dir = lock_path.substr(0, lock_path.rfind('/'));
  return std::runtime_error("--output-dir " + dir + " is in use by " + holder +
                            ": a duplicated or requeued job? If that process is gone, remove " + lock_path);
}

// Filesystems without flock answer these instead of granting or refusing it.
bool flock_unsupported(int err) { return err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS || err == EINVAL; }

}  // namespace

std::string format_lock(const LockHolder& h) {
  std::string s = "host=" + h.host + "\npid=" + std::to_string(h.pid) + "\nstarted=" + std::to_string(h.started) +
                  "\nheartbeat=" + std::to_string(h.heartbeat) + "\n";
  if (!h.slurm_job.empty()) s += "slurm_job=" + h.slurm_job + "\nslurm_restart=" + h.slurm_restart + "\n";
  return s;
}

bool parse_lock(const std::string& text, LockHolder* h) {
  LockHolder out;
  bool host = false, pid = false, beat = false;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) return false;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    char* end = nullptr;
    const long long num = std::strtoll(value.c_str(), &end, 10);
    const bool is_num = !value.empty() && *end == '\0';
    if (key == "host") host = !(out.host = value).empty();
    else if (key == "pid") pid = is_num && (out.pid = num) > 0;
    else if (key == "started" && is_num) out.started = num;
    else if (key == "heartbeat") beat = is_num && ((out.heartbeat = num), true);
    else if (key == "slurm_job") out.slurm_job = value;
    else if (key == "slurm_restart") out.slurm_restart = value;
  }
  if (!host || !pid || !beat) return false;
  *h = out;
  return true;
}

LockHolder this_process_lock_holder() {
  LockHolder me;
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "unknown");
  me.host = host;
  me.pid = getpid();
  me.started = me.heartbeat = unix_now();
  me.slurm_job = env_or("SLURM_JOB_ID", "");
  // Slurm sets SLURM_RESTART_COUNT only once a job has been requeued.
  if (!me.slurm_job.empty()) me.slurm_restart = env_or("SLURM_RESTART_COUNT", "0");
  return me;
}

std::string stale_lock_reason(const LockHolder& holder, const LockHolder& me, bool granted, bool no_flock,
                              int64_t now) {
  if (!holder.slurm_job.empty() && holder.slurm_job == me.slurm_job && holder.slurm_restart != me.slurm_restart)
    return "it is an earlier run of this Slurm job " + me.slurm_job + " (restart " + holder.slurm_restart +
           "; Slurm requeues a job only after it ended)";
  if (holder.host == me.host) {
    // One kernel: it drops a process's flock when the process dies, whatever
    // its PID namespace. Without flock, the PID is all there is to go by.
    if (granted) return "no process on this host holds it any more";
    if (no_flock && kill(static_cast<pid_t>(holder.pid), 0) != 0 && errno == ESRCH)
      return "PID " + std::to_string(holder.pid) + " no longer exists";
    return "";
  }
  if (now - holder.heartbeat > kLockStaleSeconds)
    return "host " + holder.host + " has not renewed it for " + std::to_string(now - holder.heartbeat) +
           " s (stale after " + std::to_string(kLockStaleSeconds) + " s)";
  return "";
}

// Renews the heartbeat every few seconds-to-minutes from a thread, so that
// liveness never depends on how often the run checkpoints.
struct OutputDirLock::Heartbeat {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread thread;
};

OutputDirLock::OutputDirLock(const std::string& dir, const Notify& note, int heartbeat_seconds)
    : path_(dir + "/.lock"), me_(this_process_lock_holder()) {
  // A holder that exits unlinks the file; one that we opened just before that
  // is retried (see try_acquire).
  for (int attempt = 0; attempt < 10 && fd_ < 0; attempt++) try_acquire(note);
  if (fd_ < 0) throw std::runtime_error(path_ + ": could not take the lock (the file keeps being replaced)");
  try {
    write_contents();
  } catch (...) {
    ::close(fd_);  // no destructor runs for a throwing constructor
    throw;
  }
  if (heartbeat_seconds <= 0) return;
  heartbeat_ = std::make_unique<Heartbeat>();
  heartbeat_->thread = std::thread([this, heartbeat_seconds] {
    std::unique_lock<std::mutex> lk(heartbeat_->mu);
    while (!heartbeat_->cv.wait_for(lk, std::chrono::seconds(heartbeat_seconds), [this] { return heartbeat_->stop; })) {
      me_.heartbeat = unix_now();
      try {
        write_contents();
      } catch (const std::exception&) {
        // A missed heartbeat must not stop training; the next one retries.
      }
    }
  });
}

OutputDirLock::~OutputDirLock() {
  if (heartbeat_) {
    {
      std::lock_guard<std::mutex> lk(heartbeat_->mu);
      heartbeat_->stop = true;
    }
    heartbeat_->cv.notify_all();
    heartbeat_->thread.join();
  }
  // Remove the file only while it is still ours (not taken over as stale).
  struct stat mine, now;
  if (fstat(fd_, &mine) == 0 && ::stat(path_.c_str(), &now) == 0 && mine.st_ino == now.st_ino &&
      mine.st_dev == now.st_dev)
    ::unlink(path_.c_str());
  ::close(fd_);  // releases the flock
}

bool OutputDirLock::try_acquire(const Notify& note) {
  const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(path_ + ": cannot open the lock file (" + std::strerror(errno) + ")");
  bool granted = false, no_flock = false;
  if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
    granted = true;
  } else if (flock_unsupported(errno)) {
    no_flock = true;
  } else {
    const int err = errno;
    LockHolder holder;
    const bool known = parse_lock(read_fd_text(fd), &holder);
    ::close(fd);
    if (err != EWOULDBLOCK) throw std::runtime_error(path_ + ": flock failed (" + std::strerror(err) + ")");
    throw in_use_error(path_, known ? describe_holder(holder) : "another process, starting up");
  }
  struct stat opened, named;
  if (fstat(fd, &opened) != 0 || ::stat(path_.c_str(), &named) != 0 || opened.st_ino != named.st_ino ||
      opened.st_dev != named.st_dev) {
    ::close(fd);  // the previous holder unlinked it meanwhile: open the new one
    return false;
  }
  LockHolder holder;
  const std::string text = read_fd_text(fd);
  if (parse_lock(text, &holder)) {
    const std::string reason = stale_lock_reason(holder, me_, granted, no_flock, unix_now());
    if (reason.empty()) {
      ::close(fd);
      throw in_use_error(path_, describe_holder(holder));
    }
    if (note) note("WARNING: taking over the stale lock " + path_ + " of " + describe_holder(holder) + ": " + reason);
  } else if (!text.empty() && note) {
    note("WARNING: " + path_ + " is not a lock file this program wrote; taking it over");
  }
  if (no_flock && note) note("note: " + path_ + ": the filesystem has no flock; the lock relies on its contents");
  fd_ = fd;
  return true;
}

// pwrite + ftruncate (never an empty file in between) + fsync, so readers on
// other nodes see the heartbeat (NFS close-to-open consistency).
void OutputDirLock::write_contents() {
  const std::string text = format_lock(me_);
  if (pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()) ||
      ftruncate(fd_, static_cast<off_t>(text.size())) != 0 || fsync(fd_) != 0)
    throw std::runtime_error(path_ + ": cannot write the lock file (" + std::strerror(errno) + ")");
}

}  // namespace gpt2
