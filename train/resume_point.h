// Which checkpoint --resume continues: the newest complete one in --output-dir
// (plain --resume), or the one --resume-from PATH / --resume PATH names (HF's
// resume_from_checkpoint=PATH): a checkpoint directory (its newest complete
// checkpoint) or one checkpoint of it, by its completion marker DONE_N or one
// of its files (model_N.bin, state_N_R.bin).
#ifndef TRAIN_RESUME_POINT_H
#define TRAIN_RESUME_POINT_H

#include <cstdint>
#include <string>
#include <vector>

#include "train/checkpoint.h"

namespace gpt2 {

class Communicator;

struct CheckpointRef {
  std::string dir;    // the checkpoint directory
  int64_t step = -1;  // -1: its newest complete checkpoint
};

// Parses PATH (no file is read; a directory is recognised with stat). A name
// that is neither a directory nor a checkpoint file's is an error naming it.
CheckpointRef parse_checkpoint_ref(const std::string& path);

// Collective: rank 0 checks the checkpoint `ref` names in `dir` and every rank
// gets its step. It must be complete (its marker exists) and verify against
// its marker's checksums; else an error naming the checkpoint and what is wrong
// (incomplete: no marker; marked corrupt; a file's checksum, ...). A directory
// without any complete checkpoint is an error too (plain --resume starts fresh
// there instead).
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

#endif  // TRAIN_RESUME_POINT_H
