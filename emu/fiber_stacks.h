// The execution engine's fiber stacks (emu/exec.cpp): one mmap'd slot per CUDA
// thread of a block, each with a PROT_NONE guard page below it, so a device
// stack overflow faults instead of corrupting the neighbouring fiber.
#ifndef EMU_FIBER_STACKS_H
#define EMU_FIBER_STACKS_H

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "emu/settings.h"

#if EMU_ASAN  // emu/settings.h
#include <sanitizer/asan_interface.h>
#endif

namespace gpt2 {
namespace emu {

class StackPool {
 public:
  ~StackPool() {
    if (base_ != nullptr) munmap(base_, count_ * slot_bytes_);
  }
  void reserve(size_t count, size_t stack_bytes) {
    if (count <= count_ && stack_bytes == stack_bytes_) return;
    if (base_ != nullptr) munmap(base_, count_ * slot_bytes_);
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    stack_bytes_ = (stack_bytes + page_ - 1) / page_ * page_;
    slot_bytes_ = stack_bytes_ + page_;
    count_ = std::max(count, count_);
    void* p = mmap(nullptr, count_ * slot_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("emu/exec.cpp: cannot map fiber stacks");
    base_ = static_cast<char*>(p);
    for (size_t i = 0; i < count_; ++i) mprotect(base_ + i * slot_bytes_, page_, PROT_NONE);
    dirty_.assign(count_, false);
  }
  char* bottom(size_t i) const { return base_ + i * slot_bytes_ + page_; }
  // Stack tops are staggered by a cache line per fiber: otherwise every fiber's
  // live frames share one page offset, i.e. the same few L1 sets, and each switch misses.
  char* top(size_t i) const { return bottom(i) + stack_bytes_ - (i % 64) * 64; }
  size_t usable_bytes() const { return stack_bytes_ - 64 * 64; }
  size_t stack_bytes() const { return stack_bytes_; }
  // A fiber abandoned mid-call (kernel fault) leaves ASan stack poison behind.
  void mark_dirty(size_t i) { dirty_[i] = true; }
  void clean(size_t i) {
#if EMU_ASAN
    if (dirty_[i]) __asan_unpoison_memory_region(bottom(i), stack_bytes_);
#endif
    dirty_[i] = false;
  }

 private:
  char* base_ = nullptr;
  size_t count_ = 0, stack_bytes_ = 0, slot_bytes_ = 0, page_ = 4096;
  std::vector<bool> dirty_;
};

}  // namespace emu
}  // namespace gpt2

#endif  // EMU_FIBER_STACKS_H
