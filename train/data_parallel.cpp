#include "train/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace gpt2 {

namespace {
// ZeRO-2 exchanges units in slices of at most this many elements (16 MiB fp32).
constexpr size_t kMaxExchangeSlice = size_t{1} << 22;
}  // namespace

std::vector<ParamTensorSpec> zero_tensor_specs(const ParamLayout& layout) {
  std::vector<ParamTensorSpec> specs;
  for (int t = 0; t < kNumParamTensors; t++)
    specs.push_back({ParamLayout::name(t), layout.numel[t], ParamLayout::is_per_layer(t) ? layout.num_layers : 0});
  return specs;
}

DataType comm_data_type(uint32_t elem_bytes) {
  if (elem_bytes == 4) return DataType::kFloat32;
  if (elem_bytes == 2) return DataType::kBFloat16;
  throw std::runtime_error("data parallel: no communicated type for " + std::to_string(elem_bytes) +
                           "-byte buffer elements");
}

DataParallel::DataParallel(Backend& backend, Communicator& buffers, Communicator& host, const ParamLayout& layout,
                           int zero_stage)
    : backend_(backend),
      comm_(buffers),
      host_(host),
      stage_(zero_stage),
      num_params_(layout.total),
      plan_(zero_tensor_specs(layout), buffers.world()) {
  if (zero_stage < 0 || zero_stage > 2) throw std::runtime_error("--zero-stage must be 0, 1 or 2");
  if (buffers.world() != host.world() || buffers.rank() != host.rank())
    throw std::runtime_error("data parallel: the " + buffers.name() + " and " + host.name() +
                             " communicators disagree on rank/world");
  if (host.world() > 1 && host.is_device_memory())
    throw std::runtime_error("data parallel: host scalars need a host-memory communicator, not " + host.name());
  // One rank moves no buffers through the communicator except stage 2's unit
  // exchange, so only then must its memory kind match the backend's.
  if ((buffers.world() > 1 || stage_ == 2) && buffers.is_device_memory() == backend.is_host_memory())
    throw std::runtime_error("communicator (" + buffers.name() + ") and backend (" + backend.name() +
                             ") disagree on where memory lives" +
                             (stage_ == 2 && buffers.world() == 1 ? " (--zero-stage 2 exchanges buffers)" : ""));
  if (stage_ == 0) {
    opt_begin_ = 0;
    opt_end_ = num_params_;
  } else {
    const ElemRange s = plan_.shard(buffers.rank());
    opt_begin_ = std::min(s.begin, num_params_);
    opt_end_ = std::min(s.end, num_params_);
  }
  if (stage_ == 2) allocate_stage2_buffers();
}

// Stage 2's gradient shard and receive buffer, both of the gradients' element
// type (the receive buffer is added into the shard).
void DataParallel::allocate_stage2_buffers() {
  shard_grads_ = backend_.alloc(plan_.shard_size(), BufferRole::kGrads);
  backend_.zero(shard_grads_);
  // The slice length must be the same on every rank (the slices are
  // collectives), so it derives from the plan alone: the largest part any
  // rank owns of any unit, capped.
  size_t most = 1;
  for (int u = 0; u < plan_.num_units(); u++)
    for (size_t c : plan_.unit(u).counts) most = std::max(most, c);
  // GPT2_ZERO2_SLICE_ELEMS overrides the cap (tests use it to force many slices).
  size_t cap = kMaxExchangeSlice;
  if (const char* env = std::getenv("GPT2_ZERO2_SLICE_ELEMS")) {
    const long long v = std::atoll(env);
    if (v < 1) throw std::runtime_error("GPT2_ZERO2_SLICE_ELEMS must be a positive element count");
    cap = static_cast<size_t>(v);
  }
  recv_ = backend_.alloc(std::min(most, cap), BufferRole::kGrads);
}

DataParallel::~DataParallel() {
  if (!shard_grads_.empty()) backend_.free(shard_grads_);
  if (!recv_.empty()) backend_.free(recv_);
}

void DataParallel::begin_step() {
  if (stage_ == 2) backend_.zero(shard_grads_);
}

std::function<void(int)> DataParallel::backward_hook(GPT2& model) {
  if (stage_ != 2) return nullptr;
  return [this, &model](int layer) { reduce_unit(model, layer < 0 ? plan_.rest_unit() : layer); };
}

// Stage 2: the unit's packed gradients (flat-buffer order == the plan's owner
// order, so rank r's part is the packed range [start_r, start_r + counts[r]))
// are reduce-scattered in slices of at most recv_.numel elements, which bounds
// the receive buffer however large a unit is (GPT-2's tied wte gradient is a
// third of the model); this rank adds what it receives into its shard.
void DataParallel::reduce_unit(GPT2& model, int unit) {
  const UnitExchange& ex = plan_.unit(unit);
  const size_t world = static_cast<size_t>(comm_.world()), me = static_cast<size_t>(comm_.rank());
  Tensor send = model.unit_grads(unit);
  if (send.numel != ex.numel) throw std::runtime_error("ZeRO-2: unit buffer size disagrees with the plan");
  if (send.elem_bytes != recv_.elem_bytes)
    throw std::runtime_error("ZeRO-2: unit gradients and the receive buffer differ in element size");
  const DataType type = comm_data_type(send.elem_bytes);
  std::vector<size_t> start(world + 1, 0);
  for (size_t r = 0; r < world; r++) start[r + 1] = start[r] + ex.counts[r];
  std::vector<size_t> counts(world);
  for (size_t a = 0; a < ex.numel; a += recv_.numel) {
    const size_t b = std::min(ex.numel, a + recv_.numel);
    for (size_t r = 0; r < world; r++)
      counts[r] = std::max(start[r], std::min(b, start[r + 1])) - std::max(start[r], std::min(a, start[r + 1]));
    comm_.reduce_scatter_v(send.slice(a, b - a).ptr, counts[me] ? recv_.ptr : nullptr, counts, type,
                           ReduceOp::kAvg);
    // Received: my packed positions [lo, hi); walk my pieces over them.
    const size_t lo = std::max(a, start[me]), hi = std::min(b, start[me + 1]);
    for (size_t p = ex.first_piece_of_rank[me]; p < ex.first_piece_of_rank[me + 1] && lo < hi; p++) {
      const ExchangePiece& piece = ex.pieces[p];
      const size_t p_lo = std::max(lo, piece.pack_offset);
      const size_t p_hi = std::min(hi, piece.pack_offset + piece.global.size());
      if (p_lo >= p_hi) continue;
      const size_t n = p_hi - p_lo;
      Tensor dst = shard_grads_.slice(piece.shard_offset + (p_lo - piece.pack_offset), n);
      backend_.residual_forward(dst, dst, recv_.slice(p_lo - lo, n), n);
    }
  }
}

void DataParallel::reduce_gradients(GPT2& model) {
  if (comm_.world() == 1 || stage_ == 2) return;  // stage 2 reduced during backward
  Tensor g = model.grads();
  const DataType type = comm_data_type(g.elem_bytes);
  if (stage_ == 0) {
    comm_.all_reduce(g.ptr, g.ptr, g.numel, type, ReduceOp::kAvg);
  } else {
    const size_t S = plan_.shard_size();
    Tensor mine = g.slice(S * static_cast<size_t>(comm_.rank()), S);  // in place: NCCL's convention
    comm_.reduce_scatter(g.ptr, mine.ptr, S, type, ReduceOp::kAvg);
  }
}

Tensor DataParallel::shard_grads(GPT2& model) const {
  const size_t n = opt_end_ - opt_begin_;
  if (stage_ == 2) return shard_grads_.slice(0, n);
  return model.grads().slice(opt_begin_, n);
}

double DataParallel::grad_norm(GPT2& model) {
  if (stage_ == 0) return std::sqrt(backend_.sum_squares(model.grads().slice(0, num_params_)));
  // Padding elements are zero, so squaring the whole shard is exact.
  const ElemRange s = plan_.shard(comm_.rank());
  Tensor mine = stage_ == 2 ? shard_grads_ : model.grads().slice(s.begin, s.size());
  return std::sqrt(all_reduce_value(host_, backend_.sum_squares(mine), ReduceOp::kSum));
}

void DataParallel::gather_params(GPT2& model) {
  if (stage_ == 0 || comm_.world() == 1) return;
  Tensor p = model.params();
  const size_t S = plan_.shard_size();
  Tensor mine = p.slice(S * static_cast<size_t>(comm_.rank()), S);
  comm_.all_gather(mine.ptr, p.ptr, S, comm_data_type(p.elem_bytes));
}

size_t DataParallel::gradient_bytes(const GPT2& model) const {
  return model.gradient_bytes() + shard_grads_.bytes() + recv_.bytes();
}

}  // namespace gpt2
