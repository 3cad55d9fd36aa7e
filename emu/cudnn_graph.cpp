// The emulated cuDNN's one engine: fused flash attention (forward and the
// deterministic backward), as cuDNN's graph API describes it to frontends.
//
// Support: a graph is taken when it is the composite SDPA pattern (two
// matmuls, a max and a sum reduction, EXP and a LOG for the stats: the
// forward; five matmuls, EXP and an fp32 [B,H,S,1] stats input: the
// backward) and meets cuDNN's documented rules for fused attention: every
// non-virtual tensor but the fp32 statistics and scalars in bf16 or fp16 (one
// of them), rank 4, the head size a multiple of 8 and at most 128 (the limit
// every architecture shares), stride 1 along the head dimension, declared
// alignment at least 16 bytes, matmul outputs that stay in the graph fp32.
// Anything else: CUDNN_STATUS_NOT_SUPPORTED_* and the reason.
//
// Execution interprets the graph op by op, in fp32 (cuDNN's compute type):
// a tensor holds values of its own data type (a bf16 virtual tensor is
// rounded when written), a matmul rounds an fp32 operand to the graph's
// 16-bit type first (tensor cores take 16-bit operands) and sums its products
// in one fp32 fma chain, k ascending; reductions add in index order. RESHAPE
// is a view of its input's storage through the output's strides (how the
// graph transposes P and dS). The backward's plan asks for one fp32 per row
// of workspace, so the caller's workspace path runs here too.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "emu/cudnn_internal.h"

namespace gpt2 {
namespace emu {
namespace dnn {

int64_t TensorInfo::elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

namespace {

constexpr int64_t kMaxHeadSize = 128;

bool io_type(cudnnDataType_t t) { return t == CUDNN_DATA_BFLOAT16 || t == CUDNN_DATA_HALF; }

// Non-virtual, not by value: a tensor the caller's memory holds.
bool in_memory(const TensorInfo& t) { return !t.is_virtual && !t.by_value; }

Support refuse(cudnnStatus_t status, const std::string& why) {
  Support s;
  s.status = status;
  s.why = "fused attention: " + why;
  return s;
}

// The head axis of a non-virtual matmul operand: the contraction axis when
// both operands are in memory (Q K^T, dO V^T contract over the head size),
// else the free axis (P V, P^T dO, dS^T Q contract over the sequence).
int head_axis(const OpInfo& mm, size_t operand) {
  const bool over_head = in_memory(mm.in[0]) && in_memory(mm.in[1]);
  if (operand == 0) return 3;  // A: [.., M, K]
  return over_head ? 2 : 3;    // B: [.., K, N]
}

bool modelled_mode(cudnnPointwiseMode_t m) {
  switch (m) {
    case CUDNN_POINTWISE_ADD:
    case CUDNN_POINTWISE_SUB:
    case CUDNN_POINTWISE_MUL:
    case CUDNN_POINTWISE_DIV:
    case CUDNN_POINTWISE_EXP:
    case CUDNN_POINTWISE_LOG:
    case CUDNN_POINTWISE_IDENTITY:
    case CUDNN_POINTWISE_CMP_GE:
    case CUDNN_POINTWISE_GEN_INDEX:
    case CUDNN_POINTWISE_BINARY_SELECT: return true;
    default: return false;
  }
}

// A matmul's operands agree: A [.., M, K], B [.., K, N], C [.., M, N].
bool matmul_shapes_agree(const OpInfo& mm) {
  const auto& a = mm.in[0].dims;
  const auto& b = mm.in[1].dims;
  const auto& c = mm.out.dims;
  return a.size() == 4 && b.size() == 4 && c.size() == 4 && a[3] == b[2] && c[2] == a[2] && c[3] == b[3];
}

}  // namespace

Support fused_attention_support(const GraphInfo& g) {
  int matmuls = 0, max_reductions = 0, add_reductions = 0, exps = 0, logs = 0;
  const OpInfo* scores = nullptr;  // the matmul of two in-memory operands: Q K^T
  std::set<int64_t> outputs;
  for (const OpInfo& op : g.ops) outputs.insert(op.out.uid);
  const TensorInfo* stats_in = nullptr;
  for (const OpInfo& op : g.ops) {
    if (op.kind == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) {
      matmuls++;
      if (!matmul_shapes_agree(op)) return refuse(CUDNN_STATUS_NOT_SUPPORTED_SHAPE, "a matmul's shapes disagree");
      if (!scores && in_memory(op.in[0]) && in_memory(op.in[1]) && op.out.is_virtual) scores = &op;
      if (op.out.is_virtual && op.out.type != CUDNN_DATA_FLOAT)
        return refuse(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, "a matmul's virtual output must be fp32");
    } else if (op.kind == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR) {
      (op.reduce == CUDNN_REDUCE_TENSOR_MAX ? max_reductions : add_reductions)++;
    } else if (op.kind == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) {
      if (!modelled_mode(op.mode))
        return refuse(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN, "pointwise mode " + std::to_string(op.mode) +
                                                                    " is not part of the SDPA pattern");
      exps += op.mode == CUDNN_POINTWISE_EXP;
      logs += op.mode == CUDNN_POINTWISE_LOG;
    }
    for (const TensorInfo& t : op.in)
      if (in_memory(t) && t.type == CUDNN_DATA_FLOAT && t.dims.size() == 4 && t.dims[3] == 1 && !outputs.count(t.uid))
        stats_in = &t;
  }
  const bool forward = matmuls == 2 && max_reductions == 1 && add_reductions == 1 && exps == 1 && logs == 1;
  const bool backward = matmuls == 5 && exps == 1 && stats_in != nullptr;
  if (!(forward || backward) || scores == nullptr)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN,
                  "the graph is not the SDPA forward (2 matmuls, max/sum reductions, exp, log) or backward (5 "
                  "matmuls, exp, the fp32 softmax statistics as an input)");
  const TensorInfo& q = scores->in[0];
  if (q.dims.size() != 4) return refuse(CUDNN_STATUS_NOT_SUPPORTED_SHAPE, "Q must be rank 4 (B, H, S, D)");
  const int64_t d = q.dims[3];
  if (d % 8 != 0 || d > kMaxHeadSize)
    return refuse(CUDNN_STATUS_NOT_SUPPORTED_SHAPE, "head size " + std::to_string(d) +
                                                        " is not a multiple of 8 at most " +
                                                        std::to_string(kMaxHeadSize));
  cudnnDataType_t io = q.type;
  for (const OpInfo& op : g.ops) {
    // (tensor, its head axis; -1: a reshape's input, judged where a matmul reads it)
    std::vector<std::pair<const TensorInfo*, int>> tensors;
    for (size_t i = 0; i < op.in.size(); i++)
      tensors.push_back({&op.in[i], op.kind == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR    ? head_axis(op, i)
                                    : op.kind == CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR ? -1
                                                                                            : 3});
    tensors.push_back({&op.out, 3});
    for (const auto& [t, axis] : tensors) {
      if (!in_memory(*t)) continue;
      if (t->dims.size() != 4) return refuse(CUDNN_STATUS_NOT_SUPPORTED_SHAPE, "every tensor must be rank 4");
      if (t->alignment < 16)
        return refuse(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT, "tensor " + std::to_string(t->uid) +
                                                             " declares an alignment under 16 bytes");
      if (t->type == CUDNN_DATA_FLOAT) {
        if (t->dims[3] != 1)
          return refuse(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, "only the softmax statistics may be fp32 (tensor " +
                                                                  std::to_string(t->uid) + ")");
        continue;
      }
      if (!io_type(t->type) || t->type != io)
        return refuse(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, "Q, K, V, O and their gradients must all be bf16 or fp16");
      if (axis >= 0 && t->strides[axis] != 1)
        return refuse(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT, "tensor " + std::to_string(t->uid) +
                                                             " does not have stride 1 along the head dimension");
    }
  }
  Support s;
  if (backward) s.workspace_bytes = static_cast<size_t>(q.dims[0] * q.dims[1] * q.dims[2]) * sizeof(float);
  return s;
}

namespace {

// A tensor's values in logical row-major order over its dims.
struct Values {
  std::vector<int64_t> dims;
  std::vector<float> v;
};

float round_to(cudnnDataType_t t, float x) {
  switch (t) {
    case CUDNN_DATA_BFLOAT16: return __bfloat162float(__float2bfloat16(x));
    case CUDNN_DATA_HALF: return __half2float(__float2half(x));
    case CUDNN_DATA_INT32: return static_cast<float>(static_cast<int32_t>(x));
    case CUDNN_DATA_BOOLEAN: return x != 0.0f ? 1.0f : 0.0f;
    default: return x;
  }
}

float load_elem(cudnnDataType_t t, const void* base, int64_t i) {
  switch (t) {
    case CUDNN_DATA_BFLOAT16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    case CUDNN_DATA_HALF: return __half2float(static_cast<const __half*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

void store_elem(cudnnDataType_t t, void* base, int64_t i, float x) {
  switch (t) {
    case CUDNN_DATA_BFLOAT16: static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16(x); break;
    case CUDNN_DATA_HALF: static_cast<__half*>(base)[i] = __float2half(x); break;
    default: static_cast<float*>(base)[i] = x; break;
  }
}

// Calls f(logical index, multi-index) for every element of dims.
template <class F>
void for_each_index(const std::vector<int64_t>& dims, F&& f) {
  std::vector<int64_t> idx(dims.size(), 0);
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  for (int64_t i = 0; i < n; i++) {
    f(i, idx);
    for (size_t k = dims.size(); k-- > 0;) {
      if (++idx[k] < dims[k]) break;
      idx[k] = 0;
    }
  }
}

int64_t offset(const std::vector<int64_t>& idx, const std::vector<int64_t>& strides) {
  int64_t o = 0;
  for (size_t k = 0; k < idx.size(); k++) o += idx[k] * strides[k];
  return o;
}

// Element of `x` that broadcasts to position idx of a larger tensor.
float at(const Values& x, const std::vector<int64_t>& idx) {
  int64_t o = 0;
  for (size_t k = 0; k < x.dims.size(); k++) o = o * x.dims[k] + (x.dims[k] == 1 ? 0 : idx[k]);
  return x.v[static_cast<size_t>(o)];
}

class Interpreter {
 public:
  Interpreter(const std::map<int64_t, void*>& data, const std::map<int64_t, float>& by_value)
      : data_(data), by_value_(by_value) {}

  void run(const GraphInfo& g) {
    for (const OpInfo& op : g.ops)
      if (op.kind == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR)
        for (const TensorInfo& t : op.in)
          if (in_memory(t) && io_type(t.type)) io_ = t.type;
    std::vector<bool> done(g.ops.size(), false);
    for (size_t finished = 0; finished < g.ops.size();) {
      const size_t before = finished;
      for (size_t i = 0; i < g.ops.size(); i++)
        if (!done[i] && ready(g.ops[i])) {
          run_op(g.ops[i]);
          done[i] = true;
          finished++;
        }
      if (finished == before) throw std::logic_error("emulated cuDNN: the graph has a cycle or an unset input");
    }
  }

 private:
  bool ready(const OpInfo& op) const {
    for (const TensorInfo& t : op.in)
      if (t.is_virtual && !virtuals_.count(t.uid)) return false;
    return true;
  }

  Values load(const TensorInfo& t) const {
    if (t.is_virtual) return virtuals_.at(t.uid);
    Values x{t.dims, {}};
    if (t.by_value) {
      x.v.assign(static_cast<size_t>(t.elements()), by_value_.at(t.uid));
      return x;
    }
    const void* base = data_.at(t.uid);
    x.v.resize(static_cast<size_t>(t.elements()));
    for_each_index(t.dims, [&](int64_t i, const std::vector<int64_t>& idx) {
      x.v[static_cast<size_t>(i)] = load_elem(t.type, base, offset(idx, t.strides));
    });
    return x;
  }

  void store(const TensorInfo& t, Values x) {
    for (float& e : x.v) e = round_to(t.type, e);
    if (t.is_virtual) {
      virtuals_[t.uid] = std::move(x);
      return;
    }
    void* base = data_.at(t.uid);
    for_each_index(t.dims, [&](int64_t i, const std::vector<int64_t>& idx) {
      store_elem(t.type, base, offset(idx, t.strides), x.v[static_cast<size_t>(i)]);
    });
  }

  void run_op(const OpInfo& op) {
    switch (op.kind) {
      case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: return store(op.out, matmul(op));
      case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: return store(op.out, reduce(op));
      case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR: return store(op.out, reshape(op));
      default: return store(op.out, pointwise(op));
    }
  }

  // C[.., m, n] = sum_k A[.., m, k] B[.., k, n], batch dims broadcast.
  Values matmul(const OpInfo& op) const {
    Values a = load(op.in[0]), b = load(op.in[1]);
    for (float& e : a.v) e = round_to(io_, e);  // tensor-core operands
    for (float& e : b.v) e = round_to(io_, e);
    const std::vector<int64_t>& cd = op.out.dims;
    const int64_t K = a.dims[3];
    Values c{cd, std::vector<float>(static_cast<size_t>(op.out.elements()))};
    std::vector<int64_t> ia(4), ib(4);
    for_each_index(cd, [&](int64_t i, const std::vector<int64_t>& idx) {
      float acc = 0.0f;
      ia = {idx[0], idx[1], idx[2], 0};
      ib = {idx[0], idx[1], 0, idx[3]};
      for (int64_t k = 0; k < K; k++) {
        ia[3] = k, ib[2] = k;
        acc = std::fmaf(at(a, ia), at(b, ib), acc);
      }
      c.v[static_cast<size_t>(i)] = acc;
    });
    return c;
  }

  Values reduce(const OpInfo& op) const {
    const Values x = load(op.in[0]);
    const bool is_max = op.reduce == CUDNN_REDUCE_TENSOR_MAX;
    Values y{op.out.dims, std::vector<float>(static_cast<size_t>(op.out.elements()), is_max ? -INFINITY : 0.0f)};
    for_each_index(x.dims, [&](int64_t i, const std::vector<int64_t>& idx) {
      int64_t o = 0;
      for (size_t k = 0; k < y.dims.size(); k++) o = o * y.dims[k] + (y.dims[k] == 1 ? 0 : idx[k]);
      float& r = y.v[static_cast<size_t>(o)];
      const float e = x.v[static_cast<size_t>(i)];
      r = is_max ? std::max(r, e) : r + e;
    });
    return y;
  }

  // Y's elements read from X's storage through Y's strides.
  Values reshape(const OpInfo& op) const {
    const TensorInfo& xt = op.in[0];
    const TensorInfo& yt = op.out;
    Values y{yt.dims, std::vector<float>(static_cast<size_t>(yt.elements()))};
    std::vector<float> storage;
    if (xt.is_virtual) {
      const Values x = load(xt);
      int64_t span = 0;
      for (size_t k = 0; k < xt.dims.size(); k++) span += (xt.dims[k] - 1) * xt.strides[k];
      storage.assign(static_cast<size_t>(span + 1), 0.0f);
      for_each_index(xt.dims, [&](int64_t i, const std::vector<int64_t>& idx) {
        storage[static_cast<size_t>(offset(idx, xt.strides))] = x.v[static_cast<size_t>(i)];
      });
    }
    for_each_index(yt.dims, [&](int64_t i, const std::vector<int64_t>& idx) {
      const int64_t o = offset(idx, yt.strides);
      y.v[static_cast<size_t>(i)] = xt.is_virtual ? storage.at(static_cast<size_t>(o))
                                                  : load_elem(xt.type, data_.at(xt.uid), o);
    });
    return y;
  }

  Values pointwise(const OpInfo& op) const {
    std::vector<Values> in;
    for (const TensorInfo& t : op.in) in.push_back(load(t));
    Values y{op.out.dims, std::vector<float>(static_cast<size_t>(op.out.elements()))};
    for_each_index(y.dims, [&](int64_t i, const std::vector<int64_t>& idx) {
      const float x = at(in[0], idx);
      const float b = in.size() > 1 ? at(in[1], idx) : 0.0f;
      float r = 0.0f;
      switch (op.mode) {
        case CUDNN_POINTWISE_ADD: r = x + b; break;
        case CUDNN_POINTWISE_SUB: r = x - b; break;
        case CUDNN_POINTWISE_MUL: r = x * b; break;
        case CUDNN_POINTWISE_DIV: r = x / b; break;
        case CUDNN_POINTWISE_EXP: r = std::exp(x); break;
        case CUDNN_POINTWISE_LOG: r = std::log(x); break;
        case CUDNN_POINTWISE_IDENTITY: r = x; break;
        case CUDNN_POINTWISE_CMP_GE: r = x >= b ? 1.0f : 0.0f; break;
        case CUDNN_POINTWISE_GEN_INDEX: r = static_cast<float>(idx.at(static_cast<size_t>(op.axis))); break;
        case CUDNN_POINTWISE_BINARY_SELECT: r = at(in.at(2), idx) != 0.0f ? x : b; break;
        default: throw std::logic_error("emulated cuDNN: pointwise mode " + std::to_string(op.mode) + " not modelled");
      }
      y.v[static_cast<size_t>(i)] = r;
    });
    return y;
  }

  const std::map<int64_t, void*>& data_;
  const std::map<int64_t, float>& by_value_;
  std::map<int64_t, Values> virtuals_;
  cudnnDataType_t io_ = CUDNN_DATA_FLOAT;
};

}  // namespace

void run_graph(const GraphInfo& g, const std::map<int64_t, void*>& data, const std::map<int64_t, float>& by_value) {
  Interpreter(data, by_value).run(g);
}

}  // namespace dnn
}  // namespace emu
}  // namespace gpt2
