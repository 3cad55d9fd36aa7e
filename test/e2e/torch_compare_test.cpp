// The CPU backend + model + trainer against PyTorch (float64 reference built by
// test/e2e/torch_reference.py with Debian's /usr/bin/python3): logits, loss,
// every parameter gradient, and the losses of 10 AdamW steps through the real
// ./train_gpt2cu, with and without an SFT loss mask (ignore_index). Bound:
// relative error 1e-5 (fp32 against exact): the logits and gradients as an rms
// (rel_l2), so averages of random-sign 2^-24 roundings (a few per op through the
// ~20 ops of a 2-layer C = 32 model, GEMM sums of <= 128 terms): ~1e-7 .. 1e-6,
// and 1e-5 (~170 u) is an allowance, not a worst case. The step losses also go
// through AdamW, whose first steps are sign-like (m / sqrt(v) = +-1 at t = 1): a
// gradient within its fp32 error of 0 could flip a 2 lr step, which no rounding
// bound covers; none is that close here. Under the Haswell, SkylakeX and Zen
// sgemm kernels every checked quantity is within 4.2e-7.
//
// Dropout: reference_dropout.bin is one training forward with
// dropout at HF's three sites (embedding, attention probabilities, both
// projections before the residual add) and util/philox.h's masks, ported to
// Python; given the same masks (checked here bit for bit against the C++
// function), the loss, logits and every gradient meet the same 1e-5. Why the
// bound still holds: a dropped element is an exact 0 on both sides and a kept
// one is x * s with s the same fp32 keep scale on both sides (the reference uses
// the C++ float, not 1/(1-p) in float64), so dropout adds one relative 2^-24
// rounding per masked product, forward and backward (about 6 more per layer,
// beside the ~20 ops above), and the scale <= 1/0.7 amplifies no relative error.
// The rms argument is unchanged: under the Haswell, SkylakeX and Zen sgemm
// kernels the worst is 4.7e-7 (ln1w's gradient). A mask that disagreed in its
// elements would be O(1) changes of terms, orders above 1e-5: the same model at
// token0 0 is about 1 off, and reference masks with no attention dropout, the
// attention column stride T instead of T rounded to 16, or the 2x2 block's words
// swapped are 0.24 .. 1.1 off.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "dataloader/shard.h"
#include "model/gpt2.h"
#include "model_io/model_file.h"
#include "test/model/train_helpers.h"
#include "util/checked_io.h"
#include "util/philox.h"

namespace gpt2 {
namespace {

const char* kRefDir = "build/test/e2e/torch_ref";
constexpr double kRelTol = 1e-5;

struct Reference {
  int B = 0, T = 0, V = 0, Vp = 0, steps = 0;
  size_t num_params = 0;
  std::vector<double> logits, grads, step_losses;
  double loss = 0;
};

// reference_dropout.bin's trailer (torch_reference.py write_dropout_trailer).
struct DropoutRun {
  DropoutRates rates;
  uint32_t step = 0;
  uint64_t seed = 0, token0 = 0;
  std::vector<uint8_t> embd;                    // [N, C] keep bits
  std::vector<std::vector<uint8_t>> attn;       // per layer [B, NH, T, T], j > t: 0
  std::vector<std::vector<uint8_t>> attproj;    // per layer [N, C]
  std::vector<std::vector<uint8_t>> fcproj;     // per layer [N, C]
};

Reference read_reference(InputFile& in, int32_t* flags = nullptr) {
  int32_t h[8];
  in.read(h, sizeof(h), "reference header");
  if (flags) *flags = h[6];
  Reference r;
  r.B = h[0], r.T = h[1], r.V = h[2], r.Vp = h[3], r.num_params = h[4], r.steps = h[5];
  r.logits.resize(static_cast<size_t>(r.B) * r.T * r.V);
  in.read(r.logits.data(), r.logits.size() * 8, "logits");
  in.read(&r.loss, 8, "loss");
  r.grads.resize(r.num_params);
  in.read(r.grads.data(), r.grads.size() * 8, "grads");
  r.step_losses.resize(r.steps);
  in.read(r.step_losses.data(), r.step_losses.size() * 8, "step losses");
  return r;
}

Reference read_reference(const std::string& path) {
  InputFile in(path);
  return read_reference(in);
}

// reference_dropout.bin: the reference (header flag 1) and its dropout trailer.
Reference read_dropout_reference(const std::string& path, int L, int NH, int C, DropoutRun* run) {
  InputFile in(path);
  int32_t flags = 0;
  Reference r = read_reference(in, &flags);
  if (flags != 1) throw std::runtime_error(path + ": no dropout trailer (header flag " + std::to_string(flags) + ")");
  float rates[3];
  in.read(rates, sizeof(rates), "dropout rates");
  run->rates = DropoutRates{rates[0], rates[1], rates[2]};
  in.read(&run->step, 4, "dropout step");
  in.read(&run->seed, 8, "dropout seed");
  in.read(&run->token0, 8, "dropout token0");
  const size_t NC = static_cast<size_t>(r.B) * r.T * C, att = static_cast<size_t>(r.B) * NH * r.T * r.T;
  auto bits = [&](size_t n, const char* what) {
    std::vector<uint8_t> v(n);
    in.read(v.data(), n, what);
    return v;
  };
  run->embd = bits(NC, "embedding mask");
  for (int l = 0; l < L; l++) {
    run->attn.push_back(bits(att, "attention mask"));
    run->attproj.push_back(bits(NC, "attention projection mask"));
    run->fcproj.push_back(bits(NC, "MLP projection mask"));
  }
  if (in.position() != in.size()) throw std::runtime_error(path + ": bytes after the dropout trailer");
  return r;
}

// ||a - b|| / ||b|| in double.
double rel_l2(const float* a, const double* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    const double d = a[i] - b[i];
    num += d * d;
    den += b[i] * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

class TorchCompare : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (generated_) return;  // once per run: TorchCompareDropout's suite reuses TorchCompare's files
    const std::string cmd = std::string("/usr/bin/python3 test/e2e/torch_reference.py --out ") + kRefDir + " > " +
                            kRefDir + ".log 2>&1";
    make_directories("build/test/e2e");
    generated_ = std::system(cmd.c_str()) == 0;
  }
  void SetUp() override {
    ASSERT_TRUE(generated_) << "PyTorch reference generation failed; see " << kRefDir << ".log";
    ref_ = read_reference(std::string(kRefDir) + "/reference.bin");
    model_file_ = read_model_file(std::string(kRefDir) + "/model.bin");
    std::vector<uint32_t> toks = read_shard(std::string(kRefDir) + "/train.bin");
    const size_t n = static_cast<size_t>(ref_.B) * ref_.T;
    ASSERT_GE(toks.size(), n + 1);
    inputs_.assign(toks.begin(), toks.begin() + n);
    targets_.assign(toks.begin() + 1, toks.begin() + n + 1);
  }
  static bool generated_;
  Reference ref_;
  ModelFile model_file_;
  std::vector<int32_t> inputs_, targets_;
};
bool TorchCompare::generated_ = false;

// The SFT mask (sft_train.mask, written by the reference) applied to this
// fixture's first batch: targets whose token is not supervised become kIgnoreTarget.
std::vector<int32_t> masked_targets(const std::vector<int32_t>& targets) {
  InputFile in(std::string(kRefDir) + "/sft_train.mask");
  std::vector<uint8_t> bytes(kShardHeaderBytes + targets.size() + 1);
  in.read(bytes.data(), bytes.size(), "mask header and first batch");
  std::vector<int32_t> out = targets;
  for (size_t i = 0; i < out.size(); i++)
    if (bytes[kShardHeaderBytes + 1 + i] == 0) out[i] = kIgnoreTarget;  // target i is token i+1
  return out;
}

TEST_F(TorchCompare, LogitsAndLossMatch) {
  auto be = make_cpu_backend(0);
  GPT2 model(*be, model_file_.config, ref_.B, ref_.T);
  model.set_parameters(model_file_.params);
  const float loss = model.forward(inputs_.data(), targets_.data(), ref_.B, ref_.T);
  std::vector<float> logits;
  for (int b = 0; b < ref_.B; b++)
    for (int t = 0; t < ref_.T; t++) {
      std::vector<float> row = model.logits_at(b, t);
      ASSERT_EQ(row.size(), static_cast<size_t>(ref_.V));
      logits.insert(logits.end(), row.begin(), row.end());
    }
  const double err = rel_l2(logits.data(), ref_.logits.data(), logits.size());
  std::printf("logits rel err %.3e, loss %.9f vs %.9f\n", err, loss, ref_.loss);
  EXPECT_LT(err, kRelTol);
  EXPECT_LT(std::fabs(loss - ref_.loss) / ref_.loss, kRelTol);
}

TEST_F(TorchCompare, EveryParameterGradientMatches) {
  auto be = make_cpu_backend(0);
  GPT2 model(*be, model_file_.config, ref_.B, ref_.T);
  model.set_parameters(model_file_.params);
  ASSERT_EQ(model.num_parameters(), ref_.num_params);
  const size_t n = static_cast<size_t>(ref_.B) * ref_.T;
  FlatGrads grads(*be, model);
  train_forward_backward(model, inputs_.data(), targets_.data(), ref_.B, ref_.T, 1.0f / n, grads);
  const std::vector<float> g = grads.download(model.num_parameters());
  const ParamLayout& lay = model.layout();
  for (int t = 0; t < kNumParamTensors; t++) {
    const double err = rel_l2(g.data() + lay.offset[t], ref_.grads.data() + lay.offset[t], lay.numel[t]);
    std::printf("grad %-9s rel err %.3e\n", ParamLayout::name(t), err);
    EXPECT_LT(err, kRelTol) << ParamLayout::name(t);
  }
  // Padded vocabulary rows of wte never receive gradient.
  const size_t C = model_file_.config.channels;
  for (size_t i = static_cast<size_t>(ref_.V) * C; i < lay.numel[kWte]; i++)
    ASSERT_EQ(g[lay.offset[kWte] + i], 0.0f) << "padded wte element " << i;
}

// SFT: PyTorch's cross_entropy(ignore_index=-100) on the same batch. The loss
// is the mean over supervised targets and the gradients match; ignored rows
// contribute nothing.
TEST_F(TorchCompare, MaskedLossAndGradientsMatchIgnoreIndex) {
  const Reference masked = read_reference(std::string(kRefDir) + "/reference_masked.bin");
  const std::vector<int32_t> targets = masked_targets(targets_);
  size_t supervised = 0;
  for (int32_t t : targets) supervised += t != kIgnoreTarget;
  ASSERT_GT(supervised, 0u);
  ASSERT_LT(supervised, targets.size());  // the mask really masks something
  auto be = make_cpu_backend(0);
  GPT2 model(*be, model_file_.config, ref_.B, ref_.T);
  model.set_parameters(model_file_.params);
  FlatGrads grads(*be, model);
  model.train_forward_deferred_loss(inputs_.data(), targets.data(), ref_.B, ref_.T, 1.0f / supervised);
  const LossSum sum = model.collect_train_losses();
  const float loss = static_cast<float>(sum.mean());
  EXPECT_EQ(sum.count, supervised);
  std::printf("masked loss %.9f vs torch %.9f (%zu of %zu targets supervised)\n", loss, masked.loss, supervised,
              targets.size());
  EXPECT_LT(std::fabs(loss - masked.loss) / masked.loss, kRelTol);
  EXPECT_GT(std::fabs(masked.loss - ref_.loss), 1e-3);  // the mask changes the answer
  // Ignored rows have loss exactly 0.
  const std::vector<float> losses = model.losses();
  for (size_t i = 0; i < targets.size(); i++) {
    if (targets[i] != kIgnoreTarget) continue;
    ASSERT_EQ(losses[i], 0.0f) << "position " << i;
  }
  model.backward(grads.tensor());
  const std::vector<float> g = grads.download(model.num_parameters());
  const ParamLayout& lay = model.layout();
  for (int t = 0; t < kNumParamTensors; t++) {
    const double err = rel_l2(g.data() + lay.offset[t], masked.grads.data() + lay.offset[t], lay.numel[t]);
    std::printf("masked grad %-9s rel err %.3e\n", ParamLayout::name(t), err);
    EXPECT_LT(err, kRelTol) << ParamLayout::name(t);
  }
}

// Masked positions contribute exactly zero: with every target ignored, the
// loss is 0 and every parameter gradient is exactly 0.0f.
TEST_F(TorchCompare, AllTargetsIgnoredGivesExactlyZeroGradient) {
  const std::vector<int32_t> none(targets_.size(), kIgnoreTarget);
  auto be = make_cpu_backend(0);
  GPT2 model(*be, model_file_.config, ref_.B, ref_.T);
  model.set_parameters(model_file_.params);
  FlatGrads grads(*be, model);
  model.train_forward_deferred_loss(inputs_.data(), none.data(), ref_.B, ref_.T, 1.0f);
  const LossSum sum = model.collect_train_losses();
  EXPECT_EQ(sum.sum, 0.0);
  EXPECT_EQ(sum.count, 0u);
  model.backward(grads.tensor());
  const std::vector<float> g = grads.download(model.num_parameters());
  for (size_t i = 0; i < g.size(); i++) ASSERT_EQ(g[i], 0.0f) << "gradient element " << i;
}

// One training step (a training forward, the loss as the mean over the B*T
// targets): the loss, the logits and every parameter gradient. The fused
// classifier turns a training forward's logits into dlogits, so the logits come
// from a training forward without targets first (it drops too, with the same
// masks: they are a function of the position, not of the call).
struct Step {
  float loss = 0;
  std::vector<float> logits, grads;
};

Step training_step(Backend& be, GPT2& model, const std::vector<int32_t>& inputs, const std::vector<int32_t>& targets,
                   int B, int T, int V) {
  Step s;
  model.train_forward_deferred_loss(inputs.data(), nullptr, B, T, 0.0f);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      std::vector<float> row = model.logits_at(b, t);
      EXPECT_EQ(row.size(), static_cast<size_t>(V));
      s.logits.insert(s.logits.end(), row.begin(), row.end());
    }
  FlatGrads grads(be, model);
  s.loss = train_forward_backward(model, inputs.data(), targets.data(), B, T, 1.0f / (static_cast<size_t>(B) * T),
                                  grads);
  s.grads = grads.download(model.num_parameters());
  return s;
}

// The largest of the loss's, the logits' and every parameter tensor's relative
// error against `ref` (printed per quantity with `tag`).
double max_rel_err(const Step& s, const Reference& ref, const ParamLayout& lay, const char* tag) {
  double worst = std::fabs(s.loss - ref.loss) / ref.loss;
  std::printf("%s loss %.9f vs torch %.9f rel %.3e\n", tag, s.loss, ref.loss, worst);
  const double lerr = rel_l2(s.logits.data(), ref.logits.data(), ref.logits.size());
  std::printf("%s logits rel err %.3e\n", tag, lerr);
  worst = std::max(worst, lerr);
  for (int t = 0; t < kNumParamTensors; t++) {
    const double err = rel_l2(s.grads.data() + lay.offset[t], ref.grads.data() + lay.offset[t], lay.numel[t]);
    std::printf("%s grad %-9s rel err %.3e\n", tag, ParamLayout::name(t), err);
    worst = std::max(worst, err);
  }
  return worst;
}

class TorchCompareDropout : public TorchCompare {
 protected:
  void SetUp() override {
    TorchCompare::SetUp();
    if (HasFatalFailure()) return;
    const GPT2Config& cfg = model_file_.config;
    dref_ = read_dropout_reference(std::string(kRefDir) + "/reference_dropout.bin", cfg.num_layers, cfg.num_heads,
                                   cfg.channels, &run_);
    // The run exercises what it claims: every site drops, and row 0 is not global token 0.
    ASSERT_GT(run_.rates.embd, 0.0f);
    ASSERT_GT(run_.rates.resid, 0.0f);
    ASSERT_GT(run_.rates.attn, 0.0f);
    ASSERT_GT(run_.token0, 0u);
    // Its batch: the first B*T tokens of train.bin (targets shifted by one), as the script reads them.
    const std::vector<uint32_t> toks = read_shard(std::string(kRefDir) + "/train.bin");
    const size_t n = static_cast<size_t>(dref_.B) * dref_.T;
    ASSERT_GE(toks.size(), n + 1);
    dinputs_.assign(toks.begin(), toks.begin() + n);
    dtargets_.assign(toks.begin() + 1, toks.begin() + n + 1);
  }
  DropoutMask mask(int layer, DropoutMask::Site site, float p) const {
    DropoutMask m;
    m.seed = run_.seed, m.step = run_.step, m.stream = DropoutMask::stream_of(layer, site);
    m.token0 = run_.token0, m.p = p;
    return m;
  }
  Reference dref_;
  DropoutRun run_;
  std::vector<int32_t> dinputs_, dtargets_;
};

// The Python port's masks are util/philox.h's, every element of every site: so
// the comparison below is of the same function, given the same masks. (The
// script checks its Philox against Random123's known answers too.)
TEST_F(TorchCompareDropout, MasksAreUtilPhiloxBitForBit) {
  const int B = dref_.B, T = dref_.T, NH = model_file_.config.num_heads, C = model_file_.config.channels;
  const size_t N = static_cast<size_t>(B) * T;
  auto check_rows = [&](const std::vector<uint8_t>& bits, const DropoutMask& m, const std::string& what) {
    size_t kept = 0;
    for (size_t r = 0; r < N; r++)
      for (int c = 0; c < C; c++) {
        ASSERT_EQ(bits[r * C + c], m.keep(m.token0 + r, c) ? 1 : 0) << what << " row " << r << " column " << c;
        kept += bits[r * C + c];
      }
    EXPECT_GT(kept, 0u) << what;
    EXPECT_LT(kept, N * C) << what;
  };
  check_rows(run_.embd, mask(0, DropoutMask::kEmbedding, run_.rates.embd), "embedding");
  for (int l = 0; l < model_file_.config.num_layers; l++) {
    const std::string at = " layer " + std::to_string(l);
    check_rows(run_.attproj[l], mask(l, DropoutMask::kAttentionProj, run_.rates.resid), "attention projection" + at);
    check_rows(run_.fcproj[l], mask(l, DropoutMask::kMlpProj, run_.rates.resid), "MLP projection" + at);
    const DropoutMask m = mask(l, DropoutMask::kAttentionProbs, run_.rates.attn);
    size_t kept = 0, causal = 0;
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NH; h++)
        for (int t = 0; t < T; t++)
          for (int j = 0; j <= t; j++) {
            const uint8_t bit = run_.attn[l][((static_cast<size_t>(b) * NH + h) * T + t) * T + j];
            ASSERT_EQ(bit, m.keep_attention(m.token0 + static_cast<uint64_t>(b) * T, T, h, t, j) ? 1 : 0)
                << "attention" << at << " b " << b << " h " << h << " t " << t << " j " << j;
            kept += bit, causal++;
          }
    EXPECT_GT(kept, 0u) << at;
    EXPECT_LT(kept, causal) << at;
  }
}

// Training with dropout at all three sites, at a micro-batch whose row 0 is
// global token token0 > 0: the loss, the logits and every gradient match
// PyTorch's float64 forward and autograd with the same masks. The same model at
// token0 = 0 (other masks) is far off: the comparison sees the masks.
TEST_F(TorchCompareDropout, LossLogitsAndEveryGradientMatch) {
  auto be = make_cpu_backend(0);
  GPT2 model(*be, model_file_.config, dref_.B, dref_.T);
  model.set_parameters(model_file_.params);
  ASSERT_EQ(model.num_parameters(), dref_.num_params);
  model.set_dropout(run_.rates, run_.seed);
  model.set_dropout_position(run_.step, run_.token0);
  const Step s = training_step(*be, model, dinputs_, dtargets_, dref_.B, dref_.T, dref_.V);
  const ParamLayout& lay = model.layout();
  EXPECT_LT(max_rel_err(s, dref_, lay, "dropout"), kRelTol);
  const size_t C = model_file_.config.channels;
  for (size_t i = static_cast<size_t>(dref_.V) * C; i < lay.numel[kWte]; i++)
    ASSERT_EQ(s.grads[lay.offset[kWte] + i], 0.0f) << "padded wte element " << i;

  model.set_dropout_position(run_.step, 0);
  const Step other = training_step(*be, model, dinputs_, dtargets_, dref_.B, dref_.T, dref_.V);
  EXPECT_GT(max_rel_err(other, dref_, lay, "token0 0"), 100 * kRelTol);
}

// Rates 0 are no dropout, bit for bit: the dropout-configured model (a seed, a
// step, a token0) gives the plain model's loss, logits and gradients exactly, and
// so reproduces reference.bin within the bound as the plain model does.
TEST_F(TorchCompare, ZeroDropoutRatesAreBitwiseThePlainModel) {
  auto be = make_cpu_backend(0);
  GPT2 plain(*be, model_file_.config, ref_.B, ref_.T);
  plain.set_parameters(model_file_.params);
  const Step want = training_step(*be, plain, inputs_, targets_, ref_.B, ref_.T, ref_.V);
  GPT2 model(*be, model_file_.config, ref_.B, ref_.T);
  model.set_parameters(model_file_.params);
  model.set_dropout(DropoutRates{0.0f, 0.0f, 0.0f}, 0x0123456789ABCDEFull);
  model.set_dropout_position(7, 64);
  const Step got = training_step(*be, model, inputs_, targets_, ref_.B, ref_.T, ref_.V);
  EXPECT_EQ(std::memcmp(&got.loss, &want.loss, sizeof(float)), 0) << got.loss << " vs " << want.loss;
  ASSERT_EQ(got.logits.size(), want.logits.size());
  EXPECT_EQ(std::memcmp(got.logits.data(), want.logits.data(), got.logits.size() * sizeof(float)), 0);
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (size_t i = 0; i < got.grads.size(); i++)
    ASSERT_EQ(std::memcmp(&got.grads[i], &want.grads[i], sizeof(float)), 0)
        << "gradient element " << i << ": " << got.grads[i] << " vs " << want.grads[i];
  EXPECT_LT(max_rel_err(got, ref_, model.layout(), "rates 0"), kRelTol);
}

std::vector<double> read_jsonl_losses(const std::string& path) {
  std::ifstream in(path);
  std::vector<double> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("\"type\":\"train\"") == std::string::npos) continue;
    size_t p = line.find("\"loss\":");
    if (p != std::string::npos) out.push_back(std::strtod(line.c_str() + p + 7, nullptr));
  }
  return out;
}

// Runs ./train_gpt2cu on the reference model for ref.steps steps at the
// reference's hyper-parameters; returns the logged step losses.
std::vector<double> run_trainer(const std::string& name, const std::string& data, const std::string& batch_args,
                                int steps) {
  const std::string dir = kRefDir;
  const std::string log = dir + "/" + name + ".jsonl";
  std::remove(log.c_str());
  const std::string cmd = "./train_gpt2cu --device cpu --model " + dir + "/model.bin --train-data " + dir + "/" +
                          data + " --no-shuffle " + batch_args +
                          " --lr 1e-2 --lr-schedule constant --weight-decay 0.1 --grad-clip 1.0 --max-steps " +
                          std::to_string(steps) + " --val-every 0 --sample-every 0 --log-jsonl " + log + " > " + dir +
                          "/" + name + ".log 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << "trainer failed; see " << dir << "/" << name << ".log";
  return read_jsonl_losses(log);
}

void expect_losses_match(const std::vector<double>& losses, const std::vector<double>& ref) {
  ASSERT_EQ(losses.size(), ref.size());
  for (size_t k = 0; k < ref.size(); k++) {
    const double rel = std::fabs(losses[k] - ref[k]) / ref[k];
    std::printf("step %2zu loss %.9f torch %.9f rel %.2e\n", k + 1, losses[k], ref[k], rel);
    EXPECT_LT(rel, kRelTol) << "step " << k + 1;
  }
}

TEST_F(TorchCompare, TrainerLossesMatchTenAdamWSteps) {
  const std::string bt = "-B " + std::to_string(ref_.B) + " -T " + std::to_string(ref_.T);
  expect_losses_match(run_trainer("train", "train.bin", bt, ref_.steps), ref_.step_losses);
  // The run must have moved: a trainer that never updates would match step 1 only.
  EXPECT_LT(ref_.step_losses.back(), ref_.step_losses.front() - 0.01);
}

// SFT through the trainer: sft_train.bin's mask sidecar turns unsupervised
// targets into ignored ones; 10 AdamW steps match PyTorch's ignore_index run.
// With B halved and 2 micro-batches per step the loss is still normalised by the
// supervised tokens of the whole step (HF's num_items_in_batch), so the same
// reference holds; a per-micro-batch mean would not.
TEST_F(TorchCompare, TrainerMaskedLossesMatchIgnoreIndex) {
  const Reference masked = read_reference(std::string(kRefDir) + "/reference_masked.bin");
  const std::string T = " -T " + std::to_string(ref_.T);
  expect_losses_match(run_trainer("sft", "sft_train.bin", "-B " + std::to_string(ref_.B) + T, ref_.steps),
                      masked.step_losses);
  const std::string accum = "-B " + std::to_string(ref_.B / 2) + T + " --total-batch-tokens " +
                            std::to_string(ref_.B * ref_.T);
  expect_losses_match(run_trainer("sft_accum", "sft_train.bin", accum, ref_.steps), masked.step_losses);
}

}  // namespace
}  // namespace gpt2
