// Inputs are never outputs. Before any work, every path a run writes
// (--eval-json, --log-jsonl, --save-hf, --output-dir and the files it manages
// there) is compared with every file it reads (--model, --init-from and the
// files of its directory, the data shards, --eval-hellaswag, --prompt-file, the
// GPT-2 vocabulary), by device and inode after resolving links, so a link or a
// second name for the same file cannot slip through. A collision is a usage
// error (exit 2) naming both flags: a run never writes over what it reads.
// An input that is no regular file (a FIFO, a device) is refused the same way.
#ifndef TRAIN_PATH_GUARD_H
#define TRAIN_PATH_GUARD_H

#include "train/options.h"

namespace gpt2 {

// Throws UsageError naming the output, the input and their flags, or the
// input that is no regular file.
void check_outputs_spare_inputs(const TrainOptions& o);

}  // namespace gpt2

#endif  // TRAIN_PATH_GUARD_H
