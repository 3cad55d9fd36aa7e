#include "distributed/comm.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <stdexcept>

namespace gpt2 {

size_t data_type_bytes(DataType type) {
  switch (type) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kInt32: return 4;
    case DataType::kBFloat16: return 2;
  }
  return 0;
}

const char* comm_call_name(CommCall call) {
  switch (call) {
    case CommCall::kAllReduce: return "all_reduce";
    case CommCall::kReduceScatter: return "reduce_scatter";
    case CommCall::kReduceScatterV: return "reduce_scatter_v";
    case CommCall::kAllGather: return "all_gather";
    case CommCall::kAllGatherV: return "all_gather_v";
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

void Communicator::check_type(const char* call, DataType type) const {
  if (const char* why = type_refusal(type))
    throw std::runtime_error(error_prefix() + call + ": " + why);
}

void Communicator::check_reduction(const char* call, DataType type, ReduceOp op) const {
  check_type(call, type);
  if (type == DataType::kInt32 && op == ReduceOp::kAvg)
    throw std::runtime_error(error_prefix() + call + ": average of int32 is not supported");
}

// Pointers are compared as addresses only, so this works for device pointers too.
void Communicator::check_disjoint(const char* call, const void* send, size_t send_bytes,
                                  const void* recv, size_t recv_bytes) const {
  if (send_bytes == 0 || recv_bytes == 0) return;
  const auto s = reinterpret_cast<uintptr_t>(send), r = reinterpret_cast<uintptr_t>(recv);
  if (s < r + recv_bytes && r < s + send_bytes)
    throw std::runtime_error(error_prefix() + call +
                             ": send and receive buffers overlap (only the documented "
                             "in-place form is allowed)");
}

void Communicator::all_reduce(const void* send, void* recv, size_t count, DataType type,
                              ReduceOp op) {
  check_reduction("all_reduce", type, op);
  const uint64_t bytes = count * data_type_bytes(type);
  if (send != recv) check_disjoint("all_reduce", send, bytes, recv, bytes);
  this->count(CommCall::kAllReduce, bytes, 2 * ring_share(bytes, world()));
  if (count == 0) return;
  InFlight in_flight(slot_, comm_call_name(CommCall::kAllReduce));
  do_all_reduce(send, recv, count, type, op);
}

void Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count,
                                  DataType type, ReduceOp op) {
  check_reduction("reduce_scatter", type, op);
  const size_t block = recv_count * data_type_bytes(type);
  const uint64_t bytes = block * static_cast<uint64_t>(world());
  const bool in_place = recv == static_cast<const char*>(send) + block * static_cast<size_t>(rank());
  if (!in_place) check_disjoint("reduce_scatter", send, bytes, recv, block);
  this->count(CommCall::kReduceScatter, bytes, ring_share(bytes, world()));
  if (recv_count == 0) return;
  InFlight in_flight(slot_, comm_call_name(CommCall::kReduceScatter));
  do_reduce_scatter(send, recv, recv_count, type, op);
}

void Communicator::reduce_scatter_v(const void* send, void* recv,
                                    const std::vector<size_t>& counts, DataType type,
                                    ReduceOp op) {
  if (counts.size() != static_cast<size_t>(world()))
    throw std::runtime_error(error_prefix() + "reduce_scatter_v: " +
                             std::to_string(counts.size()) + " block counts for world size " +
                             std::to_string(world()));
  check_reduction("reduce_scatter_v", type, op);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const size_t mine = counts[static_cast<size_t>(rank())];
  const uint64_t bytes = total * data_type_bytes(type);
  if (mine > 0 && recv == nullptr)
    throw std::runtime_error(error_prefix() + "reduce_scatter_v: null receive buffer for " +
                             std::to_string(mine) + " elements");
  check_disjoint("reduce_scatter_v", send, bytes, recv, mine * data_type_bytes(type));
  this->count(CommCall::kReduceScatterV, bytes, ring_share(bytes, world()));
  if (total == 0) return;
  InFlight in_flight(slot_, comm_call_name(CommCall::kReduceScatterV));
  do_reduce_scatter_v(send, recv, counts, type, op);
}

void Communicator::all_gather(const void* send, void* recv, size_t send_count, DataType type) {
  check_type("all_gather", type);
  const size_t block = send_count * data_type_bytes(type);
  const uint64_t bytes = block * static_cast<uint64_t>(world());
  const bool in_place = send == static_cast<const char*>(recv) + block * static_cast<size_t>(rank());
  if (!in_place) check_disjoint("all_gather", send, block, recv, bytes);
  this->count(CommCall::kAllGather, bytes, ring_share(bytes, world()));
  if (send_count == 0) return;
  InFlight in_flight(slot_, comm_call_name(CommCall::kAllGather));
  do_all_gather(send, recv, send_count, type);
}

void Communicator::all_gather_v(void* buf, const std::vector<size_t>& counts, DataType type) {
  if (counts.size() != static_cast<size_t>(world()))
    throw std::runtime_error(error_prefix() + "all_gather_v: " + std::to_string(counts.size()) +
                             " block counts for world size " + std::to_string(world()));
  check_type("all_gather_v", type);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const uint64_t bytes = total * data_type_bytes(type);
  if (total > 0 && buf == nullptr) throw std::runtime_error(error_prefix() + "all_gather_v: null buffer");
  this->count(CommCall::kAllGatherV, bytes, ring_share(bytes, world()));
  if (total == 0) return;
  InFlight in_flight(slot_, comm_call_name(CommCall::kAllGatherV));
  do_all_gather_v(buf, counts, type);
}

void Communicator::do_all_gather_v(void* buf, const std::vector<size_t>& counts, DataType type) {
  const size_t eb = data_type_bytes(type);
  size_t begin = 0;
  for (int r = 0; r < world(); ++r) {
    const size_t c = counts[static_cast<size_t>(r)];
    if (c > 0) do_broadcast(static_cast<char*>(buf) + begin * eb, c * eb, r);
    begin += c;
  }
}

void Communicator::broadcast(void* buf, size_t bytes, int root) {
  if (root < 0 || root >= world())
    throw std::runtime_error(error_prefix() + "broadcast: root " + std::to_string(root) +
                             " outside world of " + std::to_string(world()));
  this->count(CommCall::kBroadcast, bytes, ring_share(bytes, world()));
  if (bytes == 0) return;
  InFlight in_flight(slot_, comm_call_name(CommCall::kBroadcast));
  do_broadcast(buf, bytes, root);
}

void Communicator::reduce_pieces(void* buf, const std::vector<ReducePiece>& pieces, DataType type,
                                 ReduceOp op) {
  check_reduction("reduce_pieces", type, op);
  const size_t eb = data_type_bytes(type);
  uint64_t all = 0, rooted = 0;
  for (const ReducePiece& p : pieces) {
    if (p.root < -1 || p.root >= world())
      throw std::runtime_error(error_prefix() + "reduce_pieces: root " + std::to_string(p.root) +
                               " outside world of " + std::to_string(world()));
    (p.root < 0 ? all : rooted) += p.count * eb;
  }
  // Overlapping pieces would be reduced twice (and race on a GPU).
  std::vector<ReducePiece> sorted(pieces);
  std::sort(sorted.begin(), sorted.end(),
            [](const ReducePiece& a, const ReducePiece& b) { return a.offset < b.offset; });
  for (size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i - 1].count > 0 && sorted[i - 1].offset + sorted[i - 1].count > sorted[i].offset)
      throw std::runtime_error(error_prefix() + "reduce_pieces: pieces overlap at element " +
                               std::to_string(sorted[i].offset));
  if (all > 0) this->count(CommCall::kAllReduce, all, 2 * ring_share(all, world()));
  if (rooted > 0) this->count(CommCall::kReduceScatter, rooted, ring_share(rooted, world()));
  if (all + rooted == 0) return;
  InFlight in_flight(slot_, "reduce_pieces");
  do_reduce_pieces(buf, pieces, type, op);
}

void Communicator::do_reduce_pieces(void* buf, const std::vector<ReducePiece>& pieces, DataType type,
                                    ReduceOp op) {
  const size_t eb = data_type_bytes(type);
  for (const ReducePiece& p : pieces) {
    if (p.count == 0) continue;
    void* at = static_cast<char*>(buf) + p.offset * eb;
    do_all_reduce(at, at, p.count, type, op);
  }
}

void Communicator::begin_async() {
  if (async_) throw std::runtime_error(error_prefix() + "begin_async: already asynchronous (not nestable)");
  async_ = true;
  do_begin_async();
}

CommTicket Communicator::end_async() {
  if (!async_) throw std::runtime_error(error_prefix() + "end_async without begin_async");
  async_ = false;
  return do_end_async();
}

void Communicator::wait(CommTicket ticket) {
  if (ticket == 0) return;
  InFlight in_flight(slot_, "wait");
  do_wait(ticket);
}

void Communicator::barrier() {
  this->count(CommCall::kBarrier, 0, 0);
  InFlight in_flight(slot_, comm_call_name(CommCall::kBarrier));
  do_barrier();
}

void Communicator::wait_device() {
  InFlight in_flight(slot_, "wait_device");
  do_wait_device();
}

void Communicator::set_watchdog(CommWatchdog* watchdog) {
  detach_watchdog();
  watchdog_ = watchdog;
  if (watchdog_ && watchdog_->enabled()) slot_ = watchdog_->add_slot(name(), watchdog_abort_hook());
}

void Communicator::detach_watchdog() {
  if (watchdog_ && slot_) watchdog_->release(slot_);
  slot_ = nullptr;
  watchdog_ = nullptr;
}

}  // namespace gpt2
