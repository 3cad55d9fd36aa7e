#include "train/zero_staging.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace gpt2 {

ZeroStaging::ZeroStaging(Backend& backend, const ZeroPlan& plan, const ParamLayout& layout, int layer_buffers)
    : backend_(backend), plan_(plan), layout_(layout), layer_buffers_(layer_buffers) {
  if (layer_buffers != 1 && layer_buffers != 2) throw std::runtime_error("ZeRO-2 staging: 1 or 2 layer buffers");
  // Layer buffers also stage the wte chunks: as large as the largest of either.
  size_t layer_numel = 0;
  for (int u = 0; u < plan.num_units(); u++)
    if (u != plan.rest_unit()) layer_numel = std::max(layer_numel, plan.unit(u).numel);
  for (int i = 0; i < layer_buffers; i++) buffers_[i] = backend_.alloc(layer_numel, BufferRole::kGrads);
  buffers_[kRestBuffer] = backend_.alloc(plan.unit(plan.rest_unit()).numel, BufferRole::kGrads);
}

ZeroStaging::~ZeroStaging() {
  for (Tensor& b : buffers_)
    if (!b.empty()) backend_.free(b);
}

int ZeroStaging::buffer_of(int u) const {
  if (u < 0 || u >= plan_.num_units()) throw std::runtime_error("ZeRO-2 staging: no unit " + std::to_string(u));
  if (u == plan_.rest_unit()) return kRestBuffer;
  const int index = u < plan_.rest_unit() ? u : u - plan_.first_chunk_unit();  // layer l or chunk k
  return index % layer_buffers_;
}

Tensor ZeroStaging::unit(int u) const { return buffers_[buffer_of(u)].slice(0, plan_.unit(u).numel); }

size_t ZeroStaging::bytes() const {
  size_t n = 0;
  for (const Tensor& b : buffers_) n += b.bytes();
  return n;
}

ParamTensors ZeroStaging::begin_unit(int l) {
  Tensor buffer = buffers_[buffer_of(l < 0 ? plan_.rest_unit() : l)];
  backend_.zero(buffer);
  return unit_views(plan_, layout_, buffer, l);
}

ParamTensors unit_views(const ZeroPlan& plan, const ParamLayout& layout, Tensor packed, int l) {
  const UnitExchange& unit = plan.unit(l < 0 ? plan.rest_unit() : l);
  ParamTensors v;
  for (int t = 0; t < kNumParamTensors; t++) {
    if (t == kWte || ParamLayout::is_per_layer(t) != (l >= 0)) continue;
    const size_t global = l >= 0 ? layout.layer_offset(t, l) : layout.offset[t];
    v[t] = packed.slice(unit.packed_position(global), l >= 0 ? layout.layer_numel(t) : layout.numel[t]);
  }
  return v;
}

}  // namespace gpt2
