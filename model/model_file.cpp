#include "model/model_file.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "model/gpt2.h"
#include "util/bf16.h"
#include "util/checked_io.h"

namespace gpt2 {

namespace {

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
  c.max_seq_len = header[2];
  c.vocab_size = header[3];
  c.num_layers = header[4];
  c.num_heads = header[5];
  c.channels = header[6];
  c.padded_vocab_size = header[7];
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
  InputFile in(path);
  int version = 0;
  return parse_header(in, &version);
}

ModelFile read_model_file(const std::string& path) {
  InputFile in(path);
  ModelFile mf;
  mf.config = parse_header(in, &mf.version);
  const size_t n = ParamLayout::for_config(mf.config).total;
  mf.params.resize(n);
  if (mf.version == kModelVersionFp32) {
    in.read(mf.params.data(), n * sizeof(float), "parameters");
  } else {
    std::vector<uint16_t> raw(n);
    in.read(raw.data(), n * sizeof(uint16_t), "parameters");
    for (size_t i = 0; i < n; i++) mf.params[i] = bf16_bits_to_float(raw[i]);
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
  header[2] = cfg.max_seq_len;
  header[3] = cfg.vocab_size;
  header[4] = cfg.num_layers;
  header[5] = cfg.num_heads;
  header[6] = cfg.channels;
  header[7] = cfg.padded_vocab_size;
  AtomicOutputFile out(path);
  out.write(header, sizeof(header));
  if (version == kModelVersionFp32) {
    out.write(params.data(), n * sizeof(float));
  } else {
    std::vector<uint16_t> raw(n);
    for (size_t i = 0; i < n; i++) raw[i] = float_to_bf16_bits(params[i]);
    out.write(raw.data(), n * sizeof(uint16_t));
  }
  out.commit();
}

}  // namespace gpt2
