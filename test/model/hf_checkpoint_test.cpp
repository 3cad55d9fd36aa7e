// Hugging Face GPT-2 checkpoints (model_io/hf_checkpoint.h): export -> import is
// bitwise, and checkpoints written by this test's own safetensors writer (HF
// names, Conv1D [in, out] layout, F32/F16/BF16, with or without the
// "transformer." prefix, sharded) import to the expected parameters; anything
// unsupported is refused naming the key. PyTorch comparisons are in
// test/e2e/hf_import_test.sh.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/gpt2.h"
#include "model_io/hf_checkpoint.h"
#include "model_io/model_file.h"
#include "test/tiny_config.h"
#include "util/bf16.h"
#include "util/checked_io.h"
#include "util/rng.h"

namespace gpt2 {
namespace {

using json = nlohmann::json;

GPT2Config small(int L = 2, int H = 2, int C = 8, int T = 4, int V = 10) { return tiny_gpt2_config(L, H, C, T, V); }

// Values k/256, |k| < 256: exact in fp32, fp16 and bf16, so every dtype must
// import to the same floats. The padded vocabulary rows are zero, as on import.
std::vector<float> test_params(const GPT2Config& c, uint64_t seed) {
  const ParamLayout lay = ParamLayout::for_config(c);
  std::vector<float> p(lay.total);
  Rng rng(seed);
  for (float& x : p) x = (static_cast<int>(rng.below(511)) - 255) / 256.0f;
  const size_t real = static_cast<size_t>(c.vocab_size) * c.channels;
  std::fill(p.begin() + lay.offset[kWte] + real, p.begin() + lay.offset[kWte] + lay.numel[kWte], 0.0f);
  return p;
}

std::vector<std::string>& created_dirs() {
  static std::vector<std::string> dirs;
  return dirs;
}

std::string fresh_dir(const std::string& name) {
  static int counter = 0;
  const std::string d = "build/test/model/hf." + std::to_string(getpid()) + "." + std::to_string(counter++) + "." + name;
  make_directories(d);
  created_dirs().push_back(d);
  return d;
}

// Every test's directories are removed after it.
class HfCheckpoint : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const std::string& d : created_dirs()) std::filesystem::remove_all(d);
    created_dirs().clear();
  }
};

std::string load_error(const std::string& dir) {
  try {
    read_model_file(dir);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// ---------------------------------------------------------------- the test's own writer

struct Entry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string raw;
};

void write_safetensors(const std::string& path, const std::vector<Entry>& entries) {
  json h;
  h["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  for (const Entry& e : entries) {
    h[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {off, off + e.raw.size()}}};
    off += e.raw.size();
  }
  const std::string text = h.dump();  // deliberately unpadded: data need not be aligned
  const uint64_t n = text.size();
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << text;
  for (const Entry& e : entries) f << e.raw;
}

uint16_t half_bits_exact(float f) {  // normals and zeros only: the test's values
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  if ((u & 0x7fffffffu) == 0) return sign;
  const int exp = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
  return static_cast<uint16_t>(sign | (exp << 10) | ((u >> 13) & 0x3ffu));
}

std::string encode(const std::vector<float>& v, const std::string& dtype) {
  std::string raw;
  for (float f : v) {
    if (dtype == "F32") {
      raw.append(reinterpret_cast<const char*>(&f), 4);
    } else {
      const uint16_t b = dtype == "F16" ? half_bits_exact(f) : float_to_bf16_bits(f);
      raw.append(reinterpret_cast<const char*>(&b), 2);
    }
  }
  return raw;
}

// GPT-2's HF tensors from our flat parameters: names, Conv1D transposes.
std::vector<Entry> hf_entries(const GPT2Config& c, const std::vector<float>& p, const std::string& dtype,
                              const std::string& prefix = "transformer.") {
  const ParamLayout lay = ParamLayout::for_config(c);
  const int64_t C = c.channels;
  std::vector<Entry> out;
  auto add = [&](const std::string& name, size_t off, std::vector<int64_t> shape, bool conv1d) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(p.begin() + off, p.begin() + off + n);
    if (conv1d)  // ours [out, in] -> HF [in, out]
      for (int64_t i = 0; i < shape[0]; i++)
        for (int64_t o = 0; o < shape[1]; o++) v[i * shape[1] + o] = p[off + o * shape[0] + i];
    out.push_back({prefix + name, dtype, shape, encode(v, dtype)});
  };
  add("wte.weight", lay.offset[kWte], {c.vocab_size, C}, false);
  add("wpe.weight", lay.offset[kWpe], {c.max_seq_len, C}, false);
  for (int l = 0; l < c.num_layers; l++) {
    const std::string h = "h." + std::to_string(l) + ".";
    add(h + "ln_1.weight", lay.layer_offset(kLn1w, l), {C}, false);
    add(h + "ln_1.bias", lay.layer_offset(kLn1b, l), {C}, false);
    add(h + "attn.c_attn.weight", lay.layer_offset(kQkvw, l), {C, 3 * C}, true);
    add(h + "attn.c_attn.bias", lay.layer_offset(kQkvb, l), {3 * C}, false);
    add(h + "attn.c_proj.weight", lay.layer_offset(kAttprojw, l), {C, C}, true);
    add(h + "attn.c_proj.bias", lay.layer_offset(kAttprojb, l), {C}, false);
    add(h + "ln_2.weight", lay.layer_offset(kLn2w, l), {C}, false);
    add(h + "ln_2.bias", lay.layer_offset(kLn2b, l), {C}, false);
    add(h + "mlp.c_fc.weight", lay.layer_offset(kFcw, l), {C, 4 * C}, true);
    add(h + "mlp.c_fc.bias", lay.layer_offset(kFcb, l), {4 * C}, false);
    add(h + "mlp.c_proj.weight", lay.layer_offset(kFcprojw, l), {4 * C, C}, true);
    add(h + "mlp.c_proj.bias", lay.layer_offset(kFcprojb, l), {C}, false);
  }
  add("ln_f.weight", lay.offset[kLnfw], {C}, false);
  add("ln_f.bias", lay.offset[kLnfb], {C}, false);
  return out;
}

json hf_config(const GPT2Config& c) {
  return {{"model_type", "gpt2"}, {"architectures", json::array({"GPT2LMHeadModel"})}, {"activation_function", "gelu_new"},
          {"n_layer", c.num_layers}, {"n_head", c.num_heads}, {"n_embd", c.channels},
          {"n_positions", c.max_seq_len}, {"n_ctx", c.max_seq_len}, {"vocab_size", c.vocab_size},
          {"layer_norm_epsilon", 1e-5}, {"n_inner", nullptr}, {"scale_attn_weights", true},
          {"scale_attn_by_inverse_layer_idx", false}, {"reorder_and_upcast_attn", false},
          {"attn_pdrop", 0.1}, {"resid_pdrop", 0.1}, {"embd_pdrop", 0.1}, {"torch_dtype", "float32"}};
}

std::string write_dir(const std::string& name, const json& cfg, const std::vector<Entry>& entries) {
  const std::string d = fresh_dir(name);
  write_text_file_atomic(d + "/config.json", cfg.dump(2));
  write_safetensors(d + "/model.safetensors", entries);
  return d;
}

void expect_same(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "parameters differ";
}

// ---------------------------------------------------------------- export -> import

TEST_F(HfCheckpoint, ExportImportIsBitwiseAndExportIsDeterministic) {
  const GPT2Config c = small(2, 2, 8, 4, 10);
  std::vector<float> p = test_params(c, 1);
  Rng rng(9);
  for (float& x : p) x = static_cast<float>(rng.normal());  // full fp32 mantissas this time
  const ParamLayout lay = ParamLayout::for_config(c);
  std::fill(p.begin() + lay.offset[kWte] + c.vocab_size * c.channels, p.begin() + lay.offset[kWpe], 0.0f);
  const std::string a = fresh_dir("export_a"), b = fresh_dir("export_b");
  write_hf_checkpoint(a, c, p);
  EXPECT_TRUE(is_hf_checkpoint_dir(a));
  EXPECT_EQ(read_model_config(a), c);
  const ModelFile mf = read_model_file(a);
  EXPECT_EQ(mf.config, c);
  expect_same(mf.params, p);
  write_hf_checkpoint(b, mf.config, mf.params);
  EXPECT_EQ(file_bytes(a + "/model.safetensors"), file_bytes(b + "/model.safetensors"));
  EXPECT_EQ(file_bytes(a + "/config.json"), file_bytes(b + "/config.json"));
}

TEST_F(HfCheckpoint, ExportMatchesTheIndependentLayout) {
  const GPT2Config c = small(2, 2, 8, 4, 10);
  const std::vector<float> p = test_params(c, 2);
  const std::string d = fresh_dir("layout");
  write_hf_checkpoint(d, c, p);
  // Re-written with the test's writer from the test's mapping, the tensors must read back the same.
  const std::string mine = write_dir("layout_mine", hf_config(c), hf_entries(c, p, "F32"));
  expect_same(read_model_file(d).params, read_model_file(mine).params);
  const json cfg = json::parse(read_text_file(d + "/config.json"));
  EXPECT_EQ(cfg["model_type"], "gpt2");
  EXPECT_EQ(cfg["architectures"], json::array({"GPT2LMHeadModel"}));
  EXPECT_EQ(cfg["n_layer"], 2);
  EXPECT_EQ(cfg["vocab_size"], 10);  // the unpadded vocabulary
}

TEST_F(HfCheckpoint, Bf16ExportRoundsToNearestEven) {
  const GPT2Config c = small();
  std::vector<float> p = test_params(c, 3);
  p[ParamLayout::for_config(c).offset[kWpe]] = 1.0f + 1.0f / 256 + 1.0f / 512;  // not a bf16: rounds
  const std::string d = fresh_dir("bf16");
  write_hf_checkpoint(d, c, p, HfDtype::kBF16);
  std::vector<float> want = p;
  for (float& x : want) x = bf16_bits_to_float(float_to_bf16_bits(x));
  expect_same(read_model_file(d).params, want);
}

// distilgpt2 (6 layers, 12 heads) and gpt2-medium (24 layers, 16 heads) shapes with
// GPT-2's vocabulary (50257, padded to 50304) and 1024 positions; narrow widths.
TEST_F(HfCheckpoint, DistilAndMediumShapedConfigsRoundTrip) {
  for (const GPT2Config& c : {small(6, 12, 48, 1024, 50257), small(24, 16, 64, 1024, 50257)}) {
    const std::vector<float> p = test_params(c, 4);
    const std::string d = fresh_dir("L" + std::to_string(c.num_layers));
    write_hf_checkpoint(d, c, p);
    const ModelFile mf = read_model_file(d);
    EXPECT_EQ(mf.config, c);
    EXPECT_EQ(mf.config.padded_vocab_size, 50304);
    expect_same(mf.params, p);
  }
}

// ---------------------------------------------------------------- HF-written forms

TEST_F(HfCheckpoint, ImportsEveryDtypeWithOrWithoutPrefix) {
  const GPT2Config c = small(3, 2, 8, 5, 13);
  const std::vector<float> p = test_params(c, 5);
  for (const char* dtype : {"F32", "F16", "BF16"})
    for (const char* prefix : {"transformer.", ""}) {
      SCOPED_TRACE(std::string(dtype) + " prefix '" + prefix + "'");
      const std::string d = write_dir("dtype", hf_config(c), hf_entries(c, p, dtype, prefix));
      const ModelFile mf = read_model_file(d);
      EXPECT_EQ(mf.config, c);
      expect_same(mf.params, p);
    }
}

TEST_F(HfCheckpoint, Fp16SpecialValuesWidenExactly) {
  const GPT2Config c = small();
  const std::vector<float> p = test_params(c, 6);
  std::vector<Entry> es = hf_entries(c, p, "F16");
  const uint16_t bits[4] = {0x0001, 0x8000, 0x7bff, 0x03ff};  // min subnormal, -0, max normal, max subnormal
  std::memcpy(&es[0].raw[0], bits, sizeof(bits));                 // the first four elements of wte
  const std::vector<float> got = read_model_file(write_dir("f16", hf_config(c), es)).params;
  EXPECT_EQ(got[0], std::ldexp(1.0f, -24));
  EXPECT_TRUE(got[1] == 0.0f && std::signbit(got[1]));
  EXPECT_EQ(got[2], 65504.0f);
  EXPECT_EQ(got[3], 1023 * std::ldexp(1.0f, -24));
}

TEST_F(HfCheckpoint, ShardedIndexForm) {
  const GPT2Config c = small(3, 2, 8, 4, 10);
  const std::vector<float> p = test_params(c, 7);
  const std::vector<Entry> es = hf_entries(c, p, "BF16");
  const std::string d = fresh_dir("sharded");
  write_text_file_atomic(d + "/config.json", hf_config(c).dump());
  json map;
  const size_t half = es.size() / 2;
  write_safetensors(d + "/model-00001-of-00002.safetensors", std::vector<Entry>(es.begin(), es.begin() + half));
  write_safetensors(d + "/model-00002-of-00002.safetensors", std::vector<Entry>(es.begin() + half, es.end()));
  for (size_t i = 0; i < es.size(); i++)
    map[es[i].name] = i < half ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  write_text_file_atomic(d + "/model.safetensors.index.json", json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump());
  expect_same(read_model_file(d).params, p);
  // An index naming the wrong shard for a key is refused, naming the key.
  map[es[0].name] = "model-00002-of-00002.safetensors";
  write_text_file_atomic(d + "/model.safetensors.index.json", json{{"weight_map", map}}.dump());
  EXPECT_NE(load_error(d).find("'" + es[0].name + "' is not in"), std::string::npos) << load_error(d);
}

TEST_F(HfCheckpoint, MaskBuffersAndATiedLmHeadAreAccepted) {
  const GPT2Config c = small();
  const std::vector<float> p = test_params(c, 8);
  std::vector<Entry> es = hf_entries(c, p, "F32");
  es.push_back({"lm_head.weight", "F32", es[0].shape, es[0].raw});  // == wte
  es.push_back({"transformer.h.1.attn.bias", "F32", {1, 1, 4, 4}, std::string(64, '\0')});
  es.push_back({"transformer.h.1.attn.masked_bias", "F32", {}, std::string(4, '\0')});
  json cfg = hf_config(c);
  cfg["tie_word_embeddings"] = false;  // an explicit lm_head equal to wte is still one tensor
  expect_same(read_model_file(write_dir("lm_head", cfg, es)).params, p);
}

// ---------------------------------------------------------------- refusals name the key

struct Refusal {
  const char* what;
  std::string dir;
  std::string key;  // must appear in the error
};

TEST_F(HfCheckpoint, UnsupportedTensorsAreRefusedNamingTheKey) {
  const GPT2Config c = small();
  const std::vector<float> p = test_params(c, 10);
  const std::vector<Entry> good = hf_entries(c, p, "F32");
  std::vector<Refusal> cases;
  {
    std::vector<Entry> es = good;
    es.erase(es.begin() + 11);  // h.0.mlp.c_fc.bias
    cases.push_back({"missing", write_dir("missing", hf_config(c), es), "transformer.h.0.mlp.c_fc.bias"});
  }
  {
    std::vector<Entry> es = good;
    es.push_back({"transformer.h.0.attn.q_proj.weight", "F32", {8, 8}, std::string(256, '\0')});
    cases.push_back({"unexpected", write_dir("unexpected", hf_config(c), es), "transformer.h.0.attn.q_proj.weight"});
  }
  {
    std::vector<Entry> es = good;
    es.push_back({"transformer.h.2.ln_1.weight", "F32", {8}, std::string(32, '\0')});  // a third layer
    cases.push_back({"extra layer", write_dir("layer", hf_config(c), es), "transformer.h.2.ln_1.weight"});
  }
  {
    std::vector<Entry> es = good;
    es[4].shape = {24, 8};  // h.0.attn.c_attn.weight given as [out, in]
    cases.push_back({"shape", write_dir("shape", hf_config(c), es), "transformer.h.0.attn.c_attn.weight"});
  }
  {
    std::vector<Entry> es = good;
    es[2].dtype = "I32";
    cases.push_back({"dtype", write_dir("dtype_i32", hf_config(c), es), "'transformer.h.0.ln_1.weight' has dtype I32"});
  }
  {
    std::vector<Entry> es = good;
    std::vector<float> other(c.vocab_size * c.channels, 0.5f);
    es.push_back({"lm_head.weight", "F32", es[0].shape, encode(other, "F32")});
    cases.push_back({"untied lm_head", write_dir("untied", hf_config(c), es), "lm_head.weight"});
  }
  {
    json cfg = hf_config(c);
    cfg["tie_word_embeddings"] = false;
    cases.push_back({"untied without lm_head", write_dir("untied2", cfg, good), "tie_word_embeddings"});
  }
  for (const Refusal& r : cases) {
    const std::string err = load_error(r.dir);
    std::printf("%-24s %s\n", r.what, err.c_str());
    EXPECT_NE(err.find(r.key), std::string::npos) << r.what << ": " << err;
    EXPECT_NE(err.find(r.dir), std::string::npos) << r.what << " (error names the checkpoint): " << err;
  }
}

TEST_F(HfCheckpoint, UnsupportedConfigOptionsAreRefusedNamingTheKey) {
  const GPT2Config c = small();
  const std::vector<Entry> es = hf_entries(c, test_params(c, 11), "F32");
  const std::vector<std::pair<std::string, json>> bad = {
      {"model_type", "llama"},
      {"architectures", json::array({"GPT2ForSequenceClassification"})},
      {"activation_function", "relu"},
      {"layer_norm_epsilon", 1e-6},
      {"n_inner", 7},
      {"scale_attn_weights", false},
      {"scale_attn_by_inverse_layer_idx", true},
      {"add_cross_attention", true},
      {"quantization_config", json::object()},
      {"n_head", 3},  // does not divide n_embd
  };
  for (const auto& kv : bad) {
    json cfg = hf_config(c);
    cfg[kv.first] = kv.second;
    const std::string err = load_error(write_dir("cfg", cfg, es));
    std::printf("%s\n", err.c_str());
    EXPECT_NE(err.find(kv.first), std::string::npos) << kv.first << ": " << err;
  }
  json cfg = hf_config(c);
  cfg.erase("n_layer");
  const std::string err = load_error(write_dir("cfg_missing", cfg, es));
  EXPECT_NE(err.find("'n_layer' is missing"), std::string::npos) << err;
  // gelu_pytorch_tanh is the same function as gelu_new; reorder_and_upcast_attn only changes fp16 rounding.
  cfg = hf_config(c);
  cfg["activation_function"] = "gelu_pytorch_tanh";
  cfg["reorder_and_upcast_attn"] = true;
  EXPECT_EQ(read_model_config(write_dir("cfg_ok", cfg, es)), c);
}

// config.json's embd_pdrop, resid_pdrop and attn_pdrop: as given, GPT2Config's
// 0.1 where absent (from_pretrained), anything but a number in [0, 1) refused
// naming the file and the key.
TEST_F(HfCheckpoint, DropoutRatesComeFromTheConfig) {
  const GPT2Config c = small();
  const std::vector<Entry> es = hf_entries(c, test_params(c, 14), "F32");
  json cfg = hf_config(c);
  cfg["embd_pdrop"] = 0.25;
  cfg["resid_pdrop"] = 0;
  cfg["attn_pdrop"] = 0.05;
  DropoutRates r = read_hf_dropout(write_dir("pdrop", cfg, es));
  EXPECT_EQ(r.embd, 0.25f);
  EXPECT_EQ(r.resid, 0.0f);
  EXPECT_EQ(r.attn, 0.05f);
  for (const char* key : {"embd_pdrop", "resid_pdrop", "attn_pdrop"}) cfg.erase(key);
  r = read_hf_dropout(write_dir("pdrop_absent", cfg, es));
  EXPECT_EQ(r.embd, 0.1f);
  EXPECT_EQ(r.resid, 0.1f);
  EXPECT_EQ(r.attn, 0.1f);
  // what export writes (GPT-2's 0.1) comes back
  const std::string exported = fresh_dir("pdrop_export");
  write_hf_checkpoint(exported, c, test_params(c, 14));
  EXPECT_EQ(read_hf_dropout(exported).resid, 0.1f);
  for (const json& bad : {json(1.0), json(0.99999999), json(-0.1), json(1e300), json("0.1"), json(nullptr), json(true)}) {
    json b = hf_config(c);
    b["resid_pdrop"] = bad;
    const std::string d = write_dir("pdrop_bad", b, es);
    try {
      read_hf_dropout(d);
      ADD_FAILURE() << "resid_pdrop " << bad.dump() << " accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()),
                d + "/config.json: 'resid_pdrop' must be a number in [0, 1) (got " + bad.dump() + ")");
    }
    EXPECT_EQ(read_model_config(d), c);  // the weights load all the same: only training reads the rates
    // --dropout resid=P overrides it: the bad value is never read, so not refused
    DropoutRates flagged;
    flagged.embd = flagged.attn = -1.0f, flagged.resid = 0.2f;
    const DropoutRates r2 = read_hf_dropout(d, flagged);
    EXPECT_EQ(r2.resid, 0.2f);
    EXPECT_EQ(r2.embd, 0.1f);
  }
  EXPECT_THROW(read_hf_dropout(fresh_dir("pdrop_no_config")), std::runtime_error);
}

TEST_F(HfCheckpoint, BrokenFilesAreErrors) {
  const GPT2Config c = small();
  const std::vector<float> p = test_params(c, 12);
  const std::string d = fresh_dir("broken");
  write_hf_checkpoint(d, c, p);
  const std::string full = file_bytes(d + "/model.safetensors");
  write_text_file_atomic(d + "/model.safetensors", full.substr(0, full.size() - 4));
  EXPECT_NE(load_error(d).find("outside the"), std::string::npos) << load_error(d);
  write_text_file_atomic(d + "/model.safetensors", std::string("\xff\xff\xff\xff\0\0\0\0{}", 10));
  EXPECT_NE(load_error(d).find("header length"), std::string::npos) << load_error(d);
  write_text_file_atomic(d + "/model.safetensors", std::string("\x04\0\0\0\0\0\0\0{no}", 12));
  EXPECT_NE(load_error(d).find("not valid JSON"), std::string::npos) << load_error(d);
  // A repeated key: nlohmann's parser would silently keep the last one.
  const std::string dup = "{\"wte.weight\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                          "\"wte.weight\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}";
  const uint64_t dup_len = dup.size();
  write_text_file_atomic(d + "/model.safetensors", std::string(reinterpret_cast<const char*>(&dup_len), 8) + dup);
  EXPECT_NE(load_error(d).find("'wte.weight' twice"), std::string::npos) << load_error(d);
  std::remove((d + "/model.safetensors").c_str());
  EXPECT_NE(load_error(d).find("no model.safetensors"), std::string::npos) << load_error(d);
  const std::string empty = fresh_dir("no_config");
  EXPECT_NE(load_error(empty).find("without config.json"), std::string::npos) << load_error(empty);
}

TEST_F(HfCheckpoint, ExportRemovesAStaleShardIndex) {
  const GPT2Config c = small();
  const std::vector<float> p = test_params(c, 13);
  const std::string d = fresh_dir("stale");
  write_text_file_atomic(d + "/model.safetensors.index.json", "{\"weight_map\": {}}");
  write_hf_checkpoint(d, c, p);
  EXPECT_FALSE(file_exists(d + "/model.safetensors.index.json"));
  expect_same(read_model_file(d).params, p);
}

}  // namespace
}  // namespace gpt2
