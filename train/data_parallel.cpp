#include "train/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "util/test_hook.h"

namespace gpt2 {

namespace {
// ZeRO-2 exchanges units in slices of at most this many elements (16 MiB fp32).
constexpr size_t kMaxExchangeSlice = size_t{1} << 22;
// Stage 0/1 buckets: PyTorch DDP's default bucket_cap_mb.
constexpr size_t kDefaultBucketBytes = size_t{25} << 20;

// A positive integer from the environment, or `fallback` when unset.
size_t env_count(const char* name, size_t fallback) {
  const char* env = std::getenv(name);
  if (env == nullptr) return fallback;
  const long long v = std::atoll(env);
  if (v < 1) throw std::runtime_error(std::string(name) + " must be a positive count");
  return static_cast<size_t>(v);
}
}  // namespace

std::vector<ParamTensorSpec> zero_tensor_specs(const ParamLayout& layout) {
  std::vector<ParamTensorSpec> specs;
  for (int t = 0; t < kNumParamTensors; t++)
    specs.push_back({ParamLayout::name(t), layout.numel[t], ParamLayout::is_per_layer(t) ? layout.num_layers : 0,
                     t == kWte ? layout.wte_chunk_rows() * layout.channels() : 0});
  return specs;
}

DataType comm_data_type(uint32_t elem_bytes) {
  if (elem_bytes == 4) return DataType::kFloat32;
  if (elem_bytes == 2) return DataType::kBFloat16;
  throw std::runtime_error("data parallel: no communicated type for " + std::to_string(elem_bytes) +
                           "-byte buffer elements");
}

DataParallel::DataParallel(Backend& backend, Communicator& buffers, const ParamLayout& layout, int zero_stage)
    : backend_(backend),
      comm_(buffers),
      stage_(zero_stage),
      num_params_(layout.total),
      plan_(zero_tensor_specs(layout), buffers.world()),
      layout_(layout),
      overlap_(buffers.is_device_memory() && buffers.world() > 1),
      bucket_bytes_(env_count("GPT2_DP_BUCKET_BYTES", kDefaultBucketBytes)) {
  if (zero_stage < 0 || zero_stage > 3) throw std::runtime_error("--zero-stage must be 0, 1, 2 or 3");
  // One rank moves no buffers through the communicator except stage 2 and 3's
  // unit exchange, so only then must its memory kind match the backend's.
  if (buffers_travel(buffers.world(), stage_) && buffers.is_device_memory() == backend.is_host_memory())
    throw std::runtime_error("communicator (" + buffers.name() + ") and backend (" + backend.name() +
                             ") disagree on where memory lives" +
                             (stage_ >= 2 && buffers.world() == 1 ? " (--zero-stage 2 and 3 exchange buffers)" : ""));
  if (stage_ == 0) {
    opt_begin_ = 0;
    opt_end_ = num_params_;
  } else {
    const ElemRange s = plan_.shard(buffers.rank());
    opt_begin_ = std::min(s.begin, num_params_);
    opt_end_ = std::min(s.end, num_params_);
  }
  if (stage_ == 3) params_ = std::make_unique<ZeroParams>(backend_, comm_, plan_, layout_);
  if (staged_grads()) {
    allocate_stage2_buffers();
  } else {
    grads_ = backend_.alloc(plan_.padded_size(), BufferRole::kGrads);
    backend_.zero(grads_);
  }
  clip_ = backend_.alloc(2, BufferRole::kScalar64);
}

ModelOptions DataParallel::model_options(int recompute) const {
  ModelOptions o;
  o.recompute = recompute;
  o.param_capacity = plan_.padded_size();
  o.keep_dlogits = staged_grads();
  o.wte_chunk_rows = layout_.wte_chunk_rows();
  o.param_source = params_.get();
  return o;
}

// Stage 2's shard and receive buffer, both of the gradients' element type
// (the receive buffer is added into the shard).
void DataParallel::allocate_stage2_buffers() {
  shard_grads_ = backend_.alloc(plan_.shard_size(), BufferRole::kGrads);
  backend_.zero(shard_grads_);
  // Slices are collectives, so their length derives from the plan alone: the
  // largest part any rank owns of any unit (layer units and wte chunks; the rest), capped.
  size_t layer_most = 1, rest_most = 0;
  for (int u = 0; u < plan_.num_units(); u++) {
    size_t& most = u == plan_.rest_unit() ? rest_most : layer_most;
    for (size_t c : plan_.unit(u).counts) most = std::max(most, c);
  }
  // GPT2_ZERO2_SLICE_ELEMS overrides the cap (tests use it to force many
  // slices, and with it the synchronous exchange).
  const size_t forced = env_count("GPT2_ZERO2_SLICE_ELEMS", 0);
  const size_t cap = forced ? forced : kMaxExchangeSlice;
  // Overlap exchanges each layer unit and wte chunk in one call into its layer
  // buffer's receive buffer (the wte is chunked: no unit exceeds a layer), unless
  // a forced slice is smaller (decided from the plan: same on every rank).
  overlap_stage2_ = overlap_ && plan_.num_layers() > 0 && (!forced || layer_most <= forced);
  overlap_rest_ = overlap_stage2_ && rest_most > 0 && (!forced || rest_most <= forced);
  if (!overlap_stage2_ || !overlap_rest_)
    recv_ = backend_.alloc(std::min(std::max(layer_most, rest_most), cap), BufferRole::kGrads);
  staging_ = std::make_unique<ZeroStaging>(backend_, plan_, layout_, overlap_stage2_ ? 2 : 1);
  if (!overlap_stage2_) return;
  recv_slot_[0] = backend_.alloc(layer_most, BufferRole::kGrads);
  recv_slot_[1] = backend_.alloc(layer_most, BufferRole::kGrads);
  if (overlap_rest_) recv_slot_[kRestSlot] = backend_.alloc(rest_most, BufferRole::kGrads);
  // Tests only: leave out the wait before a layer buffer's reuse (and before
  // its received part is read), which the deferred stream emulation must catch.
  drop_reuse_wait_ = test_hook_drops_wait("GPT2_TEST_DROP_REUSE_WAIT", "1", "rank " + std::to_string(comm_.rank()) + ": ",
                                          "the wait before a ZeRO-2 layer buffer is reused");
}

DataParallel::~DataParallel() {
  backend_.free(clip_);
  if (!grads_.empty()) backend_.free(grads_);
  if (!shard_grads_.empty()) backend_.free(shard_grads_);
  if (!recv_.empty()) backend_.free(recv_);
  for (Tensor& r : recv_slot_)
    if (!r.empty()) backend_.free(r);
}

void DataParallel::begin_step() {
  backend_.zero(staged_grads() ? shard_grads_ : grads_);
  next_bucket_ = 0;
  bucket_tickets_.clear();
}

// llm.c's backward-and-reduce: the model's pieces in order, each layer's
// gradients reduced or exchanged as soon as they are final. Stage 2 stages
// one layer at a time; with overlap, what is still in flight from the last
// micro-step is retired first (this backward overwrites every staging buffer).
void DataParallel::backward(GPT2& model, bool last_micro_step) {
  const bool buckets = buckets_apply(last_micro_step);
  if (overlap_stage2_)
    for (int slot = 0; slot < static_cast<int>(pending_.size()); slot++) retire(slot);
  const ParamTensors rest = staged_grads() ? staging_->begin_unit(-1) : layout_.views(grads_, 0);
  const int top = layout_.num_layers - 1;  // its views, gathered last by the forward, hold wte and lnf too
  model.backward_head(model.param_views(top), rest);
  for (int l = top; l >= 0; l--) {
    model.backward_layer(l, model.param_views(l), staged_grads() ? staging_->begin_unit(l) : layout_.views(grads_, l));
    if (staged_grads()) exchange_layer(l);
    else if (buckets) issue_bucket(l);
  }
  model.backward_embeddings(rest);
  if (staged_grads()) exchange_tied_and_rest(model);
  else if (buckets) issue_bucket(-1);
}

// Stages 0/1 reduce in buckets during the last micro-step's backward, with
// device buffers at world > 1, when the model needs more than one bucket.
bool DataParallel::buckets_apply(bool last_micro_step) {
  if (staged_grads() || !overlap_ || !last_micro_step) return false;
  if (bucket_elem_bytes_ != grads_.elem_bytes) build_buckets(grads_.elem_bytes);
  return !buckets_.empty();
}

void DataParallel::issue_bucket(int layer) {
  if (next_bucket_ >= buckets_.size() || buckets_[next_bucket_].low_layer != layer) return;
  const ProfileRange range(backend_, "bucket " + std::to_string(next_bucket_) + " reduce (collective)");
  comm_.begin_async();
  comm_.reduce_pieces(grads_.ptr, buckets_[next_bucket_].pieces, comm_data_type(grads_.elem_bytes), ReduceOp::kAvg);
  bucket_tickets_.push_back(comm_.end_async());
  next_bucket_++;
}

// Synchronous: exchanged at once. Overlapped: layer l issues its exchange,
// then retires layer l+1's (the buffer layer l-1 writes next), which ran
// beside layer l's backward.
void DataParallel::exchange_layer(int layer) {
  if (!overlap_stage2_) return reduce_unit(layer);
  exchange_async(layer);
  retire((layer + 1) % 2);
}

// Synchronous: the rest unit, then the wte chunks. Overlapped: the chunks take
// the layer buffers in turn (chunk k waits for chunk k-2's exchange), then the
// rest unit is issued; the next backward or reduce_gradients retires what is
// in flight.
void DataParallel::exchange_tied_and_rest(GPT2& model) {
  if (!overlap_stage2_) reduce_unit(plan_.rest_unit());
  for (int k = 0; k < plan_.num_chunk_units(); k++) {
    const int unit = plan_.first_chunk_unit() + k;
    if (overlap_stage2_) retire(staging_->buffer_of(unit));
    model.wte_grad_chunk(k, staging_->unit(unit));
    if (overlap_stage2_) exchange_async(unit);
    else reduce_unit(unit);
  }
  if (!overlap_stage2_) return;
  if (overlap_rest_) exchange_async(plan_.rest_unit());
  else reduce_unit(plan_.rest_unit());
}

// Buckets of consecutive layers, top layer first, each closed once it holds
// bucket_bytes_; the rest (layers left over, embeddings, final layernorm) is
// the last. A model that fits one bucket gets none: one call at the end.
void DataParallel::build_buckets(uint32_t elem_bytes) {
  buckets_.clear();
  bucket_elem_bytes_ = elem_bytes;
  const int L = layout_.num_layers;
  const size_t layer_numel = layout_.layer_unit_numel();
  const size_t cap = std::max<size_t>(1, bucket_bytes_ / elem_bytes);
  auto add_layers = [&](Bucket& b, int lo, int hi) {  // layers lo..hi of every per-layer tensor
    for (int t = 0; t < kNumParamTensors; t++)
      if (ParamLayout::is_per_layer(t))
        add_bucket_range(b, layout_.layer_offset(t, lo), layout_.layer_offset(t, hi) + layout_.layer_numel(t));
  };
  int hi = L - 1;  // top layer of the open bucket
  for (int l = L - 1; l >= 0; l--) {
    if (static_cast<size_t>(hi - l + 1) * layer_numel < cap) continue;
    Bucket b;
    b.low_layer = l;
    add_layers(b, l, hi);
    buckets_.push_back(std::move(b));
    hi = l - 1;
  }
  Bucket last;
  last.low_layer = -1;
  if (hi >= 0) add_layers(last, 0, hi);
  add_bucket_range(last, layout_.offset[kWte], layout_.offset[kWpe] + layout_.numel[kWpe]);
  add_bucket_range(last, layout_.offset[kLnfw], layout_.offset[kLnfb] + layout_.numel[kLnfb]);
  buckets_.push_back(std::move(last));
  if (buckets_.size() == 1) buckets_.clear();
}

// Stage 0: the range on every rank. Stage 1: cut at shard boundaries, each
// piece reduced onto its owner (what the reduce-scatter gives it).
void DataParallel::add_bucket_range(Bucket& bucket, size_t begin, size_t end) const {
  if (stage_ == 0) {
    if (end > begin) bucket.pieces.push_back({begin, end - begin, -1});
    return;
  }
  for (size_t pos = begin; pos < end;) {
    const int owner = plan_.owner_of(pos);
    const size_t stop = std::min(end, plan_.shard(owner).end);
    bucket.pieces.push_back({pos, stop - pos, owner});
    pos = stop;
  }
}

// Stage 2 overlap: the unit's whole exchange in one asynchronous
// reduce_scatter_v into the receive buffer of its send buffer's slot.
void DataParallel::exchange_async(int unit) {
  const ProfileRange range(backend_, "zero-2 exchange unit " + std::to_string(unit) + " (collective)");
  const int slot = staging_->buffer_of(unit);
  if (pending_[slot].unit >= 0) throw std::runtime_error("ZeRO-2: gradient buffer reused before its exchange was retired");
  const UnitExchange& ex = plan_.unit(unit);
  Tensor send = staging_->unit(unit);
  if (send.numel != ex.numel) throw std::runtime_error("ZeRO-2: unit buffer size disagrees with the plan");
  const size_t mine = ex.counts[static_cast<size_t>(comm_.rank())];
  comm_.begin_async();
  comm_.reduce_scatter_v(send.ptr, mine ? recv_slot_[slot].ptr : nullptr, ex.counts, comm_data_type(send.elem_bytes),
                         ReduceOp::kAvg);
  pending_[slot] = {comm_.end_async(), unit};
}

// The compute stream waits (device-side) for the slot's exchange, then adds what
// this rank received into its shard; the layer and receive buffers are free after.
void DataParallel::retire(int slot) {
  PendingUnit& p = pending_[slot];
  if (p.unit < 0) return;
  const ProfileRange range(backend_, "zero-2 retire unit " + std::to_string(p.unit) + " (collective wait)");
  if (!drop_reuse_wait_) comm_.wait(p.ticket);
  const UnitExchange& ex = plan_.unit(p.unit);
  add_received(ex, recv_slot_[slot], 0, ex.numel);
  p = PendingUnit{};
}

// Stage 2: the unit's packed gradients (flat-buffer order == the plan's owner
// order: rank r's part is [start_r, start_r + counts[r])) are reduce-scattered
// in slices of at most recv_.numel elements, bounding the receive buffer
// however large a unit is.
void DataParallel::reduce_unit(int unit) {
  const ProfileRange range(backend_, "zero-2 exchange unit " + std::to_string(unit) + " (collective)");
  const UnitExchange& ex = plan_.unit(unit);
  const size_t world = static_cast<size_t>(comm_.world()), me = static_cast<size_t>(comm_.rank());
  Tensor send = staging_->unit(unit);
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
    add_received(ex, recv_, a, b);
  }
}

// After the exchange of the unit's packed slice [a, b): `recv` holds my
// packed positions [lo, hi) of it; walk my pieces over them, adding into the shard.
void DataParallel::add_received(const UnitExchange& ex, const Tensor& recv, size_t a, size_t b) {
  const size_t me = static_cast<size_t>(comm_.rank());
  size_t my_start = 0;
  for (size_t r = 0; r < me; r++) my_start += ex.counts[r];
  const size_t lo = std::max(a, my_start), hi = std::min(b, my_start + ex.counts[me]);
  for (size_t p = ex.first_piece_of_rank[me]; p < ex.first_piece_of_rank[me + 1] && lo < hi; p++) {
    const ExchangePiece& piece = ex.pieces[p];
    const size_t p_lo = std::max(lo, piece.pack_offset);
    const size_t p_hi = std::min(hi, piece.pack_offset + piece.global.size());
    if (p_lo >= p_hi) continue;
    const size_t n = p_hi - p_lo;
    Tensor dst = shard_grads_.slice(piece.shard_offset + (p_lo - piece.pack_offset), n);
    backend_.residual_forward({.out = dst, .a = dst, .b = recv.slice(p_lo - lo, n), .n = n});
  }
}

void DataParallel::reduce_gradients() {
  if (staged_grads())  // reduced during backward; what is still in flight lands now
    for (int slot = 0; slot < static_cast<int>(pending_.size()); slot++) retire(slot);
  if (comm_.world() == 1 || staged_grads()) return;
  if (next_bucket_ > 0) {  // issued during the last backward: the compute stream waits for them
    if (next_bucket_ != buckets_.size())
      throw std::runtime_error("data parallel: the last backward issued " + std::to_string(next_bucket_) + " of " +
                               std::to_string(buckets_.size()) + " gradient buckets");
    for (CommTicket t : bucket_tickets_) comm_.wait(t);
    bucket_tickets_.clear();
    next_bucket_ = 0;
    return;
  }
  const DataType type = comm_data_type(grads_.elem_bytes);
  if (stage_ == 0) {
    comm_.all_reduce(grads_.ptr, grads_.ptr, grads_.numel, type, ReduceOp::kAvg);
  } else {  // in place: NCCL's way
    comm_.reduce_scatter(grads_.ptr, my_shard(grads_).ptr, plan_.shard_size(), type, ReduceOp::kAvg);
  }
}

Tensor DataParallel::shard_grads() const {
  const size_t n = opt_end_ - opt_begin_;
  if (staged_grads()) return shard_grads_.slice(0, n);
  return grads_.slice(opt_begin_, n);
}

Tensor DataParallel::shard_params(const GPT2& model) const {
  const size_t n = opt_end_ - opt_begin_;
  return params_ ? params_->shard().slice(0, n) : model.params().slice(opt_begin_, n);
}

void DataParallel::queue_grad_clip(float max_norm) {
  if (stage_ == 0) {
    backend_.sum_squares_into(clip_, grads_.slice(0, num_params_));
  } else {
    // Padding elements are zero, so squaring the whole shard is exact.
    backend_.sum_squares_into(clip_, staged_grads() ? shard_grads_ : my_shard(grads_));
    if (comm_.world() > 1) comm_.all_reduce(clip_.ptr, clip_.ptr, 1, DataType::kFloat64, ReduceOp::kSum);
  }
  backend_.clip_scale(clip_, max_norm);
}

double DataParallel::grad_norm() {
  double state[2];
  backend_.read_clip(state, clip_);
  return std::sqrt(state[0]);
}

void DataParallel::gather_params(GPT2& model) {
  if (params_) return params_->refresh();
  if (stage_ == 0 || comm_.world() == 1) return;
  Tensor p = model.params();
  comm_.all_gather(my_shard(p).ptr, p.ptr, plan_.shard_size(), comm_data_type(p.elem_bytes));
}

size_t DataParallel::parameter_bytes(const GPT2& model) const {
  return model.params().bytes() + (params_ ? params_->bytes() : 0);
}

size_t DataParallel::gradient_bytes() const {
  size_t bytes = grads_.bytes() + shard_grads_.bytes() + recv_.bytes() + (staging_ ? staging_->bytes() : 0);
  for (const Tensor& r : recv_slot_) bytes += r.bytes();
  return bytes;
}

}  // namespace gpt2
