// Hugging Face GPT-2 checkpoints (a GPT2LMHeadModel `save_pretrained` directory:
// config.json + model.safetensors, or sharded with model.safetensors.index.json)
// to and from the flat fp32 parameters (llm.c's order, ParamLayout); docs/formats.md.
//
// Reading mmaps the .safetensors files and converts tensor by tensor into the
// one fp32 vector, dropping each tensor's pages once converted, so a load
// never holds a second full copy of the weights.
#ifndef MODEL_IO_HF_CHECKPOINT_H
#define MODEL_IO_HF_CHECKPOINT_H

#include <string>
#include <vector>

#include "model/config.h"

namespace gpt2 {

// `path` is a directory holding config.json (read_model_file's and
// read_model_config's dispatch rule).
bool is_hf_checkpoint_dir(const std::string& path);

// `name` is a file write_hf_checkpoint writes (or a sharded export holds): the
// config, the weights, a shard index.
bool is_hf_checkpoint_file(const std::string& name);

// config.json -> GPT2Config (padded_vocab_size = vocab_size rounded up to 128),
// after checking every tensor's name, shape and dtype in the safetensors headers
// (no weights read). Unsupported architectures, options or tensors: errors naming the key.
GPT2Config read_hf_config(const std::string& dir);

// config.json's embd_pdrop, resid_pdrop and attn_pdrop: 0.1 (GPT2Config's
// default) where absent, as from_pretrained does; a value not a number in
// [0, 1) is an error naming the file and key. A rate the caller overrides
// (its field of `overridden` >= 0) is not read, so not judged: it is returned
// as given. (DropoutRates: model/gpt2.h.)
struct DropoutRates;
DropoutRates read_hf_dropout(const std::string& dir, const DropoutRates& overridden);
DropoutRates read_hf_dropout(const std::string& dir);  // every rate read

// Config plus ParamLayout::for_config(config).total floats; wte's padded
// vocabulary rows are zero; fp16 and bf16 tensors are widened exactly.
std::vector<float> read_hf_params(const std::string& dir, GPT2Config* config);

enum class HfDtype { kF32, kBF16 };

// config.json and model.safetensors into `dir` (created if needed), as save_pretrained
// writes them: HF names, Conv1D [in, out] weights, no padded vocabulary rows, lm_head
// left to the tie. kBF16 rounds to nearest even. Each file is written atomically.
void write_hf_checkpoint(const std::string& dir, const GPT2Config& cfg, const std::vector<float>& params,
                         HfDtype dtype = HfDtype::kF32);

}  // namespace gpt2

#endif  // MODEL_IO_HF_CHECKPOINT_H
