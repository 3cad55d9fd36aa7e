// Hugging Face GPT-2 checkpoints: a directory as `save_pretrained` writes it
// for GPT2LMHeadModel (config.json + model.safetensors, or the sharded form
// with model.safetensors.index.json), read into and written from the
// project's flat fp32 parameter vector (llm.c's tensor order, ParamLayout).
//
// Reading maps the .safetensors files (mmap) and converts tensor by tensor
// straight into the one fp32 vector, dropping each tensor's mapped pages once
// it is converted, so a load never holds a second full copy of the weights.
// The mapping between the two layouts is in docs/formats.md.
#ifndef MODEL_HF_CHECKPOINT_H
#define MODEL_HF_CHECKPOINT_H

#include <string>
#include <vector>

#include "model/config.h"

namespace gpt2 {

// True when `path` is a directory holding config.json (the dispatch rule of
// read_model_file / read_model_config).
bool is_hf_checkpoint_dir(const std::string& path);

// config.json -> GPT2Config (padded_vocab_size = vocab_size rounded up to 128),
// after checking every tensor's name, shape and dtype in the safetensors
// headers (no weights are read). Unsupported architectures, options or tensors
// are errors naming the offending key.
GPT2Config read_hf_config(const std::string& dir);

// The dropout rates of config.json, GPT2Config's embd_pdrop, resid_pdrop and
// attn_pdrop: 0.1 (GPT2Config's default) where a key is absent, as
// from_pretrained does; a value that is not a number in [0, 1) is an error
// naming the file and the key. (DropoutRates is model/gpt2.h's.)
struct DropoutRates;
DropoutRates read_hf_dropout(const std::string& dir);

// The full load: config plus ParamLayout::for_config(config).total floats;
// the padded vocabulary rows of wte are zero. fp16 and bf16 tensors are
// widened exactly.
std::vector<float> read_hf_params(const std::string& dir, GPT2Config* config);

enum class HfDtype { kF32, kBF16 };

// Writes config.json and model.safetensors into `dir` (created if needed), the
// files save_pretrained writes for GPT2LMHeadModel: HF tensor names, Conv1D
// [in, out] weights, no padded vocabulary rows, lm_head left to the tie.
// kBF16 rounds to nearest even. Each file is written atomically.
void write_hf_checkpoint(const std::string& dir, const GPT2Config& cfg, const std::vector<float>& params,
                         HfDtype dtype = HfDtype::kF32);

}  // namespace gpt2

#endif  // MODEL_HF_CHECKPOINT_H
