// Checkpoints: the model in llm.c format plus one state file per rank, made
// visible by a completion marker written last (after every rank's files are
// durable), so a crash never leaves a checkpoint that looks complete.
//
//   DIR/model_00000100.bin          llm.c model file (rank 0)
//   DIR/state_00000100_00000.bin    rank 0's optimizer shard, loader position, RNG
//   DIR/DONE_00000100               the marker: "step world zero_stage", then the
//                                   size and XXH64 of every file above (docs/formats.md)
//   DIR/model.bin                   the final model, always written at the end
//   DIR/.lock                       held by rank 0 for the whole run (OutputDirLock)
//
// --resume verifies the files of the checkpoint it picks against its marker,
// so a corrupt file is refused by name instead of being trained on.
#ifndef TRAIN_CHECKPOINT_H
#define TRAIN_CHECKPOINT_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "train/output_lock.h"
#include "train/state_file.h"

namespace gpt2 {

class Communicator;

// A parsed completion marker. `files` is empty for markers written before
// checksums existed (they still load, unverified).
struct CheckpointMarker {
  uint64_t step = 0;
  uint32_t world = 0, zero_stage = 0;
  std::vector<FileDigest> files;
};

class CheckpointDir {
 public:
  // lock = true (rank 0 of a training run): creates DIR if needed and holds
  // its exclusive OutputDirLock for this object's lifetime; a second run on
  // DIR throws naming the holder. `note` gets the stale-lock warning.
  explicit CheckpointDir(std::string dir, bool lock = false, const Notify& note = {});
  CheckpointDir(const CheckpointDir&) = delete;
  CheckpointDir& operator=(const CheckpointDir&) = delete;
  const std::string& dir() const { return dir_; }
  std::string model_path(uint64_t step) const;
  std::string state_path(uint64_t step, uint32_t rank) const;
  std::string done_path(uint64_t step) const;
  // DIR/MILESTONE_N: the checkpoint of step N is a milestone (--milestone-every),
  // which prune never deletes, whatever the flags of the run that prunes.
  std::string milestone_path(uint64_t step) const;
  bool is_milestone(uint64_t step) const;
  // Rank 0, after the checkpoint's marker: tags it (a crash before leaves a plain checkpoint).
  void mark_milestone(uint64_t step, int every) const;
  std::string final_model_path() const { return dir_ + "/model.bin"; }
  // `name` is one of the files above, a leftover of them or the lock: a file
  // in DIR that no other output may take.
  static bool writes(const std::string& name);

  // Steps whose completion marker exists, ascending.
  std::vector<uint64_t> complete_steps() const;
  // The marker's contents; throws naming the marker when missing, malformed or
  // corrupt (a marker with checksums carries one of its own text).
  CheckpointMarker read_marker(uint64_t step) const;
  // `files`: the checkpoint's model file then state files of ranks 0..world-1
  // (empty writes an old-style marker without checksums).
  void write_marker(uint64_t step, uint32_t world, uint32_t zero_stage,
                    const std::vector<FileDigest>& files = {}) const;

  // Collective, after every rank wrote its state file (digest `my_state`) and
  // rank 0 the model file: gathers the digests and rank 0 writes the marker.
  // The gather doubles as the barrier "every rank's files are durable".
  void complete_checkpoint(Communicator& comm, uint64_t step, uint32_t zero_stage,
                           const FileDigest& my_state) const;

  // Re-hashes the files the marker of `step` names: "" when all match, else
  // what is wrong, naming the file ("model_00000100.bin checksum mismatch
  // (expected xxh64 ..., got ...)", "... is missing", "DONE_00000100 is corrupt
  // ..."). An old marker without checksums passes if its files exist (*note says so).
  std::string verify(uint64_t step, std::string* note = nullptr) const;

  // Collective: rank 0 picks the newest complete checkpoint, verified; every rank
  // gets its step (-1: none, start fresh). If it fails verification, throws
  // naming the file and the newest older one that verifies - or, with
  // `fallback`, warns loudly through `note`, renames the failed newer markers to
  // DONE_N.corrupt (neither resumed nor counted by prune) and returns that step.
  int64_t select_resume_step(Communicator& comm, bool fallback, const Notify& note) const;

  // Keeps the newest `keep` complete checkpoints (0 = all) and removes files of
  // incomplete checkpoints older than the newest complete one; never the
  // checkpoint of step `written` (the one just written), that of step
  // `protect` (--keep-best's best one; -1: none) nor a milestone's files.
  void prune(int keep, uint64_t written, int64_t protect = -1) const;
  // Removes every checkpoint (markers first, then model_N/state_N files,
  // milestone tags, leftovers, DIR/model.bin): a new run replacing the old one.
  // Returns the complete steps it removed.
  std::vector<uint64_t> remove_all() const;

 private:
  uint64_t pick_resume_step(bool fallback, const Notify& note) const;
  std::string dir_;
  std::unique_ptr<OutputDirLock> lock_;
};

// Gathers the AdamW moments of [begin, end) from the state files of a
// checkpoint written by `old_world` ranks (any ZeRO stage), so a run can resume
// at another world size or stage; master weights too when every state file has
// them (else `master` ends empty).
void load_resharded_moments(const CheckpointDir& ckpt, uint64_t step, uint32_t old_world, uint64_t begin,
                            uint64_t end, std::vector<float>* m, std::vector<float>* v, std::vector<float>* master);

// ---------------------------------------------------------------- which checkpoint --resume continues

// The newest complete checkpoint in --output-dir (plain --resume), or the one
// --resume-from PATH / --resume PATH names (HF's resume_from_checkpoint=PATH):
// a checkpoint directory (its newest complete checkpoint) or one checkpoint in
// it, by its marker DONE_N or one of its files (model_N.bin, state_N_R.bin).

struct CheckpointRef {
  std::string dir;    // the checkpoint directory
  int64_t step = -1;  // -1: its newest complete checkpoint
};

// Parses PATH (no file is read; a directory is recognised with stat). A name
// that is neither a directory nor a checkpoint file's is an error naming it.
CheckpointRef parse_checkpoint_ref(const std::string& path);

// Collective: rank 0 checks the checkpoint `ref` names in `dir`, every rank gets
// its step. It must be complete and verify against its marker, else an error
// names it and what is wrong (no marker, marked corrupt, a file's checksum, ...);
// so does a directory without a complete checkpoint (plain --resume starts fresh).
uint64_t select_named_checkpoint(Communicator& comm, const CheckpointDir& dir, const CheckpointRef& ref,
                                 const Notify& note);

// Resuming an older checkpoint in its own directory abandons the later ones,
// another future of the run: their markers are renamed DONE_N.abandoned (the
// files stay until this run overwrites or prunes them), so that neither plain
// --resume nor --keep-checkpoints counts them. Returns the steps abandoned.
std::vector<uint64_t> abandon_checkpoints_after(const CheckpointDir& dir, uint64_t step);

// True when the two paths name the same existing directory.
bool same_directory(const std::string& a, const std::string& b);

}  // namespace gpt2

#endif  // TRAIN_CHECKPOINT_H
