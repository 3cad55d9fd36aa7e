#include "train/resume_point.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <sys/stat.h>

#include "distributed/comm.h"
#include "util/checked_io.h"

namespace gpt2 {

namespace {

// Reads digits at *pos (at least one) into *value and moves past them.
bool take_digits(const std::string& s, size_t* pos, uint64_t* value) {
  const size_t begin = *pos;
  *value = 0;
  for (; *pos < s.size() && s[*pos] >= '0' && s[*pos] <= '9' && *pos - begin < 12; ++*pos)
    *value = *value * 10 + static_cast<uint64_t>(s[*pos] - '0');
  return *pos > begin && (*pos == s.size() || s[*pos] < '0' || s[*pos] > '9');
}

// The step of a checkpoint file's name: DONE_N, model_N.bin or state_N_R.bin
// (N and R digits only). false for any other name.
bool step_of_file_name(const std::string& name, uint64_t* step) {
  uint64_t rank = 0;
  size_t pos = 0;
  if (name.rfind("DONE_", 0) == 0) {
    pos = 5;
    return take_digits(name, &pos, step) && pos == name.size();
  }
  if (name.rfind("model_", 0) == 0) {
    pos = 6;
    return take_digits(name, &pos, step) && name.compare(pos, std::string::npos, ".bin") == 0;
  }
  if (name.rfind("state_", 0) != 0) return false;
  pos = 6;
  if (!take_digits(name, &pos, step) || name.compare(pos, 1, "_") != 0) return false;
  pos++;
  return take_digits(name, &pos, &rank) && name.compare(pos, std::string::npos, ".bin") == 0;
}

std::string describe(const CheckpointDir& dir, uint64_t step) {
  return "checkpoint step " + std::to_string(step) + " in " + dir.dir();
}

// Rank 0's check of the named checkpoint: returns its step or throws.
uint64_t check_named(const CheckpointDir& dir, const CheckpointRef& ref, const Notify& note) {
  const std::vector<uint64_t> steps = dir.complete_steps();
  if (ref.step < 0 && steps.empty())
    throw std::runtime_error("--resume-from " + dir.dir() + ": no complete checkpoint in the directory");
  const uint64_t step = ref.step < 0 ? steps.back() : static_cast<uint64_t>(ref.step);
  const std::string what = describe(dir, step);
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
  if (path.empty()) throw std::runtime_error("--resume-from: empty path");
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
