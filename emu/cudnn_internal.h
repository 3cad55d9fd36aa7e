// What the emulated cuDNN's API layer (emu/cudnn.cpp) hands its graph engine
// (emu/cudnn_graph.cpp): finalized tensors and operations as plain values, so
// the engine never touches a descriptor. Not for kernel or host code.
#ifndef EMU_CUDNN_INTERNAL_H
#define EMU_CUDNN_INTERNAL_H

#include <cudnn_graph.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gpt2 {
namespace emu {
namespace dnn {

struct TensorInfo {
  int64_t uid = 0;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  std::vector<int64_t> dims, strides;
  int64_t alignment = 0;
  bool is_virtual = false, by_value = false;
  int64_t elements() const;  // product of dims
};

// One operation of a graph. Inputs by role: matmul {A, B}; pointwise {X} or
// {X, B} or, for BINARY_SELECT, {X, B, T}; reduction {X}; reshape {X}.
struct OpInfo {
  cudnnBackendDescriptorType_t kind = CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR;
  cudnnPointwiseMode_t mode = CUDNN_POINTWISE_IDENTITY;  // pointwise
  int64_t axis = -1;                                     // GEN_INDEX
  cudnnReduceTensorOp_t reduce = CUDNN_REDUCE_TENSOR_ADD;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  std::vector<TensorInfo> in;
  TensorInfo out;
};

struct GraphInfo {
  std::vector<OpInfo> ops;
};

// The fused attention engine's verdict on a graph: CUDNN_STATUS_SUCCESS, or a
// NOT_SUPPORTED status and the reason (cuDNN's documented support rules).
struct Support {
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  std::string why;
  size_t workspace_bytes = 0;
};
Support fused_attention_support(const GraphInfo& g);

// Runs the graph (queued on `stream` as a kernel would be). `data`: device
// pointers by uid for every non-virtual tensor; by-value tensors' values already
// copied (one float each).
void run_graph(const GraphInfo& g, const std::map<int64_t, void*>& data, const std::map<int64_t, float>& by_value);

}  // namespace dnn
}  // namespace emu
}  // namespace gpt2

#endif  // EMU_CUDNN_INTERNAL_H
