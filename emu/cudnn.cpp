// cuDNN's graph (backend) API for the emulator, implemented against the
// toolkit's own declarations (cudnn_graph.h) so host code runs unchanged.
//
// Modelled: the descriptors the project's fused attention builds (tensor,
// pointwise, matmul, reduction, reshape and their operations, the operation
// graph, engine heuristics, engine, engine config, execution plan, variant
// pack), each attribute with the type cuDNN's documentation gives it
// (CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE otherwise), finalisation with
// cuDNN's rules (required attributes; referenced descriptors finalized first,
// else CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED), and execution on the handle's
// stream. Which graphs an engine takes is emu/cudnn_graph.cpp's: the fused
// attention rules; every other graph gets no engine from the heuristics and
// CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN from an engine or plan.
//
// A descriptor-valued attribute is copied when set (its value, not the
// handle), so destroying a tensor after building its operation is safe, as in
// cuDNN. The emulated version is the toolkit header's.
#include <cudnn_graph.h>

#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "emu/cudnn_internal.h"
#include "emu/runtime_internal.h"

struct cudnnContext {
  cudaStream_t stream = nullptr;
};

namespace gpt2 {
namespace emu {
namespace dnn {
namespace {

constexpr uint32_t kMagic = 0xd11d0e5u;

struct Descriptor;
using Snapshot = std::shared_ptr<const Descriptor>;

// One attribute as set: its type and its elements (descriptors as snapshots).
struct Attr {
  cudnnBackendAttributeType_t type = CUDNN_TYPE_INT64;
  std::vector<unsigned char> bytes;
  std::vector<Snapshot> descs;
  int64_t count = 0;
};

struct Descriptor {
  uint32_t magic = kMagic;
  cudnnBackendDescriptorType_t type;
  bool finalized = false;
  std::map<int, Attr> attrs;
  // What finalisation derived.
  TensorInfo tensor;
  OpInfo op;
  GraphInfo graph;
  Support support;
  cudnnHandle_t handle = nullptr;
  explicit Descriptor(cudnnBackendDescriptorType_t t) : type(t) {}
};

size_t element_bytes(cudnnBackendAttributeType_t t) {
  switch (t) {
    case CUDNN_TYPE_HANDLE: return sizeof(cudnnHandle_t);
    case CUDNN_TYPE_DATA_TYPE: return sizeof(cudnnDataType_t);
    case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
    case CUDNN_TYPE_INT64: return sizeof(int64_t);
    case CUDNN_TYPE_FLOAT: return sizeof(float);
    case CUDNN_TYPE_DOUBLE: return sizeof(double);
    case CUDNN_TYPE_VOID_PTR: return sizeof(void*);
    case CUDNN_TYPE_HEUR_MODE: return sizeof(cudnnBackendHeurMode_t);
    case CUDNN_TYPE_POINTWISE_MODE: return sizeof(cudnnPointwiseMode_t);
    case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(cudnnBackendDescriptor_t);
    case CUDNN_TYPE_REDUCTION_OPERATOR_TYPE: return sizeof(cudnnReduceTensorOp_t);
    default: return 0;
  }
}

struct AttrRule {
  cudnnBackendDescriptorType_t owner;
  cudnnBackendAttributeType_t type;
};

// Each modelled attribute: the descriptor it belongs to and its type.
const std::map<int, AttrRule>& attr_rules() {
  static const std::map<int, AttrRule> rules = {
      {CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_TYPE_INT64}},
      {CUDNN_ATTR_TENSOR_DATA_TYPE, {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_TYPE_DATA_TYPE}},
      {CUDNN_ATTR_TENSOR_DIMENSIONS, {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_TYPE_INT64}},
      {CUDNN_ATTR_TENSOR_STRIDES, {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_TYPE_INT64}},
      {CUDNN_ATTR_TENSOR_UNIQUE_ID, {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_TYPE_INT64}},
      {CUDNN_ATTR_TENSOR_IS_VIRTUAL, {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_TYPE_BOOLEAN}},
      {CUDNN_ATTR_TENSOR_IS_BY_VALUE, {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_TYPE_BOOLEAN}},
      {CUDNN_ATTR_POINTWISE_MODE, {CUDNN_BACKEND_POINTWISE_DESCRIPTOR, CUDNN_TYPE_POINTWISE_MODE}},
      {CUDNN_ATTR_POINTWISE_MATH_PREC, {CUDNN_BACKEND_POINTWISE_DESCRIPTOR, CUDNN_TYPE_DATA_TYPE}},
      {CUDNN_ATTR_POINTWISE_AXIS, {CUDNN_BACKEND_POINTWISE_DESCRIPTOR, CUDNN_TYPE_INT64}},
      {CUDNN_ATTR_MATMUL_COMP_TYPE, {CUDNN_BACKEND_MATMUL_DESCRIPTOR, CUDNN_TYPE_DATA_TYPE}},
      {CUDNN_ATTR_REDUCTION_OPERATOR, {CUDNN_BACKEND_REDUCTION_DESCRIPTOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE}},
      {CUDNN_ATTR_REDUCTION_COMP_TYPE, {CUDNN_BACKEND_REDUCTION_DESCRIPTOR, CUDNN_TYPE_DATA_TYPE}},
      {CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
       {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR}},
      {CUDNN_ATTR_OPERATION_POINTWISE_XDESC, {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR}},
      {CUDNN_ATTR_OPERATION_POINTWISE_BDESC, {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR}},
      {CUDNN_ATTR_OPERATION_POINTWISE_YDESC, {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR}},
      {CUDNN_ATTR_OPERATION_POINTWISE_TDESC, {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR}},
      {CUDNN_ATTR_OPERATION_MATMUL_ADESC, {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR}},
      {CUDNN_ATTR_OPERATION_MATMUL_BDESC, {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR}},
      {CUDNN_ATTR_OPERATION_MATMUL_CDESC, {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR}},
      {CUDNN_ATTR_OPERATION_MATMUL_DESC, {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR}},
      {CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
       {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR}},
      {CUDNN_ATTR_OPERATION_REDUCTION_YDESC,
       {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR}},
      {CUDNN_ATTR_OPERATION_REDUCTION_DESC, {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR}},
      {CUDNN_ATTR_OPERATION_RESHAPE_XDESC, {CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR}},
      {CUDNN_ATTR_OPERATION_RESHAPE_YDESC, {CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR}},
      {CUDNN_ATTR_OPERATIONGRAPH_HANDLE, {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_TYPE_HANDLE}},
      {CUDNN_ATTR_OPERATIONGRAPH_OPS, {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR}},
      {CUDNN_ATTR_ENGINEHEUR_MODE, {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_TYPE_HEUR_MODE}},
      {CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR}},
      {CUDNN_ATTR_ENGINEHEUR_RESULTS, {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR}},
      {CUDNN_ATTR_ENGINE_OPERATION_GRAPH, {CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR}},
      {CUDNN_ATTR_ENGINE_GLOBAL_INDEX, {CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_TYPE_INT64}},
      {CUDNN_ATTR_ENGINECFG_ENGINE, {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR}},
      {CUDNN_ATTR_EXECUTION_PLAN_HANDLE, {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_TYPE_HANDLE}},
      {CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR}},
      {CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_TYPE_INT64}},
      {CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_TYPE_INT64}},
      {CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_TYPE_VOID_PTR}},
      {CUDNN_ATTR_VARIANT_PACK_WORKSPACE, {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_TYPE_VOID_PTR}},
  };
  return rules;
}

Descriptor* as_desc(cudnnBackendDescriptor_t d) {
  auto* p = static_cast<Descriptor*>(d);
  return p != nullptr && p->magic == kMagic ? p : nullptr;
}

const Attr* find(const Descriptor& d, int name) {
  const auto it = d.attrs.find(name);
  return it == d.attrs.end() ? nullptr : &it->second;
}
template <class T>
std::vector<T> values(const Attr& a) {
  std::vector<T> v(static_cast<size_t>(a.count));
  if (!v.empty()) std::memcpy(v.data(), a.bytes.data(), v.size() * sizeof(T));
  return v;
}
template <class T>
bool one(const Descriptor& d, int name, T* out) {
  const Attr* a = find(d, name);
  if (a == nullptr || a->count != 1) return false;
  std::memcpy(out, a->bytes.data(), sizeof(T));
  return true;
}
const Descriptor* desc_attr(const Descriptor& d, int name, size_t i = 0) {
  const Attr* a = find(d, name);
  return a == nullptr || i >= a->descs.size() ? nullptr : a->descs[i].get();
}

cudnnStatus_t finalize_tensor(Descriptor& d) {
  TensorInfo& t = d.tensor;
  const Attr* dims = find(d, CUDNN_ATTR_TENSOR_DIMENSIONS);
  const Attr* strides = find(d, CUDNN_ATTR_TENSOR_STRIDES);
  if (dims == nullptr || strides == nullptr || !one(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, &t.uid) ||
      !one(d, CUDNN_ATTR_TENSOR_DATA_TYPE, &t.type) || !one(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, &t.alignment))
    return CUDNN_STATUS_BAD_PARAM;
  t.dims = values<int64_t>(*dims);
  t.strides = values<int64_t>(*strides);
  if (t.dims.empty() || t.dims.size() != t.strides.size() || t.dims.size() > CUDNN_DIM_MAX) return CUDNN_STATUS_BAD_PARAM;
  for (size_t i = 0; i < t.dims.size(); i++)
    if (t.dims[i] <= 0 || t.strides[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
  one(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, &t.is_virtual);
  one(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, &t.by_value);
  if (t.is_virtual && t.by_value) return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}

// An operation's tensors by attribute, in OpInfo's role order; a missing
// optional one ends the list.
cudnnStatus_t take_tensors(Descriptor& d, std::initializer_list<int> inputs, size_t required, int output) {
  for (int name : inputs) {
    const Descriptor* t = desc_attr(d, name);
    if (t == nullptr) break;
    d.op.in.push_back(t->tensor);
  }
  const Descriptor* y = desc_attr(d, output);
  if (d.op.in.size() < required || y == nullptr) return CUDNN_STATUS_BAD_PARAM;
  d.op.out = y->tensor;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_operation(Descriptor& d) {
  OpInfo& op = d.op;
  op.kind = d.type;
  switch (d.type) {
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: {
      const Descriptor* pw = desc_attr(d, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR);
      if (pw == nullptr) return CUDNN_STATUS_BAD_PARAM;
      op.mode = pw->op.mode, op.axis = pw->op.axis, op.compute = pw->op.compute;
      return take_tensors(d, {CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
                              CUDNN_ATTR_OPERATION_POINTWISE_TDESC}, 1, CUDNN_ATTR_OPERATION_POINTWISE_YDESC);
    }
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: {
      const Descriptor* mm = desc_attr(d, CUDNN_ATTR_OPERATION_MATMUL_DESC);
      if (mm == nullptr) return CUDNN_STATUS_BAD_PARAM;
      op.compute = mm->op.compute;
      return take_tensors(d, {CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_ATTR_OPERATION_MATMUL_BDESC}, 2,
                          CUDNN_ATTR_OPERATION_MATMUL_CDESC);
    }
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: {
      const Descriptor* r = desc_attr(d, CUDNN_ATTR_OPERATION_REDUCTION_DESC);
      if (r == nullptr) return CUDNN_STATUS_BAD_PARAM;
      op.reduce = r->op.reduce, op.compute = r->op.compute;
      return take_tensors(d, {CUDNN_ATTR_OPERATION_REDUCTION_XDESC}, 1, CUDNN_ATTR_OPERATION_REDUCTION_YDESC);
    }
    default:  // reshape
      return take_tensors(d, {CUDNN_ATTR_OPERATION_RESHAPE_XDESC}, 1, CUDNN_ATTR_OPERATION_RESHAPE_YDESC);
  }
}

cudnnStatus_t finalize_math(Descriptor& d) {
  OpInfo& op = d.op;
  switch (d.type) {
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR:
      if (!one(d, CUDNN_ATTR_POINTWISE_MODE, &op.mode) || !one(d, CUDNN_ATTR_POINTWISE_MATH_PREC, &op.compute))
        return CUDNN_STATUS_BAD_PARAM;
      one(d, CUDNN_ATTR_POINTWISE_AXIS, &op.axis);
      if (op.mode == CUDNN_POINTWISE_GEN_INDEX && op.axis < 0) return CUDNN_STATUS_BAD_PARAM;
      return CUDNN_STATUS_SUCCESS;
    case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
      return one(d, CUDNN_ATTR_MATMUL_COMP_TYPE, &op.compute) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
    default:  // reduction
      return one(d, CUDNN_ATTR_REDUCTION_OPERATOR, &op.reduce) && one(d, CUDNN_ATTR_REDUCTION_COMP_TYPE, &op.compute)
                 ? CUDNN_STATUS_SUCCESS
                 : CUDNN_STATUS_BAD_PARAM;
  }
}

// The graph behind an engine heuristics / engine / engine config / plan descriptor.
const Descriptor* graph_of(const Descriptor& d) {
  switch (d.type) {
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: return desc_attr(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR: return desc_attr(d, CUDNN_ATTR_ENGINE_OPERATION_GRAPH);
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR: {
      const Descriptor* e = desc_attr(d, CUDNN_ATTR_ENGINECFG_ENGINE);
      return e == nullptr ? nullptr : graph_of(*e);
    }
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: {
      const Descriptor* c = desc_attr(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
      return c == nullptr ? nullptr : graph_of(*c);
    }
    default: return nullptr;
  }
}

cudnnStatus_t finalize(Descriptor& d) {
  switch (d.type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: return finalize_tensor(d);
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR:
    case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
    case CUDNN_BACKEND_REDUCTION_DESCRIPTOR: return finalize_math(d);
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR: return finalize_operation(d);
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: {
      const Attr* ops = find(d, CUDNN_ATTR_OPERATIONGRAPH_OPS);
      if (ops == nullptr || ops->descs.empty() || !one(d, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, &d.handle))
        return CUDNN_STATUS_BAD_PARAM;
      for (const Snapshot& op : ops->descs) d.graph.ops.push_back(op->op);
      d.support = fused_attention_support(d.graph);
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: {
      cudnnBackendHeurMode_t mode;
      return graph_of(d) != nullptr && one(d, CUDNN_ATTR_ENGINEHEUR_MODE, &mode) ? CUDNN_STATUS_SUCCESS
                                                                                 : CUDNN_STATUS_BAD_PARAM;
    }
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: {
      const Descriptor* g = graph_of(d);
      if (g == nullptr) return CUDNN_STATUS_BAD_PARAM;
      if (d.type == CUDNN_BACKEND_ENGINE_DESCRIPTOR) {
        int64_t index = -1;
        if (!one(d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, &index) || index != 0) return CUDNN_STATUS_NOT_SUPPORTED;
      }
      d.support = g->support;
      d.handle = g->handle;
      return d.support.status;
    }
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: {
      const Attr* ids = find(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
      const Attr* ptrs = find(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
      return ids != nullptr && ptrs != nullptr && ids->count == ptrs->count ? CUDNN_STATUS_SUCCESS
                                                                          : CUDNN_STATUS_BAD_PARAM;
    }
    default: return CUDNN_STATUS_NOT_SUPPORTED;
  }
}

bool modelled(cudnnBackendDescriptorType_t t) {
  switch (t) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR:
    case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
    case CUDNN_BACKEND_REDUCTION_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: return true;
    default: return false;
  }
}

// The heuristics' one result: an engine config over engine 0 of the graph.
cudnnStatus_t fill_engine_config(const Descriptor& heur, Descriptor* cfg) {
  if (cfg == nullptr || cfg->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE;
  auto engine = std::make_shared<Descriptor>(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  Attr g;
  g.type = CUDNN_TYPE_BACKEND_DESCRIPTOR, g.count = 1, g.descs = find(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH)->descs;
  engine->attrs[CUDNN_ATTR_ENGINE_OPERATION_GRAPH] = g;
  Attr index;
  index.type = CUDNN_TYPE_INT64, index.count = 1, index.bytes.assign(sizeof(int64_t), 0);
  engine->attrs[CUDNN_ATTR_ENGINE_GLOBAL_INDEX] = index;
  if (finalize(*engine) != CUDNN_STATUS_SUCCESS) return CUDNN_STATUS_NOT_SUPPORTED;
  engine->finalized = true;
  Attr e;
  e.type = CUDNN_TYPE_BACKEND_DESCRIPTOR, e.count = 1, e.descs = {engine};
  cfg->attrs[CUDNN_ATTR_ENGINECFG_ENGINE] = e;
  const cudnnStatus_t s = finalize(*cfg);
  cfg->finalized = s == CUDNN_STATUS_SUCCESS;
  return s;
}

cudnnStatus_t execute(cudnnHandle_t handle, const Descriptor& plan, const Descriptor& pack) {
  if (plan.type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || pack.type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
    return CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE;
  const Descriptor* graph = graph_of(plan);
  const std::vector<int64_t> ids = values<int64_t>(*find(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS));
  const std::vector<void*> ptrs = values<void*>(*find(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS));
  std::map<int64_t, void*> data;
  for (size_t i = 0; i < ids.size(); i++) data[ids[i]] = ptrs[i];
  std::map<int64_t, float> by_value;
  for (const OpInfo& op : graph->graph.ops)
    for (const TensorInfo& t : op.in) {
      if (t.is_virtual) continue;
      const auto it = data.find(t.uid);
      if (it == data.end() || it->second == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
      if (t.by_value) {  // a host pointer to the value, read now
        by_value[t.uid] = *static_cast<const float*>(it->second);
        continue;
      }
      if (reinterpret_cast<uintptr_t>(it->second) % static_cast<uintptr_t>(t.alignment) != 0)
        return CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER;
    }
  for (const OpInfo& op : graph->graph.ops)
    if (!op.out.is_virtual) {
      const auto it = data.find(op.out.uid);
      if (it == data.end() || it->second == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
      if (reinterpret_cast<uintptr_t>(it->second) % static_cast<uintptr_t>(op.out.alignment) != 0)
        return CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER;
    }
  const size_t ws_bytes = plan.support.workspace_bytes;
  void* ws = nullptr;
  if (const Attr* w = find(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE)) ws = values<void*>(*w).at(0);
  if (ws_bytes > 0 && (ws == nullptr || !device_memory_range(ws, ws_bytes))) return CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT;
  const GraphInfo g = graph->graph;
  auto work = [g, data, by_value] { run_graph(g, data, by_value); };
  if (defers(handle->stream)) enqueue(handle->stream, work, "cudnnBackendExecute");
  else if (drain_legacy() == cudaSuccess) work();
  else return CUDNN_STATUS_EXECUTION_FAILED;
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace
}  // namespace dnn
}  // namespace emu
}  // namespace gpt2

using gpt2::emu::dnn::Attr;
using gpt2::emu::dnn::Descriptor;
using gpt2::emu::dnn::as_desc;

extern "C" {

size_t cudnnGetVersion(void) { return CUDNN_VERSION; }

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_BAD_PARAM_NULL_POINTER: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER: return "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER";
    case CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED: return "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED";
    case CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT: return "CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT";
    case CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE: return "CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE";
    case CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE: return "CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN: return "CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN";
    case CUDNN_STATUS_NOT_SUPPORTED_SHAPE: return "CUDNN_STATUS_NOT_SUPPORTED_SHAPE";
    case CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE: return "CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE";
    case CUDNN_STATUS_NOT_SUPPORTED_LAYOUT: return "CUDNN_STATUS_NOT_SUPPORTED_LAYOUT";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_STATUS (emulated: unnamed)";
  }
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  *handle = new (std::nothrow) cudnnContext();
  return *handle == nullptr ? CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED : CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (!gpt2::emu::stream_handle_valid(stream)) return CUDNN_STATUS_BAD_PARAM;
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t* descriptor) {
  if (descriptor == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  if (!gpt2::emu::dnn::modelled(type)) return CUDNN_STATUS_NOT_SUPPORTED;
  *descriptor = new (std::nothrow) Descriptor(type);
  return *descriptor == nullptr ? CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED : CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
  Descriptor* d = as_desc(descriptor);
  if (d == nullptr) return CUDNN_STATUS_BAD_PARAM;
  d->magic = 0;
  delete d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count, const void* elements) {
  Descriptor* d = as_desc(descriptor);
  if (d == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (d->finalized) return CUDNN_STATUS_NOT_INITIALIZED;  // finalized descriptors are immutable
  if (count < 0 || (count > 0 && elements == nullptr)) return CUDNN_STATUS_BAD_PARAM;
  const auto& rules = gpt2::emu::dnn::attr_rules();
  const auto rule = rules.find(name);
  if (rule == rules.end() || rule->second.owner != d->type) return CUDNN_STATUS_NOT_SUPPORTED;
  if (rule->second.type != type) return CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE;
  Attr a;
  a.type = type, a.count = count;
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
    for (int64_t i = 0; i < count; i++) {
      const Descriptor* ref = as_desc(static_cast<const cudnnBackendDescriptor_t*>(elements)[i]);
      if (ref == nullptr) return CUDNN_STATUS_BAD_PARAM;
      if (!ref->finalized) return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
      a.descs.push_back(std::make_shared<const Descriptor>(*ref));
    }
  } else {
    const size_t bytes = gpt2::emu::dnn::element_bytes(type) * static_cast<size_t>(count);
    a.bytes.assign(static_cast<const unsigned char*>(elements), static_cast<const unsigned char*>(elements) + bytes);
  }
  d->attrs[name] = std::move(a);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
  Descriptor* d = as_desc(descriptor);
  if (d == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (d->finalized) return CUDNN_STATUS_BAD_PARAM;
  const cudnnStatus_t s = gpt2::emu::dnn::finalize(*d);
  d->finalized = s == CUDNN_STATUS_SUCCESS;
  return s;
}

// Modelled reads: the execution plan's workspace size and the heuristics' results.
cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested, int64_t* count,
                                       void* elements) {
  const Descriptor* d = as_desc(descriptor);
  if (d == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (!d->finalized) return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
  if (name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE && d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) {
    if (type != CUDNN_TYPE_INT64) return CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE;
    if (count != nullptr) *count = 1;
    if (requested >= 1 && elements != nullptr) *static_cast<int64_t*>(elements) = static_cast<int64_t>(d->support.workspace_bytes);
    return CUDNN_STATUS_SUCCESS;
  }
  if (name == CUDNN_ATTR_ENGINEHEUR_RESULTS && d->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR) {
    if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE;
    const Descriptor* graph = gpt2::emu::dnn::graph_of(*d);
    const int64_t n = graph->support.status == CUDNN_STATUS_SUCCESS ? 1 : 0;
    if (count != nullptr) *count = n;
    if (n == 1 && requested >= 1 && elements != nullptr)
      return gpt2::emu::dnn::fill_engine_config(*d, as_desc(static_cast<cudnnBackendDescriptor_t*>(elements)[0]));
    return CUDNN_STATUS_SUCCESS;
  }
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack) {
  const Descriptor* p = as_desc(plan);
  const Descriptor* v = as_desc(pack);
  if (handle == nullptr || p == nullptr || v == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (!p->finalized || !v->finalized) return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
  return gpt2::emu::dnn::execute(handle, *p, *v);
}

}  // extern "C"
