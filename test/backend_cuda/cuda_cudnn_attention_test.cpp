// cuDNN's fused attention (backend/cuda/cudnn_attention.cpp) through the CUDA
// backend, on the emulator's cuDNN (emu/cudnn.cpp, emu/cudnn_graph.cpp):
// forward and backward per element against the fp64 reference with bf16
// bounds derived for the graph's rounding points (bf16ref::AttentionKernel::
// kCudnn), the same bits in every run order, the refusals of --attention
// cudnn and the fallback of --attention auto.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "emu/control.h"
#include "test/backend/case_util.h"
#include "test/backend_cuda/bf16_reference.h"

namespace gpt2 {
namespace {

using emu::RunOrder;

struct Shape {
  int B, T, C, NH;
  std::string str() const {
    return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) + " NH=" +
           std::to_string(NH);
  }
};

// Head sizes 8 to 128 (cuDNN's multiples of 8), odd T, several B x NH.
const Shape kShapes[] = {{1, 17, 16, 2}, {2, 33, 64, 2}, {1, 65, 128, 2}, {3, 20, 96, 1}, {1, 19, 256, 2},
                         {2, 9, 48, 6}};

std::unique_ptr<Backend> make(bool bf16, CudaAttention kind) {
  CudaBackendOptions o;
  o.bf16 = bf16;
  o.attention = kind;
  return make_cuda_backend(0, o);
}

std::vector<float> bf16_randn(optest::Rng& rng, size_t n, double scale) {
  std::vector<float> v(n);
  for (auto& x : v) x = bf16ref::round_bf16(static_cast<float>(scale * rng.normal()));
  return v;
}

// One forward and backward on fresh device buffers; out and dqkv start as NaN.
struct Result {
  std::vector<float> out, dqkv;
};
Result run(Backend& be, const Shape& s, const std::vector<float>& qkv, const std::vector<float>& dy,
           const DropoutMask& drop = DropoutMask{}) {
  const size_t n = size_t(s.B) * s.T * s.C;
  Tensor tq = be.alloc(3 * n, BufferRole::kActivations), to = be.alloc(n, BufferRole::kActivations);
  Tensor ts = be.alloc(be.attention_saved_numel(s.B, s.T, s.NH), BufferRole::kActivations);
  Tensor td = be.alloc(n, BufferRole::kActivations), tg = be.alloc(3 * n, BufferRole::kActivations);
  Tensor tx = be.alloc(be.attention_scratch_numel(s.B, s.T, s.NH), BufferRole::kScratch);
  be.upload(tq, qkv.data());
  be.upload(td, dy.data());
  const std::vector<float> nan(3 * n, std::numeric_limits<float>::quiet_NaN());
  be.upload(to, nan.data());
  be.upload(tg, nan.data());
  Result r;
  try {
    be.attention_forward({.out = to, .saved = ts, .qkv = tq, .B = s.B, .T = s.T, .C = s.C, .NH = s.NH, .drop = drop});
    be.attention_backward({.dqkv = tg, .scratch = tx, .dout = td, .out = to, .qkv = tq, .saved = ts, .B = s.B, .T = s.T,
                           .C = s.C, .NH = s.NH, .drop = drop});
    r.out.resize(n), r.dqkv.resize(3 * n);
    be.download(r.out.data(), to);
    be.download(r.dqkv.data(), tg);
  } catch (...) {
    for (Tensor t : {tq, to, ts, td, tg, tx}) be.free(t);
    throw;
  }
  for (Tensor t : {tq, to, ts, td, tg, tx}) be.free(t);
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CudnnAttention, MatchesReferencePerElementInEveryRunOrder) {
  auto cudnn = make(true, CudaAttention::kCudnn);
  optest::Rng rng(20261128);
  for (const Shape& s : kShapes) {
    const size_t n = size_t(s.B) * s.T * s.C;
    const std::vector<float> qkv = bf16_randn(rng, 3 * n, 1.0), dy = bf16_randn(rng, n, 1.0);
    const auto ref_out = bf16ref::attention_forward(qkv, s.B, s.T, s.C, s.NH, DropoutMask{},
                                                    bf16ref::AttentionKernel::kCudnn);
    Result first;
    for (RunOrder order : {RunOrder::kForward, RunOrder::kReverse, RunOrder::kRandom}) {
      emu::ScopedRunOrder scoped(order, 7);
      const Result r = run(*cudnn, s, qkv, dy);
      const auto ref_dq = bf16ref::attention_backward(dy, r.out, qkv, s.B, s.T, s.C, s.NH, DropoutMask{},
                                                      bf16ref::AttentionKernel::kCudnn);
      std::string problems;
      EXPECT_EQ(bf16ref::compare(r.out, ref_out[0], s.str() + " out", &problems).failures, 0u) << problems;
      EXPECT_EQ(bf16ref::compare(r.dqkv, ref_dq[0], s.str() + " dqkv", &problems).failures, 0u) << problems;
      if (first.out.empty()) {
        first = r;
      } else {
        EXPECT_TRUE(same_bits(r.out, first.out)) << s.str() << ": out depends on the run order";
        EXPECT_TRUE(same_bits(r.dqkv, first.dqkv)) << s.str() << ": dqkv depends on the run order";
      }
    }
  }
}

// The statistics cuDNN keeps are the flash kernels' lse: either backward reads either forward's.
TEST(CudnnAttention, SavedStatisticsAreTheFlashKernelsLogSumExp) {
  auto cudnn = make(true, CudaAttention::kCudnn);
  auto flash = make(true, CudaAttention::kFlash);
  const Shape s{2, 40, 128, 2};
  optest::Rng rng(7);
  const size_t n = size_t(s.B) * s.T * s.C;
  const std::vector<float> qkv = bf16_randn(rng, 3 * n, 1.0);
  std::vector<float> lse[2];
  int i = 0;
  for (Backend* be : {cudnn.get(), flash.get()}) {
    Tensor tq = be->alloc(3 * n, BufferRole::kActivations), to = be->alloc(n, BufferRole::kActivations);
    Tensor ts = be->alloc(be->attention_saved_numel(s.B, s.T, s.NH), BufferRole::kActivations);
    be->upload(tq, qkv.data());
    be->attention_forward({.out = to, .saved = ts, .qkv = tq, .B = s.B, .T = s.T, .C = s.C, .NH = s.NH,
                           .drop = DropoutMask{}});
    std::vector<float> raw(ts.numel);
    lse[i].resize(size_t(s.B) * s.NH * s.T);
    // saved holds fp32 words in a bf16-typed buffer: read its bytes
    be->download(raw.data(), ts);
    std::vector<uint16_t> halves(ts.numel);
    for (size_t k = 0; k < raw.size(); k++) {
      uint32_t u;
      std::memcpy(&u, &raw[k], 4);
      halves[k] = static_cast<uint16_t>(u >> 16);
    }
    std::memcpy(lse[i].data(), halves.data(), lse[i].size() * sizeof(float));
    for (Tensor t : {tq, to, ts}) be->free(t);
    i++;
  }
  for (size_t k = 0; k < lse[0].size(); k++)
    EXPECT_NEAR(lse[0][k], lse[1][k], 1e-5 * (1 + std::fabs(lse[1][k]))) << "row " << k;
}

TEST(CudnnAttention, ExplicitCudnnRefusesWhatItCannotServe) {
  try {
    make(false, CudaAttention::kCudnn);
    ADD_FAILURE() << "fp32 storage accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bf16"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--attention flash"), std::string::npos) << e.what();
  }
  auto cudnn = make(true, CudaAttention::kCudnn);
  optest::Rng rng(3);
  struct Refusal {
    Shape s;
    float dropout;
    const char* says;
  };
  std::vector<Refusal> refusals = {{{1, 9, 24, 2}, 0.0f, "head size 12"}, {{1, 9, 64, 1}, 0.1f, "flash"}};
  // Above 128 the limit is the architecture's (Hopper takes 256); the emulator models 128.
  if (cuda_emulated()) refusals.push_back({{1, 9, 272, 2}, 0.0f, "head size 136"});
  for (const Refusal& r : refusals) {
    const size_t n = size_t(r.s.B) * r.s.T * r.s.C;
    DropoutMask drop;
    drop.p = r.dropout, drop.seed = 5, drop.stream = DropoutMask::stream_of(0, DropoutMask::kAttentionProbs);
    try {
      run(*cudnn, r.s, bf16_randn(rng, 3 * n, 1.0), bf16_randn(rng, n, 1.0), drop);
      ADD_FAILURE() << r.s.str() << " accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("--attention cudnn"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(r.says), std::string::npos) << e.what();
    }
  }
}

// kAuto runs cuDNN where it serves and the flash kernels elsewhere, bit for bit.
TEST(CudnnAttention, AutoPicksCudnnWhereItServesElseFlash) {
  auto autod = make(true, CudaAttention::kAuto);
  auto cudnn = make(true, CudaAttention::kCudnn);
  auto flash = make(true, CudaAttention::kFlash);
  optest::Rng rng(11);
  const Shape served{1, 33, 64, 2}, unserved{1, 33, 24, 2};  // head sizes 32 and 12
  for (const auto& [s, expected] : {std::make_pair(served, cudnn.get()), std::make_pair(unserved, flash.get())}) {
    const size_t n = size_t(s.B) * s.T * s.C;
    const std::vector<float> qkv = bf16_randn(rng, 3 * n, 1.0), dy = bf16_randn(rng, n, 1.0);
    const Result a = run(*autod, s, qkv, dy);
    const Result want = run(*expected, s, qkv, dy);
    EXPECT_TRUE(same_bits(a.out, want.out)) << s.str();
    EXPECT_TRUE(same_bits(a.dqkv, want.dqkv)) << s.str();
  }
  EXPECT_EQ(cuda_attention_choice(*autod, 4, 64, 768, 12, false).kernel, "cudnn");
  const CudaAttentionChoice odd = cuda_attention_choice(*autod, 4, 64, 60, 5, false);
  EXPECT_EQ(odd.kernel, "flash");
  EXPECT_NE(odd.why.find("head size 12"), std::string::npos) << odd.why;
  const CudaAttentionChoice dropping = cuda_attention_choice(*autod, 4, 64, 768, 12, true);
  EXPECT_EQ(dropping.kernel, "flash");
  EXPECT_NE(dropping.why.find("dropout"), std::string::npos) << dropping.why;
  const CudaAttentionChoice fp32 = cuda_attention_choice(*make(false, CudaAttention::kAuto), 4, 64, 768, 12, false);
  EXPECT_EQ(fp32.kernel, "flash");
  EXPECT_NE(fp32.why.find("bf16"), std::string::npos) << fp32.why;
  EXPECT_EQ(cuda_attention_choice(*cudnn, 4, 64, 60, 5, false).kernel, "");
  EXPECT_NE(cuda_attention_choice(*cudnn, 4, 64, 60, 5, false).refused.find("head size 12"), std::string::npos);
}

// cuDNN needs no attention scratch of ours; auto keeps flash's (it may run flash).
TEST(CudnnAttention, ScratchAndWorkspace) {
  auto cudnn = make(true, CudaAttention::kCudnn);
  auto autod = make(true, CudaAttention::kAuto);
  EXPECT_EQ(cudnn->attention_scratch_numel(2, 64, 4), 0u);
  EXPECT_EQ(autod->attention_scratch_numel(2, 64, 4), make(true, CudaAttention::kFlash)->attention_scratch_numel(2, 64, 4));
  EXPECT_EQ(cuda_memory_report(*cudnn).workspace, cuda_memory_report(*autod).workspace);
  optest::Rng rng(5);
  const Shape s{2, 64, 128, 4};
  const size_t n = size_t(s.B) * s.T * s.C;
  const size_t before = cuda_memory_report(*cudnn).workspace;
  run(*cudnn, s, bf16_randn(rng, 3 * n, 1.0), bf16_randn(rng, n, 1.0));
  // the backward's row sums, then the plan's own (the emulated plan's: one fp32 per row)
  const size_t rows = size_t(s.B) * s.NH * s.T * sizeof(float), grown = cuda_memory_report(*cudnn).workspace - before;
  if (cuda_emulated())
    EXPECT_EQ(grown, 2 * rows);
  else
    EXPECT_GE(grown, rows);
}

}  // namespace
}  // namespace gpt2
