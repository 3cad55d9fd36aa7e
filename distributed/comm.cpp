#include "distributed/comm.h"

#include <numeric>
#include <stdexcept>

namespace gpt2 {

size_t data_type_bytes(DataType type) {
  switch (type) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kInt32: return 4;
  }
  return 0;
}

const char* comm_call_name(CommCall call) {
  switch (call) {
    case CommCall::kAllReduce: return "all_reduce";
    case CommCall::kReduceScatter: return "reduce_scatter";
    case CommCall::kReduceScatterV: return "reduce_scatter_v";
    case CommCall::kAllGather: return "all_gather";
    case CommCall::kBroadcast: return "broadcast";
    case CommCall::kBarrier: return "barrier";
    case CommCall::kCount: break;
  }
  return "unknown";
}

void Communicator::count(CommCall call, uint64_t payload, uint64_t sent) {
  CommTraffic& t = stats_[static_cast<size_t>(call)];
  t.calls += 1;
  t.payload_bytes += payload;
  t.sent_bytes += sent;
}

namespace {
// Bytes one rank sends when `bytes` are cut into W ring chunks and each chunk
// crosses W-1 links: (W-1)/W x bytes (exact for bytes divisible by W).
uint64_t ring_share(uint64_t bytes, int world) {
  return bytes / static_cast<uint64_t>(world) * static_cast<uint64_t>(world - 1) +
         bytes % static_cast<uint64_t>(world) * static_cast<uint64_t>(world - 1) /
             static_cast<uint64_t>(world);
}
}  // namespace

void Communicator::all_reduce(const void* send, void* recv, size_t count, DataType type,
                              ReduceOp op) {
  if (type == DataType::kInt32 && op == ReduceOp::kAvg)
    throw std::runtime_error(error_prefix() + "all_reduce: average of int32 is not supported");
  const uint64_t bytes = count * data_type_bytes(type);
  this->count(CommCall::kAllReduce, bytes, 2 * ring_share(bytes, world()));
  if (count == 0) return;
  do_all_reduce(send, recv, count, type, op);
}

void Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count,
                                  DataType type, ReduceOp op) {
  if (type == DataType::kInt32 && op == ReduceOp::kAvg)
    throw std::runtime_error(error_prefix() +
                             "reduce_scatter: average of int32 is not supported");
  const uint64_t bytes = recv_count * data_type_bytes(type) * static_cast<uint64_t>(world());
  this->count(CommCall::kReduceScatter, bytes, ring_share(bytes, world()));
  if (recv_count == 0) return;
  do_reduce_scatter(send, recv, recv_count, type, op);
}

void Communicator::reduce_scatter_v(const void* send, void* recv,
                                    const std::vector<size_t>& counts, DataType type,
                                    ReduceOp op) {
  if (counts.size() != static_cast<size_t>(world()))
    throw std::runtime_error(error_prefix() + "reduce_scatter_v: " +
                             std::to_string(counts.size()) + " block counts for world size " +
                             std::to_string(world()));
  if (type == DataType::kInt32 && op == ReduceOp::kAvg)
    throw std::runtime_error(error_prefix() +
                             "reduce_scatter_v: average of int32 is not supported");
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const uint64_t bytes = total * data_type_bytes(type);
  this->count(CommCall::kReduceScatterV, bytes, ring_share(bytes, world()));
  if (total == 0) return;
  if (counts[static_cast<size_t>(rank())] > 0 && recv == nullptr)
    throw std::runtime_error(error_prefix() + "reduce_scatter_v: null receive buffer for " +
                             std::to_string(counts[static_cast<size_t>(rank())]) + " elements");
  do_reduce_scatter_v(send, recv, counts, type, op);
}

void Communicator::all_gather(const void* send, void* recv, size_t send_count, DataType type) {
  const uint64_t bytes = send_count * data_type_bytes(type) * static_cast<uint64_t>(world());
  this->count(CommCall::kAllGather, bytes, ring_share(bytes, world()));
  if (send_count == 0) return;
  do_all_gather(send, recv, send_count, type);
}

void Communicator::broadcast(void* buf, size_t bytes, int root) {
  if (root < 0 || root >= world())
    throw std::runtime_error(error_prefix() + "broadcast: root " + std::to_string(root) +
                             " outside world of " + std::to_string(world()));
  this->count(CommCall::kBroadcast, bytes, ring_share(bytes, world()));
  if (bytes == 0) return;
  do_broadcast(buf, bytes, root);
}

void Communicator::barrier() {
  this->count(CommCall::kBarrier, 0, 0);
  do_barrier();
}

}  // namespace gpt2
