#include "model_io/hf_checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "model/gpt2.h"
#include "model_io/model_file.h"
#include "util/bf16.h"
#include "util/checked_io.h"

namespace gpt2 {

namespace {

using json = nlohmann::json;

const char* const kConfigName = "config.json";
const char* const kWeightsName = "model.safetensors";
const char* const kIndexName = "model.safetensors.index.json";
const std::string kPrefix = "transformer.";  // GPT2LMHeadModel's names; GPT2Model's have none
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the safetensors library's own limit

std::string join_path(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// ---------------------------------------------------------------- element types

enum class Dtype { kF32, kF16, kBF16, kUnsupported };

Dtype dtype_from_name(const std::string& name) {
  if (name == "F32") return Dtype::kF32;
  if (name == "F16") return Dtype::kF16;
  if (name == "BF16") return Dtype::kBF16;
  return Dtype::kUnsupported;
}

size_t dtype_bytes(Dtype d) { return d == Dtype::kF32 ? 4 : 2; }

// IEEE binary16 -> float, exact (every half is a float).
float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf, or NaN with its payload
  } else if (exp != 0) {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);  // normal: re-bias the exponent
  } else {
    const float mag = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal: mant * 2^-24
    std::memcpy(&bits, &mag, sizeof(bits));
    bits |= sign;
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Element i of a raw little-endian tensor as float. memcpy: the data need not
// be aligned (a header whose length is not a multiple of 8 shifts it).
inline float load_elem(const uint8_t* src, size_t i, Dtype d) {
  if (d == Dtype::kF32) {
    float f;
    std::memcpy(&f, src + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, src + 2 * i, 2);
  return d == Dtype::kF16 ? half_bits_to_float(h) : bf16_bits_to_float(h);
}

// ---------------------------------------------------------------- mapped files

// A read-only mapping of a whole file. MAP_PRIVATE + PROT_READ: pages are the
// page cache's, so release() can drop them from this process at any time.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) : path_(path) {
    const int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) throw std::runtime_error(path + ": cannot open for reading: " + std::strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
      close(fd);
      throw std::runtime_error(path + ": cannot stat: " + std::strerror(errno));
    }
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ > 0) {
      void* p = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        close(fd);
        throw std::runtime_error(path + ": cannot mmap: " + std::strerror(errno));
      }
      data_ = static_cast<const uint8_t*>(p);
    }
    close(fd);  // the mapping keeps the file
  }
  ~MappedFile() {
    if (data_) munmap(const_cast<uint8_t*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Drops the whole pages inside [begin, end) from this process's memory (the
  // header's no-second-copy promise); a later touch re-reads them from the file.
  void release(uint64_t begin, uint64_t end) const {
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t b = (begin + page - 1) / page * page, e = end / page * page;
    if (data_ && e > b) madvise(const_cast<uint8_t*>(data_) + b, e - b, MADV_DONTNEED);
  }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

void madvise_willneed(const MappedFile& f, uint64_t begin, uint64_t end) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t b = begin / page * page;
  if (f.data() && end > b) madvise(const_cast<uint8_t*>(f.data()) + b, end - b, MADV_WILLNEED);
}

// One tensor of a .safetensors file.
struct StoredTensor {
  std::string key;  // as written in the file
  std::string dtype_name;
  Dtype dtype = Dtype::kUnsupported;
  std::vector<int64_t> shape;
  const MappedFile* file = nullptr;
  uint64_t begin = 0, end = 0;  // absolute byte offsets in the file
};

// Every tensor of a checkpoint (one file or all shards), by canonical name:
// the key without the optional "transformer." prefix.
struct TensorSet {
  std::string dir;
  std::vector<std::unique_ptr<MappedFile>> files;
  std::map<std::string, StoredTensor> tensors;
};

std::string canonical_name(const std::string& key) {
  return key.compare(0, kPrefix.size(), kPrefix) == 0 ? key.substr(kPrefix.size()) : key;
}

// Checked product of a shape; -1 when it overflows or a dimension is negative.
int64_t shape_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > (int64_t{1} << 62) / d)) return -1;
    n *= d;
  }
  return n;
}

StoredTensor parse_entry(const MappedFile& f, const std::string& key, const json& e, uint64_t data_start) {
  auto bad = [&](const std::string& why) -> std::runtime_error {
    return std::runtime_error(f.path() + ": tensor '" + key + "': " + why);
  };
  if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
    throw bad("header entry needs dtype, shape and data_offsets");
  const json& dt = e["dtype"];
  const json& sh = e["shape"];
  const json& off = e["data_offsets"];
  if (!dt.is_string()) throw bad("dtype is not a string");
  if (!sh.is_array()) throw bad("shape is not an array");
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    throw bad("data_offsets must be [begin, end]");
  StoredTensor t;
  t.key = key;
  t.file = &f;
  t.dtype_name = dt.get<std::string>();
  t.dtype = dtype_from_name(t.dtype_name);
  for (const json& d : sh) {
    if (!d.is_number_unsigned()) throw bad("shape holds a non-integer " + d.dump());
    t.shape.push_back(d.get<int64_t>());
  }
  const uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
  if (b > en || en > f.size() - data_start)
    throw bad("data_offsets [" + std::to_string(b) + ", " + std::to_string(en) + "] outside the " +
              std::to_string(f.size() - data_start) + "-byte data section (truncated file?)");
  t.begin = data_start + b;
  t.end = data_start + en;
  const int64_t numel = shape_numel(t.shape);
  if (numel < 0) throw bad("shape " + shape_text(t.shape) + " is not a valid size");
  if (t.dtype != Dtype::kUnsupported && static_cast<uint64_t>(numel) * dtype_bytes(t.dtype) != en - b)
    throw bad(std::to_string(en - b) + " bytes do not hold a " + t.dtype_name + " tensor of shape " +
              shape_text(t.shape));
  return t;
}

// Parses one .safetensors file's header (8-byte little-endian length, JSON)
// and adds its tensors to the set.
void add_safetensors_file(TensorSet& set, const std::string& path) {
  set.files.push_back(std::make_unique<MappedFile>(path));
  const MappedFile& f = *set.files.back();
  uint64_t n = 0;
  if (f.size() < 8) throw std::runtime_error(path + ": truncated: shorter than the 8-byte header length");
  std::memcpy(&n, f.data(), 8);
  if (n > kMaxHeaderBytes || n > f.size() - 8)
    throw std::runtime_error(path + ": header length " + std::to_string(n) + " exceeds the file (" +
                             std::to_string(f.size()) + " bytes): not a safetensors file, or truncated");
  // A JSON object may repeat a key (the parser keeps the last one); a tensor
  // name twice is a broken file, as the safetensors library says too.
  std::map<std::string, int> seen;
  std::string repeated;
  const json::parser_callback_t note_keys = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && seen[parsed.get<std::string>()]++ == 1)
      repeated = parsed.get<std::string>();
    return true;
  };
  json header;
  try {
    header = json::parse(f.data() + 8, f.data() + 8 + n, note_keys);
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": header is not valid JSON: " + e.what());
  }
  if (!header.is_object()) throw std::runtime_error(path + ": header is not a JSON object");
  if (!repeated.empty()) throw std::runtime_error(path + ": header names tensor '" + repeated + "' twice");
  for (const auto& item : header.items()) {
    if (item.key() == "__metadata__") continue;
    StoredTensor t = parse_entry(f, item.key(), item.value(), 8 + n);
    const std::string name = canonical_name(t.key);
    auto prev = set.tensors.find(name);
    if (prev != set.tensors.end())
      throw std::runtime_error(path + ": tensor '" + t.key + "' duplicates '" + prev->second.key + "' in " +
                               prev->second.file->path());
    set.tensors.emplace(name, std::move(t));
  }
}

// config.json or the shard index, which must be a JSON object.
json read_json_object(const std::string& path) {
  json j;
  try {
    j = json::parse(read_text_file(path));
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw std::runtime_error(path + ": not a JSON object");
  return j;
}

// model.safetensors.index.json: {"weight_map": {key: shard file name}}.
void add_sharded(TensorSet& set, const std::string& index_path) {
  const json index = read_json_object(index_path);
  if (!index.contains("weight_map") || !index["weight_map"].is_object())
    throw std::runtime_error(index_path + ": 'weight_map' is missing or not an object");
  const json& map = index["weight_map"];
  std::map<std::string, std::string> shards;  // file name -> path, each opened once
  for (const auto& item : map.items()) {
    if (!item.value().is_string())
      throw std::runtime_error(index_path + ": weight_map['" + item.key() + "'] is not a file name");
    const std::string shard = item.value().get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
      throw std::runtime_error(index_path + ": weight_map['" + item.key() + "'] = '" + shard +
                               "' is not a file name in the checkpoint directory");
    shards.emplace(shard, join_path(set.dir, shard));
  }
  for (const auto& s : shards) add_safetensors_file(set, s.second);
  // Every key of the map must be in the shard it names (a stale index is an error, not a silent mix).
  for (const auto& item : map.items()) {
    auto it = set.tensors.find(canonical_name(item.key()));
    const std::string want = join_path(set.dir, item.value().get<std::string>());
    if (it == set.tensors.end() || it->second.key != item.key() || it->second.file->path() != want)
      throw std::runtime_error(index_path + ": tensor '" + item.key() + "' is not in " + want);
  }
}

TensorSet open_tensors(const std::string& dir) {
  TensorSet set;
  set.dir = dir;
  const std::string single = join_path(dir, kWeightsName), index = join_path(dir, kIndexName);
  if (file_exists(index)) {
    add_sharded(set, index);
  } else if (file_exists(single)) {
    add_safetensors_file(set, single);
  } else {
    const bool pickle = file_exists(join_path(dir, "pytorch_model.bin")) ||
                        file_exists(join_path(dir, "pytorch_model.bin.index.json"));
    throw std::runtime_error(dir + ": no " + kWeightsName + " or " + kIndexName +
                             (pickle ? " (pytorch_model.bin, a pickle, is not read: re-save with "
                                       "save_pretrained(..., safe_serialization=True))"
                                     : ""));
  }
  return set;
}

// ---------------------------------------------------------------- config.json

struct HfConfig {
  GPT2Config cfg;
  bool tied = true;  // tie_word_embeddings
};

[[noreturn]] void config_error(const std::string& path, const std::string& key, const std::string& why) {
  throw std::runtime_error(path + ": '" + key + "' " + why);
}

int config_int(const json& j, const std::string& path, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) config_error(path, key, "is missing");
  if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > (int64_t{1} << 30))
    config_error(path, key, "must be a positive integer (got " + it->dump() + ")");
  return it->get<int>();
}

// A boolean option's value; absent or null means HF's default.
bool config_bool(const json& j, const std::string& path, const char* key, bool dflt) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) config_error(path, key, "must be true or false (got " + it->dump() + ")");
  return it->get<bool>();
}

void check_architecture(const json& j, const std::string& path) {
  auto mt = j.find("model_type");
  if (mt == j.end()) config_error(path, "model_type", "is missing (expected \"gpt2\")");
  if (!mt->is_string() || mt->get<std::string>() != "gpt2")
    config_error(path, "model_type", "is " + mt->dump() + ": only GPT-2 checkpoints (\"gpt2\") are supported");
  auto arch = j.find("architectures");
  if (arch != j.end() && !arch->is_null()) {
    if (!arch->is_array()) config_error(path, "architectures", "is not a list");
    for (const json& a : *arch)
      if (!a.is_string() || (a.get<std::string>() != "GPT2LMHeadModel" && a.get<std::string>() != "GPT2Model"))
        config_error(path, "architectures", "names " + a.dump() + " (supported: GPT2LMHeadModel, GPT2Model)");
  }
}

// Options that change GPT-2's arithmetic away from what model/gpt2.cpp computes
// are refused by name. Token ids and generation settings do not affect the
// weights or the forward pass and are ignored; dropout rates are read_hf_dropout's.
void check_options(const json& j, const std::string& path, int n_embd) {
  auto act = j.find("activation_function");
  if (act != j.end() && !(act->is_string() && (act->get<std::string>() == "gelu_new" ||
                                                act->get<std::string>() == "gelu_pytorch_tanh")))
    config_error(path, "activation_function",
                 "is " + act->dump() + ": only the tanh GELU (\"gelu_new\") is supported");
  auto eps = j.find("layer_norm_epsilon");
  if (eps != j.end() && !(eps->is_number() && std::fabs(eps->get<double>() - 1e-5) <= 1e-11))
    config_error(path, "layer_norm_epsilon", "is " + eps->dump() + ": the model's layernorm uses 1e-5");
  auto inner = j.find("n_inner");
  if (inner != j.end() && !inner->is_null() && !(inner->is_number_integer() && inner->get<int64_t>() == 4 * n_embd))
    config_error(path, "n_inner", "is " + inner->dump() + ": the MLP width must be 4 * n_embd = " +
                                      std::to_string(4 * n_embd));
  if (!config_bool(j, path, "scale_attn_weights", true))
    config_error(path, "scale_attn_weights", "is false: attention is always scaled by 1/sqrt(head size)");
  if (config_bool(j, path, "scale_attn_by_inverse_layer_idx", false))
    config_error(path, "scale_attn_by_inverse_layer_idx", "is true: not supported");
  if (config_bool(j, path, "add_cross_attention", false))
    config_error(path, "add_cross_attention", "is true: cross-attention layers are not supported");
  if (j.contains("quantization_config"))
    config_error(path, "quantization_config", "is present: quantized checkpoints are not supported");
  // reorder_and_upcast_attn only reorders the 1/sqrt(d) scaling and computes
  // attention in fp32: the same function, which our fp32 attention already is.
  config_bool(j, path, "reorder_and_upcast_attn", false);
}

// A dropout rate: GPT2Config's 0.1 when absent; else a number in [0, 1).
float config_rate(const json& j, const std::string& path, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return 0.1f;
  const double p = it->is_number() ? it->get<double>() : -1.0;
  if (!(p >= 0.0 && static_cast<float>(p) < 1.0f))  // (0.99999999 is 1 as a float)
    config_error(path, key, "must be a number in [0, 1) (got " + it->dump() + ")");
  return static_cast<float>(p);
}

HfConfig parse_hf_config_file(const std::string& path) {
  const json j = read_json_object(path);
  check_architecture(j, path);
  HfConfig h;
  h.cfg.num_layers = config_int(j, path, "n_layer");
  h.cfg.num_heads = config_int(j, path, "n_head");
  h.cfg.channels = config_int(j, path, "n_embd");
  h.cfg.max_seq_len = config_int(j, path, "n_positions");
  h.cfg.vocab_size = config_int(j, path, "vocab_size");
  h.cfg.padded_vocab_size = padded_vocab_for(h.cfg.vocab_size);
  h.cfg.validate(path);
  check_options(j, path, h.cfg.channels);
  h.tied = config_bool(j, path, "tie_word_embeddings", true);
  return h;
}

// ---------------------------------------------------------------- name mapping

// One HF tensor and where it lives in the flat parameter vector.
struct HfTensor {
  std::string name;  // canonical: without "transformer."
  int param;         // ParamTensor
  int layer;         // -1 for wte, wpe, ln_f
  bool conv1d;       // HF Conv1D stores [in, out]; llm.c's matmul weights are [out, in]
  std::vector<int64_t> shape;  // HF's shape
};

std::vector<HfTensor> hf_tensor_table(const GPT2Config& c) {
  const int64_t C = c.channels;
  std::vector<HfTensor> t = {{"wte.weight", kWte, -1, false, {c.vocab_size, C}},
                             {"wpe.weight", kWpe, -1, false, {c.max_seq_len, C}}};
  for (int l = 0; l < c.num_layers; l++) {
    const std::string h = "h." + std::to_string(l) + ".";
    t.push_back({h + "ln_1.weight", kLn1w, l, false, {C}});
    t.push_back({h + "ln_1.bias", kLn1b, l, false, {C}});
    t.push_back({h + "attn.c_attn.weight", kQkvw, l, true, {C, 3 * C}});
    t.push_back({h + "attn.c_attn.bias", kQkvb, l, false, {3 * C}});
    t.push_back({h + "attn.c_proj.weight", kAttprojw, l, true, {C, C}});
    t.push_back({h + "attn.c_proj.bias", kAttprojb, l, false, {C}});
    t.push_back({h + "ln_2.weight", kLn2w, l, false, {C}});
    t.push_back({h + "ln_2.bias", kLn2b, l, false, {C}});
    t.push_back({h + "mlp.c_fc.weight", kFcw, l, true, {C, 4 * C}});
    t.push_back({h + "mlp.c_fc.bias", kFcb, l, false, {4 * C}});
    t.push_back({h + "mlp.c_proj.weight", kFcprojw, l, true, {4 * C, C}});
    t.push_back({h + "mlp.c_proj.bias", kFcprojb, l, false, {C}});
  }
  t.push_back({"ln_f.weight", kLnfw, -1, false, {C}});
  t.push_back({"ln_f.bias", kLnfb, -1, false, {C}});
  return t;
}

size_t dest_offset(const ParamLayout& lay, const HfTensor& t) {
  return t.layer < 0 ? lay.offset[t.param] : lay.layer_offset(t.param, t.layer);
}

const char* const kLmHead = "lm_head.weight";

// Older transformers versions saved the causal-mask buffers h.N.attn.bias
// [1,1,n_positions,n_positions] and h.N.attn.masked_bias: constants, not weights.
bool is_mask_buffer(const std::string& name, int num_layers) {
  if (name.compare(0, 2, "h.") != 0) return false;
  size_t dot = name.find('.', 2);
  if (dot == std::string::npos || dot == 2) return false;
  const std::string idx = name.substr(2, dot - 2), rest = name.substr(dot + 1);
  if (idx.find_first_not_of("0123456789") != std::string::npos || idx.size() > 6) return false;
  return std::stoi(idx) < num_layers && (rest == "attn.bias" || rest == "attn.masked_bias");
}

void check_tensor(const std::string& dir, const StoredTensor& s, const std::vector<int64_t>& shape) {
  if (s.dtype == Dtype::kUnsupported)
    throw std::runtime_error(dir + ": tensor '" + s.key + "' has dtype " + s.dtype_name +
                             " (supported: F32, F16, BF16)");
  if (s.shape != shape)
    throw std::runtime_error(dir + ": tensor '" + s.key + "' has shape " + shape_text(s.shape) + ", expected " +
                             shape_text(shape) + " for the config in " + kConfigName);
}

// Every GPT-2 tensor present with its shape and a supported dtype; nothing
// else but the mask buffers and a (tied) lm_head. Returns hf_tensor_table.
std::vector<HfTensor> check_tensors(const TensorSet& set, const HfConfig& h) {
  std::vector<HfTensor> table = hf_tensor_table(h.cfg);
  std::map<std::string, bool> known;
  for (const HfTensor& t : table) {
    auto it = set.tensors.find(t.name);
    if (it == set.tensors.end())
      throw std::runtime_error(set.dir + ": missing tensor '" + kPrefix + t.name + "' (or '" + t.name + "')");
    check_tensor(set.dir, it->second, t.shape);
    known[t.name] = true;
  }
  for (const auto& kv : set.tensors) {
    if (known.count(kv.first) || is_mask_buffer(kv.first, h.cfg.num_layers)) continue;
    if (kv.first == kLmHead) {
      check_tensor(set.dir, kv.second, {h.cfg.vocab_size, h.cfg.channels});
      continue;
    }
    throw std::runtime_error(set.dir + ": unexpected tensor '" + kv.second.key +
                             "' (not a GPT-2 parameter; this model has " + std::to_string(h.cfg.num_layers) +
                             " layers)");
  }
  if (!h.tied && !set.tensors.count(kLmHead))
    throw std::runtime_error(set.dir + ": 'tie_word_embeddings' is false in " + kConfigName + " but there is no '" +
                             kLmHead + "'");
  return table;
}

// ---------------------------------------------------------------- conversion

// src: [rows, cols] in the file; dst: fp32, the same shape or (Conv1D) its
// transpose [cols, rows]. The element type is a template argument so the inner
// loops carry no branch; the transpose is tiled so both sides stay in cache.
constexpr int64_t kParallelMin = int64_t{1} << 18;  // below this, threads cost more than they save

template <Dtype D>
void convert_typed(const uint8_t* src, float* dst, int64_t rows, int64_t cols, bool transpose) {
  if (!transpose) {
    const int64_t n = rows * cols;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; i++) dst[i] = load_elem(src, i, D);
    return;
  }
  constexpr int64_t kTile = 64;
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t r = r0; r < std::min(rows, r0 + kTile); r++)
        for (int64_t c = c0; c < std::min(cols, c0 + kTile); c++) dst[c * rows + r] = load_elem(src, r * cols + c, D);
}

void convert_rows(Dtype d, const uint8_t* src, float* dst, int64_t rows, int64_t cols, bool transpose) {
  switch (d) {
    case Dtype::kF32: return convert_typed<Dtype::kF32>(src, dst, rows, cols, transpose);
    case Dtype::kF16: return convert_typed<Dtype::kF16>(src, dst, rows, cols, transpose);
    case Dtype::kBF16: return convert_typed<Dtype::kBF16>(src, dst, rows, cols, transpose);
    case Dtype::kUnsupported: break;
  }
  throw std::logic_error("convert_rows: unchecked dtype");
}

// Mapped bytes converted between two releases: what a load holds beyond the fp32 vector.
constexpr uint64_t kReleaseBytes = uint64_t{64} << 20;

// Converts tensor s into dst and drops its mapped pages as it goes: a Conv1D
// transpose (at most 4C x C) in one piece, anything else (wte is by far the
// largest tensor) in row blocks of at most kReleaseBytes.
void convert_tensor(const StoredTensor& s, float* dst, bool transpose) {
  const int64_t rows = s.shape.empty() ? 1 : s.shape[0];
  const int64_t cols = rows ? shape_numel(s.shape) / rows : 0;
  const uint64_t row_bytes = static_cast<uint64_t>(cols) * dtype_bytes(s.dtype);
  const int64_t block = transpose || row_bytes == 0 ? rows : std::max<int64_t>(1, kReleaseBytes / row_bytes);
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t n = std::min(block, rows - r0);
    const uint64_t b = s.begin + r0 * row_bytes, e = b + n * row_bytes;
    madvise_willneed(*s.file, b, e);  // read ahead: the loops then rarely wait on a page fault
    convert_rows(s.dtype, s.file->data() + b, dst + r0 * cols, n, cols, transpose);
    s.file->release(b, e);
  }
}

// An untied lm_head is accepted only when it holds exactly wte's values.
void check_lm_head_tied(const TensorSet& set, const float* wte) {
  auto it = set.tensors.find(kLmHead);
  if (it == set.tensors.end()) return;
  const StoredTensor& s = it->second;
  const int64_t n = shape_numel(s.shape);
  const int64_t block = static_cast<int64_t>(kReleaseBytes / dtype_bytes(s.dtype));
  for (int64_t i0 = 0; i0 < n; i0 += block) {
    const int64_t i1 = std::min(n, i0 + block);
    for (int64_t i = i0; i < i1; i++) {
      const float v = load_elem(s.file->data() + s.begin, i, s.dtype);
      if (std::memcmp(&v, &wte[i], sizeof(float)) != 0)
        throw std::runtime_error(set.dir + ": tensor '" + s.key + "' differs from '" + kPrefix +
                                 "wte.weight' (element " + std::to_string(i) +
                                 "): an untied output layer, which this GPT-2 (tied lm_head) cannot represent");
    }
    s.file->release(s.begin + i0 * dtype_bytes(s.dtype), s.begin + i1 * dtype_bytes(s.dtype));
  }
}

// ---------------------------------------------------------------- writing

json hf_config_json(const GPT2Config& c, HfDtype dtype) {
  json j;
  j["activation_function"] = "gelu_new";
  j["architectures"] = json::array({"GPT2LMHeadModel"});
  // GPT-2's published dropout and head settings, for whoever fine-tunes the export.
  j["attn_pdrop"] = 0.1;
  j["embd_pdrop"] = 0.1;
  j["resid_pdrop"] = 0.1;
  j["summary_activation"] = nullptr;
  j["summary_first_dropout"] = 0.1;
  j["summary_proj_to_labels"] = true;
  j["summary_type"] = "cls_index";
  j["summary_use_proj"] = true;
  if (c.vocab_size > 50256) {  // <|endoftext|> of the GPT-2 tokenizer
    j["bos_token_id"] = 50256;
    j["eos_token_id"] = 50256;
  }
  j["initializer_range"] = 0.02;
  j["layer_norm_epsilon"] = 1e-5;
  j["model_type"] = "gpt2";
  j["n_ctx"] = c.max_seq_len;
  j["n_embd"] = c.channels;
  j["n_head"] = c.num_heads;
  j["n_inner"] = nullptr;
  j["n_layer"] = c.num_layers;
  j["n_positions"] = c.max_seq_len;
  j["reorder_and_upcast_attn"] = false;
  j["scale_attn_by_inverse_layer_idx"] = false;
  j["scale_attn_weights"] = true;
  j["tie_word_embeddings"] = true;
  j["torch_dtype"] = dtype == HfDtype::kBF16 ? "bfloat16" : "float32";
  j["use_cache"] = true;
  j["vocab_size"] = c.vocab_size;
  return j;
}

// HF's [in, out] from our [out, in] (src), a few HF rows at a time.
void write_transposed(AtomicOutputFile& out, const float* src, int64_t in, int64_t outn, bool bf16) {
  const int64_t rows_per_chunk = std::max<int64_t>(1, (int64_t{1} << 20) / outn);
  std::vector<float> buf(static_cast<size_t>(std::min(in, rows_per_chunk) * outn));
  for (int64_t r0 = 0; r0 < in; r0 += rows_per_chunk) {
    const int64_t r1 = std::min(in, r0 + rows_per_chunk);
    for (int64_t o = 0; o < outn; o++)
      for (int64_t r = r0; r < r1; r++) buf[(r - r0) * outn + o] = src[o * in + r];
    write_floats(out, buf.data(), static_cast<size_t>((r1 - r0) * outn), bf16);
  }
}

void write_safetensors(const std::string& path, const GPT2Config& cfg, const std::vector<float>& params,
                       HfDtype dtype) {
  std::vector<HfTensor> table = hf_tensor_table(cfg);
  // Data in the order of the header's (sorted) keys, as the safetensors library lays it out.
  std::sort(table.begin(), table.end(),
            [](const HfTensor& a, const HfTensor& b) { return kPrefix + a.name < kPrefix + b.name; });
  const bool bf16 = dtype == HfDtype::kBF16;
  json header;
  header["__metadata__"] = {{"format", "pt"}};  // from_pretrained insists on it
  uint64_t off = 0;
  for (const HfTensor& t : table) {
    const uint64_t bytes = static_cast<uint64_t>(shape_numel(t.shape)) * (bf16 ? 2 : 4);
    header[kPrefix + t.name] = {{"dtype", bf16 ? "BF16" : "F32"},
                                {"shape", t.shape},
                                {"data_offsets", {off, off + bytes}}};
    off += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the format pads the header to 8 bytes
  const uint64_t n = text.size();
  const ParamLayout lay = ParamLayout::for_config(cfg);
  AtomicOutputFile out(path);
  out.write(&n, sizeof(n));
  out.write(text.data(), text.size());
  for (const HfTensor& t : table) {
    const float* src = params.data() + dest_offset(lay, t);
    if (t.conv1d)
      write_transposed(out, src, t.shape[0], t.shape[1], bf16);
    else  // wte: only the first vocab_size rows (the padding is ours, not HF's)
      write_floats(out, src, static_cast<size_t>(shape_numel(t.shape)), bf16);
  }
  out.commit();
}

}  // namespace

bool is_hf_checkpoint_dir(const std::string& path) {
  return is_directory(path) && file_exists(join_path(path, kConfigName));
}

bool is_hf_checkpoint_file(const std::string& name) { return name == kConfigName || name.rfind(kWeightsName, 0) == 0; }

GPT2Config read_hf_config(const std::string& dir) {
  const HfConfig h = parse_hf_config_file(join_path(dir, kConfigName));
  check_tensors(open_tensors(dir), h);
  return h.cfg;
}

DropoutRates read_hf_dropout(const std::string& dir, const DropoutRates& overridden) {
  const std::string path = join_path(dir, kConfigName);
  const json j = read_json_object(path);
  const auto rate = [&](float given, const char* key) { return given >= 0.0f ? given : config_rate(j, path, key); };
  DropoutRates r;
  r.embd = rate(overridden.embd, "embd_pdrop");
  r.resid = rate(overridden.resid, "resid_pdrop");
  r.attn = rate(overridden.attn, "attn_pdrop");
  return r;
}

DropoutRates read_hf_dropout(const std::string& dir) {
  DropoutRates none;
  none.embd = none.resid = none.attn = -1.0f;
  return read_hf_dropout(dir, none);
}

std::vector<float> read_hf_params(const std::string& dir, GPT2Config* config) {
  const HfConfig h = parse_hf_config_file(join_path(dir, kConfigName));
  const TensorSet set = open_tensors(dir);
  const std::vector<HfTensor> table = check_tensors(set, h);
  const ParamLayout lay = ParamLayout::for_config(h.cfg);
  std::vector<float> params(lay.total, 0.0f);  // the padded wte rows stay zero
  for (const HfTensor& t : table)
    convert_tensor(set.tensors.at(t.name), params.data() + dest_offset(lay, t), t.conv1d);
  check_lm_head_tied(set, params.data() + lay.offset[kWte]);
  *config = h.cfg;
  return params;
}

void write_hf_checkpoint(const std::string& dir, const GPT2Config& cfg, const std::vector<float>& params,
                         HfDtype dtype) {
  cfg.validate(dir);
  const size_t total = ParamLayout::for_config(cfg).total;
  if (params.size() < total)
    throw std::runtime_error(dir + ": " + std::to_string(params.size()) + " parameters, the config needs " +
                             std::to_string(total));
  make_directories(dir);
  // A stale index from an earlier sharded save would take precedence over the new file.
  const std::string index = join_path(dir, kIndexName);
  if (file_exists(index) && std::remove(index.c_str()) != 0)
    throw std::runtime_error(index + ": cannot remove the stale shard index: " + std::strerror(errno));
  write_safetensors(join_path(dir, kWeightsName), cfg, params, dtype);
  // config.json last: it is what marks the directory as a checkpoint.
  write_text_file_atomic(join_path(dir, kConfigName), hf_config_json(cfg, dtype).dump(2) + "\n");
}

}  // namespace gpt2
