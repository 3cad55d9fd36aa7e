#include "backend/sizing_backend.h"

#include <algorithm>
#include <stdexcept>

namespace gpt2 {

size_t SizingBackend::allocated_bytes() const {
  size_t sum = 0;
  for (size_t b : bytes_) sum += b;
  return sum;
}

Tensor SizingBackend::alloc(size_t numel, BufferRole role) {
  const uint32_t eb = sizes_.elem_bytes[static_cast<size_t>(role)];
  const size_t bytes = numel * eb;
  bytes_[static_cast<size_t>(role)] += bytes;
  Tensor t{reinterpret_cast<void*>(next_), numel, eb};
  next_ += (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  return t;
}

void SizingBackend::download(float* dst, Tensor src) { std::fill(dst, dst + src.numel, 0.0f); }
void SizingBackend::download64(double* dst, Tensor src) { std::fill(dst, dst + src.numel, 0.0); }

void SizingBackend::no_op(const char* op) const {
  throw std::runtime_error("sizing backend (" + sizes_.name + "): " + op +
                           " called; a dry run allocates and runs nothing");
}

}  // namespace gpt2
