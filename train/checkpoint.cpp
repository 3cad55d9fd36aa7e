// Checkpoint directories: file names, completion markers (and their
// checksums), verification, resume selection, pruning and re-sharding of the
// moments; layout in train/checkpoint.h, marker format in docs/formats.md.
#include "train/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>

#include "distributed/comm.h"
#include "util/checked_io.h"
#include "util/checksum.h"

namespace gpt2 {

namespace {

std::string step_name(const char* prefix, uint64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s_%08" PRIu64, prefix, step);
  return buf;
}

// Every name in `dir` (none when it cannot be read: no checkpoints there).
std::vector<std::string> entries_of(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) names.push_back(e->d_name);
    closedir(d);
  }
  return names;
}

// The step of a checkpoint file's name: DONE_N, model_N.bin or state_N_R.bin,
// N and R digits only (at most 12: no overflow). false for any other name.
bool step_of_file_name(const std::string& name, uint64_t* step) {
  static const std::regex kName(R"(DONE_(\d{1,12})|model_(\d{1,12})\.bin|state_(\d{1,12})_\d{1,12}\.bin)");
  std::smatch m;
  if (!std::regex_match(name, m, kName)) return false;
  for (size_t i = 1; i < m.size(); i++)
    if (m[i].matched) *step = std::stoull(m[i].str());
  return true;
}

// `name` is PREFIX_<step>... (leftovers such as DONE_N.tmp too): its step.
bool step_of(const std::string& name, const char* prefix, uint64_t* step) {
  return std::sscanf(name.c_str(), (std::string(prefix) + "_%" SCNu64).c_str(), step) == 1;
}

}  // namespace

CheckpointDir::CheckpointDir(std::string dir, bool lock, const Notify& note) : dir_(std::move(dir)) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  if (lock) {
    make_directories(dir_);
    lock_ = std::make_unique<OutputDirLock>(dir_, note);
  }
}

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

bool CheckpointDir::writes(const std::string& name) {
  for (const char* prefix : {"model_", "state_", "DONE_", "MILESTONE_"})
    if (name.rfind(prefix, 0) == 0) return true;
  return name == "model.bin" || name == ".lock";
}

void CheckpointDir::mark_milestone(uint64_t step, int every) const {
  write_text_file_atomic(milestone_path(step), "milestone checkpoint step " + std::to_string(step) +
                                                   " (--milestone-every " + std::to_string(every) +
                                                   "): never pruned\n");
}

std::vector<uint64_t> CheckpointDir::complete_steps() const {
  std::vector<uint64_t> steps;
  for (const std::string& name : entries_of(dir_)) {
    uint64_t step;
    if (name.rfind("DONE_", 0) == 0 && step_of_file_name(name, &step)) steps.push_back(step);
  }
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
  if (std::sscanf(text.c_str(), "step=%" SCNu64 " world=%u zero_stage=%u", &mk.step, &mk.world, &mk.zero_stage) != 3 ||
      mk.step != step || mk.world == 0)
    throw malformed("first line");
  const size_t first_end = text.find('\n');
  if (first_end == std::string::npos || first_end + 1 == text.size()) return mk;  // no checksums: older version
  if (end_nl == std::string::npos) throw malformed("no end line");
  std::istringstream lines(text.substr(first_end + 1, end_nl - first_end));
  for (std::string line; std::getline(lines, line);) {
    char name[256], hex[17];
    FileDigest d;
    if (std::sscanf(line.c_str(), "file %255s size=%" SCNu64 " xxh64=%16s", name, &d.size, hex) != 3 ||
        !parse_hex64(hex, &d.xxh64))
      throw malformed("line '" + line + "'");
    d.name = name;
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
  if (!std::equal(mk.files.begin(), mk.files.end(), expected.begin(), expected.end(),
                  [](const FileDigest& f, const std::string& name) { return f.name == name; }))
    throw std::runtime_error(label + ": malformed completion marker (does not list the model file and " +
                             std::to_string(mk.world) + " state file(s))");
  return mk;
}

}  // namespace

CheckpointMarker CheckpointDir::read_marker(uint64_t step) const { return load_marker(*this, step, done_path(step)); }

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
// model_io/model_file.h writes it. Sizes and hashes travel as int32 pairs, which
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
  const std::vector<std::string> names = entries_of(dir_);
  // Markers of doomed checkpoints go first, so an interrupted prune never
  // leaves a marker vouching for files that are gone.
  for (uint64_t step : remove_steps) std::remove(done_path(step).c_str());
  for (const std::string& name : names) {
    uint64_t step;
    const bool marker_tmp = name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0 &&
                            step_of(name, "DONE", &step);  // a marker write cut short
    if (!marker_tmp && !step_of(name, "model", &step) && !step_of(name, "state", &step)) continue;
    const bool complete = std::binary_search(done.begin(), done.end(), step);
    const bool doomed = std::find(remove_steps.begin(), remove_steps.end(), step) != remove_steps.end();
    // A milestone's files stay even when its marker is gone (abandoned, found corrupt).
    if (doomed || (!complete && step < newest && !is_milestone(step))) std::remove((dir_ + "/" + name).c_str());
  }
}

std::vector<uint64_t> CheckpointDir::remove_all() const {
  const std::vector<uint64_t> done = complete_steps();
  for (uint64_t step : done) std::remove(done_path(step).c_str());  // markers first
  for (const std::string& name : entries_of(dir_)) {
    uint64_t step;
    if (step_of(name, "DONE", &step) || step_of(name, "model", &step) || step_of(name, "state", &step) ||
        step_of(name, "MILESTONE", &step) || name == "model.bin")
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
  if (next != end)
    throw std::runtime_error(ckpt.dir() + ": checkpoint step " + std::to_string(step) +
                             " does not cover parameters [" + std::to_string(begin) + ", " + std::to_string(end) +
                             ") (missing or overlapping state files)");
}

// ---------------------------------------------------------------- which checkpoint --resume continues

namespace {

// Rank 0's check of the named checkpoint: returns its step or throws.
uint64_t check_named(const CheckpointDir& dir, const CheckpointRef& ref, const Notify& note) {
  const std::vector<uint64_t> steps = dir.complete_steps();
  if (ref.step < 0 && steps.empty())
    throw std::runtime_error("--resume-from " + dir.dir() + ": no complete checkpoint in the directory");
  const uint64_t step = ref.step < 0 ? steps.back() : static_cast<uint64_t>(ref.step);
  const std::string what = "checkpoint step " + std::to_string(step) + " in " + dir.dir();
  const std::string marker = dir.done_path(step);
  if (!file_exists(marker)) {
    if (file_exists(marker + ".corrupt"))
      throw std::runtime_error(what + " is corrupt: --resume-fallback found it so and renamed its marker to " +
                               marker + ".corrupt");
    if (file_exists(marker + ".abandoned"))
      throw std::runtime_error(what + " was abandoned by a resume from an older checkpoint (marker " + marker +
                               ".abandoned; rename it back to DONE_N to resume it after all)");
    if (file_exists(dir.model_path(step)) || file_exists(dir.state_path(step, 0)))
      throw std::runtime_error(what + " is incomplete: it has no completion marker " + marker +
                               " (its writing was interrupted)");
    throw std::runtime_error(what + " does not exist (no " + marker + ")");
  }
  std::string old_note;
  const std::string problem = dir.verify(step, &old_note);
  if (!problem.empty()) throw std::runtime_error(what + " is corrupt: " + problem);
  if (note) note(old_note.empty() ? what + ": checksums verified" : old_note);
  return step;
}

}  // namespace

CheckpointRef parse_checkpoint_ref(const std::string& path) {
  CheckpointRef ref;
  if (is_directory(path)) {
    ref.dir = path;
    return ref;
  }
  const size_t slash = path.rfind('/');
  const std::string name = base_name(path);
  ref.dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  uint64_t step = 0;
  if (!step_of_file_name(name, &step) || step > static_cast<uint64_t>(INT32_MAX))
    throw std::runtime_error("--resume-from " + path + ": not a checkpoint (give a checkpoint directory, "
                             "its completion marker DONE_N or one of its files model_N.bin, state_N_R.bin)");
  ref.step = static_cast<int64_t>(step);
  return ref;
}

uint64_t select_named_checkpoint(Communicator& comm, const CheckpointDir& dir, const CheckpointRef& ref,
                                 const Notify& note) {
  // Rank 0 alone reads and hashes; its error exit aborts the ranks waiting in the broadcast.
  uint64_t step = 0;
  if (comm.rank() == 0) step = check_named(dir, ref, note);
  comm.broadcast(&step, sizeof(step), 0);
  return step;
}

std::vector<uint64_t> abandon_checkpoints_after(const CheckpointDir& dir, uint64_t step) {
  std::vector<uint64_t> abandoned;
  for (uint64_t s : dir.complete_steps()) {
    if (s <= step) continue;
    const std::string marker = dir.done_path(s);
    if (std::rename(marker.c_str(), (marker + ".abandoned").c_str()) != 0)
      throw std::runtime_error("cannot rename " + marker + " to " + marker + ".abandoned: " + std::strerror(errno));
    abandoned.push_back(s);
  }
  return abandoned;
}

bool same_directory(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

}  // namespace gpt2
