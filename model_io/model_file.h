// llm.c's model file: a 256 x int32 header, then every parameter tensor in
// ParamLayout order (fp32 for version 3, bf16 for version 5).
//   header[0] = 20240326 (magic)   header[1] = version
//   header[2] = max_seq_len        header[3] = vocab_size
//   header[4] = num_layers         header[5] = num_heads
//   header[6] = channels           header[7] = padded_vocab_size
#ifndef MODEL_IO_MODEL_FILE_H
#define MODEL_IO_MODEL_FILE_H

#include <string>
#include <vector>

#include "model/config.h"

namespace gpt2 {

constexpr int kModelMagic = 20240326;
constexpr int kModelVersionFp32 = 3;
constexpr int kModelVersionBf16 = 5;

struct ModelFile {
  GPT2Config config;
  int version = kModelVersionFp32;
  std::vector<float> params;  // always fp32 in memory (bf16 files are widened exactly)
};

// Validates magic, version, config and exact size; errors name the file. A
// directory holding config.json is read as a Hugging Face checkpoint instead
// (model_io/hf_checkpoint.h; version kModelVersionFp32).
ModelFile read_model_file(const std::string& path);
// Header only (still checks the size; for a Hugging Face directory, config.json
// and the safetensors headers).
GPT2Config read_model_config(const std::string& path);
// Atomic write (temp + fsync + rename). version 5 rounds to bf16 (nearest even).
void write_model_file(const std::string& path, const GPT2Config& cfg, const std::vector<float>& params,
                      int version = kModelVersionFp32);

class AtomicOutputFile;
// Writes n floats as fp32, or as bf16 (nearest even) in bounded chunks; the
// element writer of both write_model_file and write_hf_checkpoint.
void write_floats(AtomicOutputFile& out, const float* src, size_t n, bool bf16);

}  // namespace gpt2

#endif  // MODEL_IO_MODEL_FILE_H
