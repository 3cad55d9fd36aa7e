// backend/cuda/cudnn_attention.h over cuDNN's graph API (cudnn_graph.h),
// with small RAII wrappers of our own: Descriptor (create, typed attributes,
// finalize, destroy), Graph (tensors by uid and the operations between them),
// Plan (heuristics mode A, the first engine config whose plan finalizes, its
// workspace size). cuDNN 9.19 has no causal mask on its unified SDPA
// operation, so the graphs are the composite ones frontends build on 9.x:
//
// forward   S = Q K^T (fp32), S *= scale, causal mask (GEN_INDEX row and
//           column, row >= column, BINARY_SELECT with -inf), M = max S,
//           E = exp(S - M), Z = sum E, stats = M + log Z, P = E / Z (bf16),
//           O = P V.
// backward  D = rowsum(dO O) (* 1, into the workspace), S and its mask as
//           above, P = exp(S - stats), dV = P^T dO, dP = dO V^T,
//           dS = P (dP - D) scale, dK = dS^T Q, dQ = dS K. dQ is written
//           by its matmul directly: the deterministic form (no fp32 dQ
//           accumulator updated by several blocks).
// Transposes of virtual tensors (P^T, dS^T) and K's row view are RESHAPE
// operations: the output reads the input's storage through its own strides.
#include <cudnn_graph.h>
#include <cuda_runtime_api.h>
#if GPT2_CUDNN_DLOPEN
#include <dlfcn.h>
#endif

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/cudnn_attention.h"

namespace gpt2 {

namespace {

// The cuDNN entry points this file calls. A GPU build (GPT2_CUDNN_DLOPEN=1)
// loads libcudnn.so.9 at run time, so the trainer starts (and runs flash)
// where cuDNN is not installed; the emulated build calls the emulator's.
struct CudnnApi {
  decltype(&cudnnGetVersion) get_version;
  decltype(&cudnnGetErrorString) error_string;
  decltype(&cudnnCreate) create;
  decltype(&cudnnDestroy) destroy;
  decltype(&cudnnSetStream) set_stream;
  decltype(&cudnnBackendCreateDescriptor) create_descriptor;
  decltype(&cudnnBackendDestroyDescriptor) destroy_descriptor;
  decltype(&cudnnBackendSetAttribute) set_attribute;
  decltype(&cudnnBackendGetAttribute) get_attribute;
  decltype(&cudnnBackendFinalize) finalize;
  decltype(&cudnnBackendExecute) execute;
  std::string missing;  // why the library could not be loaded ("" when loaded)
};

#if GPT2_CUDNN_DLOPEN
template <class F>
void load(void* lib, const char* name, F* f, std::string* missing) {
  *f = reinterpret_cast<F>(dlsym(lib, name));
  if (*f == nullptr && missing->empty()) *missing = std::string("libcudnn has no ") + name;
}
CudnnApi load_api() {
  CudnnApi a{};
  void* lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) lib = dlopen("libcudnn.so", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    a.missing = std::string("cuDNN is not installed here (dlopen libcudnn.so.9: ") + (e ? e : "not found") +
                "; put its lib directory on LD_LIBRARY_PATH)";
    return a;
  }
  load(lib, "cudnnGetVersion", &a.get_version, &a.missing);
  load(lib, "cudnnGetErrorString", &a.error_string, &a.missing);
  load(lib, "cudnnCreate", &a.create, &a.missing);
  load(lib, "cudnnDestroy", &a.destroy, &a.missing);
  load(lib, "cudnnSetStream", &a.set_stream, &a.missing);
  load(lib, "cudnnBackendCreateDescriptor", &a.create_descriptor, &a.missing);
  load(lib, "cudnnBackendDestroyDescriptor", &a.destroy_descriptor, &a.missing);
  load(lib, "cudnnBackendSetAttribute", &a.set_attribute, &a.missing);
  load(lib, "cudnnBackendGetAttribute", &a.get_attribute, &a.missing);
  load(lib, "cudnnBackendFinalize", &a.finalize, &a.missing);
  load(lib, "cudnnBackendExecute", &a.execute, &a.missing);
  return a;
}
#else
CudnnApi load_api() {
  return CudnnApi{&cudnnGetVersion, &cudnnGetErrorString, &cudnnCreate, &cudnnDestroy, &cudnnSetStream,
                  &cudnnBackendCreateDescriptor, &cudnnBackendDestroyDescriptor, &cudnnBackendSetAttribute,
                  &cudnnBackendGetAttribute, &cudnnBackendFinalize, &cudnnBackendExecute, ""};
}
#endif

// Loaded once (a function-local static: thread-safe, no mutable global).
const CudnnApi& api() {
  static const CudnnApi a = load_api();
  return a;
}

struct CudnnError : std::runtime_error {
  CudnnError(const std::string& what, cudnnStatus_t s)
      : std::runtime_error("cuDNN: " + what + ": " + api().error_string(s)), status(s) {}
  cudnnStatus_t status;
};

void check(cudnnStatus_t s, const std::string& what) {
  if (s != CUDNN_STATUS_SUCCESS) throw CudnnError(what, s);
}

class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type) {
    check(api().create_descriptor(type, &d_), "creating a descriptor");
  }
  ~Descriptor() {
    if (d_ != nullptr) api().destroy_descriptor(d_);
  }
  Descriptor(Descriptor&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  Descriptor& operator=(Descriptor&&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }

  template <class T>
  Descriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const std::vector<T>& v) {
    check(api().set_attribute(d_, name, type, static_cast<int64_t>(v.size()), v.data()),
          "setting attribute " + std::to_string(name));
    return *this;
  }
  Descriptor& set(cudnnBackendAttributeName_t name, int64_t v) { return set(name, CUDNN_TYPE_INT64, std::vector<int64_t>{v}); }
  Descriptor& set(cudnnBackendAttributeName_t name, const std::vector<int64_t>& v) { return set(name, CUDNN_TYPE_INT64, v); }
  Descriptor& set(cudnnBackendAttributeName_t name, cudnnDataType_t v) {
    return set(name, CUDNN_TYPE_DATA_TYPE, std::vector<cudnnDataType_t>{v});
  }
  Descriptor& set(cudnnBackendAttributeName_t name, bool v) {  // CUDNN_TYPE_BOOLEAN is a C bool
    check(api().set_attribute(d_, name, CUDNN_TYPE_BOOLEAN, 1, &v), "setting attribute " + std::to_string(name));
    return *this;
  }
  Descriptor& set(cudnnBackendAttributeName_t name, const Descriptor& v) {
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, std::vector<cudnnBackendDescriptor_t>{v.get()});
  }
  Descriptor& finalize(const std::string& what) {
    check(api().finalize(d_), "finalizing " + what);
    return *this;
  }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

struct Plan {
  Descriptor plan;
  int64_t workspace = 0;
};

// Tensor uids of the graphs; virtual tensors count up from kFirstVirtual.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kRowSum, kScale, kNegInf, kOne, kFirstVirtual = 100 };

// A graph under construction: its tensors by uid, its operations in order.
class Graph {
 public:
  Graph(cudnnHandle_t handle, int B, int T, int NH, int HS) : handle_(handle), B_(B), T_(T), NH_(NH), HS_(HS) {}

  // A tensor in memory (or a by-value scalar) with its own uid.
  int64_t tensor(int64_t uid, std::vector<int64_t> dims, std::vector<int64_t> strides, cudnnDataType_t type,
                 bool by_value = false) {
    add(uid, std::move(dims), std::move(strides), type, false, by_value);
    return uid;
  }
  // The packed qkv's part (0 q, 1 k, 2 v) as [B, NH, T, HS], or transposed [B, NH, HS, T].
  int64_t packed(int64_t uid, bool transposed, cudnnDataType_t type = CUDNN_DATA_BFLOAT16) {
    const int64_t C3 = 3LL * NH_ * HS_, batch = C3 * T_;
    if (transposed) return tensor(uid, {B_, NH_, HS_, T_}, {batch, HS_, 1, C3}, type);
    return tensor(uid, {B_, NH_, T_, HS_}, {batch, HS_, C3, 1}, type);
  }
  // out / dout [B, T, NH, HS] as [B, NH, T, HS].
  int64_t rows(int64_t uid) {
    const int64_t C = int64_t{NH_} * HS_;
    return tensor(uid, {B_, NH_, T_, HS_}, {C * T_, HS_, C, 1}, CUDNN_DATA_BFLOAT16);
  }
  // One fp32 per row: [B, NH, T, 1].
  int64_t per_row(int64_t uid, bool is_virtual = false) {
    add(uid, {B_, NH_, T_, 1}, {int64_t{NH_} * T_, T_, 1, 1}, CUDNN_DATA_FLOAT, is_virtual, false);
    return uid;
  }
  int64_t scalar(int64_t uid) { return tensor(uid, {1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, true); }
  // A virtual [B, NH, T, T] (or [B, NH, T, 1]) tensor, row-major unless `transposed`.
  int64_t scores(cudnnDataType_t type = CUDNN_DATA_FLOAT, bool transposed = false) {
    const int64_t TT = int64_t{T_} * T_;
    const int64_t uid = next_++;
    add(uid, {B_, NH_, T_, T_}, transposed ? std::vector<int64_t>{NH_ * TT, TT, 1, T_}
                                           : std::vector<int64_t>{NH_ * TT, TT, T_, 1},
        type, true, false);
    return uid;
  }
  int64_t row_virtual() { return per_row(next_++, true); }
  // A virtual fp32 [B, NH, T, HS].
  int64_t head_virtual() {
    const int64_t uid = next_++;
    add(uid, {B_, NH_, T_, HS_}, {int64_t{NH_} * T_ * HS_, int64_t{T_} * HS_, HS_, 1}, CUDNN_DATA_FLOAT, true, false);
    return uid;
  }
  // K (a [B, NH, HS, T] view in memory) read as [B, NH, T, HS], virtual.
  int64_t key_rows(int64_t kt) {
    const int64_t C3 = 3LL * NH_ * HS_;
    const int64_t uid = next_++;
    add(uid, {B_, NH_, T_, HS_}, {C3 * T_, HS_, C3, 1}, CUDNN_DATA_FLOAT, true, false);
    reshape(kt, uid);
    return uid;
  }

  void matmul(int64_t a, int64_t b, int64_t c) {
    Descriptor mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT).finalize("a matmul");
    Descriptor op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, t(a)).set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, t(b));
    op.set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, t(c)).set(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
    ops_.push_back(std::move(op.finalize("a matmul operation")));
  }
  // y = mode(x[, b[, t]]); GEN_INDEX takes `axis`. Returns y.
  int64_t pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t y, int64_t b = 0, int64_t sel = 0,
                    int64_t axis = -1) {
    Descriptor pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, std::vector<cudnnPointwiseMode_t>{mode});
    pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, mode == CUDNN_POINTWISE_CMP_GE ? CUDNN_DATA_BOOLEAN : CUDNN_DATA_FLOAT);
    if (axis >= 0) pw.set(CUDNN_ATTR_POINTWISE_AXIS, axis);
    pw.finalize("a pointwise descriptor");
    Descriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw).set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, t(x));
    if (b != 0) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, t(b));
    if (sel != 0) op.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t(sel));
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, t(y));
    ops_.push_back(std::move(op.finalize("a pointwise operation")));
    return y;
  }
  // y = reduce(x) over the axes where y has extent 1.
  int64_t reduce(cudnnReduceTensorOp_t how, int64_t x, int64_t y) {
    Descriptor r(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, std::vector<cudnnReduceTensorOp_t>{how});
    r.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT).finalize("a reduction descriptor");
    Descriptor op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r).set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, t(x));
    op.set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, t(y));
    ops_.push_back(std::move(op.finalize("a reduction operation")));
    return y;
  }
  void reshape(int64_t x, int64_t y) {
    Descriptor op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, t(x)).set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, t(y));
    ops_.push_back(std::move(op.finalize("a reshape operation")));
  }

  // scale * (Q K^T) with the causal mask (-inf above the diagonal).
  int64_t masked_scores(int64_t q, int64_t kt) {
    const int64_t s = scores();
    matmul(q, kt, s);
    const int64_t scaled = pointwise(CUDNN_POINTWISE_MUL, s, scores(), scalar(kScale));
    const int64_t row = pointwise(CUDNN_POINTWISE_GEN_INDEX, scaled, scores(CUDNN_DATA_INT32), 0, 0, 2);
    const int64_t col = pointwise(CUDNN_POINTWISE_GEN_INDEX, scaled, scores(CUDNN_DATA_INT32), 0, 0, 3);
    const int64_t keep = pointwise(CUDNN_POINTWISE_CMP_GE, row, scores(CUDNN_DATA_BOOLEAN), col);
    return pointwise(CUDNN_POINTWISE_BINARY_SELECT, scaled, scores(), scalar(kNegInf), keep);
  }

  // The operation graph, heuristics mode A, and the first engine config whose
  // plan finalizes. Throws CudnnError (NOT_SUPPORTED when no engine takes it).
  Plan plan() {
    Descriptor g(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    std::vector<cudnnBackendDescriptor_t> ops;
    for (const Descriptor& op : ops_) ops.push_back(op.get());
    g.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops);
    g.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, std::vector<cudnnHandle_t>{handle_});
    g.finalize("the operation graph");
    Descriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, g);
    heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, std::vector<cudnnBackendHeurMode_t>{CUDNN_HEUR_MODE_A});
    heur.finalize("the engine heuristics");
    int64_t count = 0;
    check(api().get_attribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                   nullptr),
          "counting the heuristics' engine configs");
    if (count == 0) throw CudnnError("no engine takes the graph", CUDNN_STATUS_NOT_SUPPORTED);
    std::vector<Descriptor> configs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; i++) {
      configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      raw.push_back(configs.back().get());
    }
    check(api().get_attribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                   &count, raw.data()),
          "reading the heuristics' engine configs");
    cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
    for (int64_t i = 0; i < count; i++) {
      Descriptor p(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      p.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, std::vector<cudnnHandle_t>{handle_});
      p.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[static_cast<size_t>(i)]);
      last = api().finalize(p.get());
      if (last != CUDNN_STATUS_SUCCESS) continue;
      int64_t n = 0, workspace = 0;
      check(api().get_attribute(p.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                     &workspace),
            "reading the plan's workspace size");
      return Plan{std::move(p), workspace};
    }
    throw CudnnError("no engine config of " + std::to_string(count) + " finalizes a plan", last);
  }

 private:
  void add(int64_t uid, std::vector<int64_t> dims, std::vector<int64_t> strides, cudnnDataType_t type,
           bool is_virtual, bool by_value) {
    if (tensors_.count(uid)) return;  // K^T and V^T: one tensor per uid
    Descriptor d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, type).set(CUDNN_ATTR_TENSOR_DIMENSIONS, dims);
    d.set(CUDNN_ATTR_TENSOR_STRIDES, strides).set(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid);
    d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, int64_t{16});
    if (is_virtual) d.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, true);
    if (by_value) d.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, true);
    tensors_.emplace(uid, std::move(d.finalize("tensor " + std::to_string(uid))));
  }
  const Descriptor& t(int64_t uid) const { return tensors_.at(uid); }

  cudnnHandle_t handle_;
  int64_t B_, T_, NH_, HS_;
  int64_t next_ = kFirstVirtual;
  std::map<int64_t, Descriptor> tensors_;
  std::vector<Descriptor> ops_;
};

Plan forward_plan(cudnnHandle_t h, int B, int T, int NH, int HS) {
  Graph g(h, B, T, NH, HS);
  const int64_t q = g.packed(kQ, false), kt = g.packed(kK, true), v = g.packed(kV, false);
  const int64_t s = g.masked_scores(q, kt);
  const int64_t m = g.reduce(CUDNN_REDUCE_TENSOR_MAX, s, g.row_virtual());
  const int64_t e = g.pointwise(CUDNN_POINTWISE_EXP, g.pointwise(CUDNN_POINTWISE_SUB, s, g.scores(), m), g.scores());
  const int64_t z = g.reduce(CUDNN_REDUCE_TENSOR_ADD, e, g.row_virtual());
  const int64_t log_z = g.pointwise(CUDNN_POINTWISE_LOG, z, g.row_virtual());
  g.pointwise(CUDNN_POINTWISE_ADD, m, g.per_row(kStats), log_z);
  const int64_t p = g.pointwise(CUDNN_POINTWISE_DIV, e, g.scores(CUDNN_DATA_BFLOAT16), z);  // P V reads bf16 P
  g.matmul(p, v, g.rows(kO));
  return g.plan();
}

Plan backward_plan(cudnnHandle_t h, int B, int T, int NH, int HS) {
  Graph g(h, B, T, NH, HS);
  const int64_t q = g.packed(kQ, false), kt = g.packed(kK, true), vt = g.packed(kV, true);
  const int64_t out = g.rows(kO), dout = g.rows(kDO), stats = g.per_row(kStats);
  // D = rowsum(dO O), times 1 (the attention-dropout rescale frontends emit), kept in the workspace
  const int64_t prod = g.pointwise(CUDNN_POINTWISE_MUL, dout, g.head_virtual(), out);
  const int64_t d = g.pointwise(CUDNN_POINTWISE_MUL, g.reduce(CUDNN_REDUCE_TENSOR_ADD, prod, g.row_virtual()),
                                g.per_row(kRowSum), g.scalar(kOne));
  const int64_t s = g.masked_scores(q, kt);
  const int64_t p = g.pointwise(CUDNN_POINTWISE_EXP, g.pointwise(CUDNN_POINTWISE_SUB, s, g.scores(), stats), g.scores());
  const int64_t pt = g.scores(CUDNN_DATA_BFLOAT16, true);
  g.reshape(p, pt);
  g.matmul(pt, dout, g.packed(kDV, false));
  const int64_t dp = g.scores();
  g.matmul(dout, vt, dp);
  const int64_t ds0 = g.pointwise(CUDNN_POINTWISE_MUL, g.pointwise(CUDNN_POINTWISE_SUB, dp, g.scores(), d), g.scores(), p);
  const int64_t ds = g.pointwise(CUDNN_POINTWISE_MUL, ds0, g.scores(), g.scalar(kScale));
  const int64_t dst = g.scores(CUDNN_DATA_BFLOAT16, true);
  g.reshape(ds, dst);
  g.matmul(dst, q, g.packed(kDK, false));
  g.matmul(ds, g.key_rows(kt), g.packed(kDQ, false));  // straight into dQ: deterministic
  return g.plan();
}

// One shape's plans, or why cuDNN refused it.
struct ShapePlans {
  std::unique_ptr<Plan> forward, backward;
  std::string refused;
};

class CudnnAttentionImpl final : public CudnnAttention {
 public:
  explicit CudnnAttentionImpl(cudaStream_t stream) {
    check(api().create(&handle_), "cudnnCreate");
    const cudnnStatus_t s = api().set_stream(handle_, stream);
    if (s != CUDNN_STATUS_SUCCESS) {
      api().destroy(handle_);
      throw CudnnError("cudnnSetStream", s);
    }
  }
  ~CudnnAttentionImpl() override {
    plans_.clear();
    if (workspace_ != nullptr) cudaFree(workspace_);
    api().destroy(handle_);
  }

  std::string prepare(int B, int T, int NH, int HS) override {
    const auto key = std::make_tuple(B, T, NH, HS);
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second.refused;
    ShapePlans& p = plans_[key];
    if (HS % 8 != 0) {  // documented for every architecture; the rest is the library's to judge
      p.refused = "head size " + std::to_string(HS) + " is not a multiple of 8";
      return p.refused;
    }
    try {
      p.forward = std::make_unique<Plan>(forward_plan(handle_, B, T, NH, HS));
      p.backward = std::make_unique<Plan>(backward_plan(handle_, B, T, NH, HS));
    } catch (const CudnnError& e) {
      p.forward.reset(), p.backward.reset();
      p.refused = "head size " + std::to_string(HS) + " (B=" + std::to_string(B) + " T=" + std::to_string(T) +
                  " NH=" + std::to_string(NH) + ") refused: " + e.what();
    }
    return p.refused;
  }

  void forward(void* out, float* stats, const void* qkv, int B, int T, int NH, int HS) override {
    const Plan& plan = *ready(B, T, NH, HS).forward;
    scale_ = 1.0f / std::sqrt(static_cast<float>(HS));
    const size_t C = static_cast<size_t>(NH) * HS;
    const auto* base = static_cast<const char*>(qkv);
    void* ws = grow(static_cast<size_t>(plan.workspace));
    execute(plan.plan, {kQ, kK, kV, kO, kStats, kScale, kNegInf},
            {const_cast<char*>(base), const_cast<char*>(base + 2 * C), const_cast<char*>(base + 4 * C), out, stats,
             &scale_, &neg_inf_},
            ws);
  }

  void backward(void* dqkv, const void* dout, const void* out, const void* qkv, const float* stats, int B, int T,
                int NH, int HS) override {
    const Plan& plan = *ready(B, T, NH, HS).backward;
    scale_ = 1.0f / std::sqrt(static_cast<float>(HS));
    const size_t C = static_cast<size_t>(NH) * HS, rows = cudnn_row_sum_bytes(B, T, NH);
    auto* ws = static_cast<char*>(grow(rows + static_cast<size_t>(plan.workspace)));
    auto* base = const_cast<char*>(static_cast<const char*>(qkv));
    auto* grad = static_cast<char*>(dqkv);
    execute(plan.plan,
            {kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kRowSum, kScale, kNegInf, kOne},
            {base, base + 2 * C, base + 4 * C, const_cast<void*>(out), const_cast<void*>(dout),
             const_cast<float*>(stats), grad, grad + 2 * C, grad + 4 * C, ws, &scale_, &neg_inf_, &one_},
            ws + rows);
  }

  size_t workspace_bytes() const override { return workspace_size_; }

 private:
  const ShapePlans& ready(int B, int T, int NH, int HS) {
    const std::string why = prepare(B, T, NH, HS);
    if (!why.empty()) throw std::runtime_error(why);
    return plans_.at(std::make_tuple(B, T, NH, HS));
  }

  // The workspace, grown to `bytes` (cudaFree waits for the work queued on it).
  void* grow(size_t bytes) {
    if (bytes <= workspace_size_) return workspace_;
    if (workspace_ != nullptr) cudaFree(workspace_);
    workspace_ = nullptr, workspace_size_ = 0;
    const cudaError_t s = cudaMalloc(&workspace_, bytes);
    if (s != cudaSuccess) {
      cudaGetLastError();
      workspace_ = nullptr;
      throw std::runtime_error("cuDNN attention's workspace: cudaMalloc of " + std::to_string(bytes) +
                               " bytes failed: " + cudaGetErrorString(s));
    }
    workspace_size_ = bytes;
    return workspace_;
  }

  void execute(const Descriptor& plan, std::vector<int64_t> uids, std::vector<void*> ptrs, void* workspace) {
    Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, uids);
    pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs);
    pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, std::vector<void*>{workspace});
    pack.finalize("the variant pack");
    check(api().execute(handle_, plan.get(), pack.get()), "cudnnBackendExecute");
  }

  cudnnHandle_t handle_ = nullptr;
  std::map<std::tuple<int, int, int, int>, ShapePlans> plans_;
  void* workspace_ = nullptr;
  size_t workspace_size_ = 0;
  // By-value scalars: cuDNN reads them from host memory at execute.
  float scale_ = 1.0f, neg_inf_ = -std::numeric_limits<float>::infinity(), one_ = 1.0f;
};

}  // namespace

bool cudnn_attention_built() { return true; }

std::string cudnn_attention_version() {
  if (!api().missing.empty()) return api().missing;
  const size_t v = api().get_version();
  return "cuDNN " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

std::unique_ptr<CudnnAttention> make_cudnn_attention(void* stream) {
  if (!api().missing.empty()) throw std::runtime_error(api().missing);
  return std::make_unique<CudnnAttentionImpl>(static_cast<cudaStream_t>(stream));
}


}  // namespace gpt2
