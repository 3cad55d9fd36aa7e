// The emulated cuDNN's graph API (emu/cudnn.cpp, emu/cudnn_graph.cpp) refuses
// what cuDNN's documentation says it refuses, so the backend's wrappers and
// fallbacks (backend/cuda/cudnn_attention.cpp) meet those refusals in CI:
// attribute types, unfinalized references, finalized descriptors, graphs that
// are not fused attention, and fused attention outside its documented limits.
#include <cudnn_graph.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace {

cudnnBackendDescriptor_t create(cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t d = nullptr;
  EXPECT_EQ(cudnnBackendCreateDescriptor(type, &d), CUDNN_STATUS_SUCCESS);
  return d;
}

// A finalized tensor descriptor; `virt`: a virtual one.
cudnnBackendDescriptor_t tensor(int64_t uid, std::vector<int64_t> dims, std::vector<int64_t> strides,
                                cudnnDataType_t type, bool virt = false, int64_t align = 16) {
  cudnnBackendDescriptor_t t = create(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  EXPECT_EQ(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type), 0);
  EXPECT_EQ(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data()), 0);
  EXPECT_EQ(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data()), 0);
  EXPECT_EQ(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid), 0);
  EXPECT_EQ(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align), 0);
  if (virt) EXPECT_EQ(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt), 0);
  EXPECT_EQ(cudnnBackendFinalize(t), CUDNN_STATUS_SUCCESS);
  return t;
}

// C = A B as a finalized matmul operation.
cudnnBackendDescriptor_t matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
  cudnnBackendDescriptor_t mm = create(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  EXPECT_EQ(cudnnBackendSetAttribute(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32), 0);
  EXPECT_EQ(cudnnBackendFinalize(mm), 0);
  cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  EXPECT_EQ(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a), 0);
  EXPECT_EQ(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b), 0);
  EXPECT_EQ(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c), 0);
  EXPECT_EQ(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm), 0);
  EXPECT_EQ(cudnnBackendFinalize(op), CUDNN_STATUS_SUCCESS);
  cudnnBackendDestroyDescriptor(mm);
  return op;
}

TEST(CudnnGraphApi, AttributesAreTypedAndFinalizedDescriptorsImmutable) {
  cudnnBackendDescriptor_t t = create(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t uid = 1;
  EXPECT_EQ(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_FLOAT, 1, &uid),
            CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE);
  EXPECT_EQ(cudnnBackendSetAttribute(t, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &uid),
            CUDNN_STATUS_NOT_SUPPORTED);  // another descriptor's attribute
  EXPECT_EQ(cudnnBackendFinalize(t), CUDNN_STATUS_BAD_PARAM);  // no dims, strides, type
  cudnnBackendDestroyDescriptor(t);
  t = tensor(1, {1, 1, 8, 8}, {64, 64, 8, 1}, CUDNN_DATA_BFLOAT16);
  EXPECT_NE(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid), CUDNN_STATUS_SUCCESS);
  cudnnBackendDestroyDescriptor(t);
}

TEST(CudnnGraphApi, AnOperationReferencesOnlyFinalizedTensors) {
  cudnnBackendDescriptor_t raw = create(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  EXPECT_EQ(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw),
            CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED);
  cudnnBackendDestroyDescriptor(op);
  cudnnBackendDestroyDescriptor(raw);
}

// Heuristics' engine count for a graph of these operations.
int64_t engines_for(std::vector<cudnnBackendDescriptor_t> ops) {
  cudnnHandle_t h = nullptr;
  EXPECT_EQ(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
  cudnnBackendDescriptor_t g = create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  EXPECT_EQ(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                     static_cast<int64_t>(ops.size()), ops.data()), 0);
  EXPECT_EQ(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h), 0);
  EXPECT_EQ(cudnnBackendFinalize(g), CUDNN_STATUS_SUCCESS);
  cudnnBackendDescriptor_t heur = create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  EXPECT_EQ(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g), 0);
  EXPECT_EQ(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode), 0);
  EXPECT_EQ(cudnnBackendFinalize(heur), CUDNN_STATUS_SUCCESS);
  int64_t count = -1;
  EXPECT_EQ(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                     nullptr),
            CUDNN_STATUS_SUCCESS);
  cudnnBackendDestroyDescriptor(heur);
  cudnnBackendDestroyDescriptor(g);
  cudnnDestroy(h);
  return count;
}

// A plain matmul is no fused attention: the heuristics offer no engine.
TEST(CudnnGraphApi, AGraphThatIsNotFusedAttentionGetsNoEngine) {
  cudnnBackendDescriptor_t a = tensor(1, {1, 1, 8, 16}, {128, 128, 16, 1}, CUDNN_DATA_BFLOAT16);
  cudnnBackendDescriptor_t b = tensor(2, {1, 1, 16, 8}, {128, 128, 1, 16}, CUDNN_DATA_BFLOAT16);
  cudnnBackendDescriptor_t c = tensor(3, {1, 1, 8, 8}, {64, 64, 8, 1}, CUDNN_DATA_BFLOAT16);
  cudnnBackendDescriptor_t op = matmul(a, b, c);
  EXPECT_EQ(engines_for({op}), 0);
  for (auto d : {op, a, b, c}) cudnnBackendDestroyDescriptor(d);
}

// A matmul whose operands disagree on K is refused.
TEST(CudnnGraphApi, MatmulShapesMustAgree) {
  cudnnBackendDescriptor_t a = tensor(1, {1, 1, 8, 16}, {128, 128, 16, 1}, CUDNN_DATA_BFLOAT16);
  cudnnBackendDescriptor_t b = tensor(2, {1, 1, 8, 8}, {64, 64, 1, 8}, CUDNN_DATA_BFLOAT16);  // K 8 != 16
  cudnnBackendDescriptor_t c = tensor(3, {1, 1, 8, 8}, {64, 64, 8, 1}, CUDNN_DATA_FLOAT, true);
  cudnnBackendDescriptor_t op = matmul(a, b, c);
  EXPECT_EQ(engines_for({op}), 0);
  for (auto d : {op, a, b, c}) cudnnBackendDestroyDescriptor(d);
}

}  // namespace
