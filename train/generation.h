// --generate: samples text from trained weights (rank 0; other ranks exit 0).
#ifndef TRAIN_GENERATION_H
#define TRAIN_GENERATION_H

#include <string>

#include "distributed/context.h"
#include "train/options.h"

namespace gpt2 {

// The prompt text: --prompt, or the bytes of --prompt-file exactly ("-":
// stdin; an unreadable file is an error naming it). Empty: no prompt.
std::string read_prompt(const TrainOptions& opts);

// The text printed for sample i of n (0-based): with n > 1 a header line
// "--- sample i+1/n ---" first; the text and a newline.
std::string format_sample(int i, int n, const std::string& text);

// --generate on this rank. Returns the exit code.
int run_generation(const TrainOptions& opts, const DistContext& dist);

}  // namespace gpt2

#endif  // TRAIN_GENERATION_H
