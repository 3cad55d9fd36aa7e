#include "model_io/model_file.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "model/gpt2.h"
#include "model_io/hf_checkpoint.h"
#include "util/bf16.h"
#include "util/checked_io.h"

namespace gpt2 {

namespace {

// Elements converted per chunk of a bf16 file: a bounded staging buffer, so a
// bf16 load or save never holds a second full-size copy.
constexpr size_t kBf16Chunk = size_t{1} << 20;

// The config fields of header[2..7], in that order.
constexpr int GPT2Config::*kHeaderFields[] = {&GPT2Config::max_seq_len, &GPT2Config::vocab_size,
                                              &GPT2Config::num_layers,  &GPT2Config::num_heads,
                                              &GPT2Config::channels,    &GPT2Config::padded_vocab_size};

// A directory without config.json is refused here (InputFile would only say "a directory").
bool is_hf_path(const std::string& path) {
  if (is_hf_checkpoint_dir(path)) return true;
  if (is_directory(path))
    throw std::runtime_error(path + ": a directory without config.json (expected an llm.c model file or a "
                             "Hugging Face GPT-2 directory: config.json + model.safetensors)");
  return false;
}

GPT2Config parse_header(InputFile& in, int* version) {
  int32_t header[256];
  in.read(header, sizeof(header), "model header");
  const std::string& path = in.path();
  if (header[0] != kModelMagic)
    throw std::runtime_error(path + ": bad magic " + std::to_string(header[0]) + " (expected " +
                             std::to_string(kModelMagic) + ", an llm.c model file)");
  if (header[1] != kModelVersionFp32 && header[1] != kModelVersionBf16)
    throw std::runtime_error(path + ": unsupported version " + std::to_string(header[1]) +
                             " (expected 3 = fp32 or 5 = bf16)");
  *version = header[1];
  GPT2Config c;
  for (size_t i = 0; i < std::size(kHeaderFields); i++) c.*kHeaderFields[i] = header[2 + i];
  // llm.c's oldest files have no padded vocab (0): it equals vocab_size there.
  if (c.padded_vocab_size == 0) c.padded_vocab_size = c.vocab_size;
  c.validate(path);
  const uint64_t elem = *version == kModelVersionFp32 ? 4 : 2;
  const uint64_t expected = sizeof(header) + elem * ParamLayout::for_config(c).total;
  if (in.size() != expected)
    throw std::runtime_error(path + ": size " + std::to_string(in.size()) + " bytes does not match its header (" +
                             c.describe() + " needs " + std::to_string(expected) + " bytes)" +
                             (in.size() < expected ? ": truncated" : ": trailing data"));
  return c;
}

}  // namespace

GPT2Config read_model_config(const std::string& path) {
  if (is_hf_path(path)) return read_hf_config(path);
  InputFile in(path);
  int version = 0;
  return parse_header(in, &version);
}

ModelFile read_model_file(const std::string& path) {
  ModelFile mf;
  if (is_hf_path(path)) {
    mf.params = read_hf_params(path, &mf.config);  // fp32 in memory holds fp16/bf16/fp32 exactly
    mf.version = kModelVersionFp32;
    return mf;
  }
  InputFile in(path);
  mf.config = parse_header(in, &mf.version);
  const size_t n = ParamLayout::for_config(mf.config).total;
  mf.params.resize(n);
  if (mf.version == kModelVersionFp32) {
    in.read(mf.params.data(), n * sizeof(float), "parameters");
  } else {
    std::vector<uint16_t> raw(std::min(n, kBf16Chunk));
    for (size_t i = 0; i < n; i += kBf16Chunk) {
      const size_t m = std::min(kBf16Chunk, n - i);
      in.read(raw.data(), m * sizeof(uint16_t), "parameters");
      for (size_t k = 0; k < m; k++) mf.params[i + k] = bf16_bits_to_float(raw[k]);
    }
  }
  return mf;
}

void write_model_file(const std::string& path, const GPT2Config& cfg, const std::vector<float>& params,
                      int version) {
  if (version != kModelVersionFp32 && version != kModelVersionBf16)
    throw std::runtime_error(path + ": cannot write model version " + std::to_string(version));
  const size_t n = ParamLayout::for_config(cfg).total;
  if (params.size() != n)
    throw std::runtime_error(path + ": parameter count " + std::to_string(params.size()) +
                             " does not match the config (" + std::to_string(n) + ")");
  int32_t header[256];
  std::memset(header, 0, sizeof(header));
  header[0] = kModelMagic;
  header[1] = version;
  for (size_t i = 0; i < std::size(kHeaderFields); i++) header[2 + i] = cfg.*kHeaderFields[i];
  AtomicOutputFile out(path);
  out.write(header, sizeof(header));
  write_floats(out, params.data(), n, version == kModelVersionBf16);
  out.commit();
}

void write_floats(AtomicOutputFile& out, const float* src, size_t n, bool bf16) {
  if (!bf16) {
    out.write(src, n * sizeof(float));
    return;
  }
  std::vector<uint16_t> raw(std::min(n, kBf16Chunk));
  for (size_t i = 0; i < n; i += kBf16Chunk) {
    const size_t m = std::min(kBf16Chunk, n - i);
    for (size_t k = 0; k < m; k++) raw[k] = float_to_bf16_bits(src[i + k]);
    out.write(raw.data(), m * sizeof(uint16_t));
  }
}

}  // namespace gpt2
