// Execution engine of the CUDA emulator: one fiber (boost.context fcontext) per
// CUDA thread, a per-block scheduler that runs the fibers between synchronisation
// points in a configurable order, and a pool of OS threads that run blocks.
//
// A fiber runs until it reaches a barrier, a warp rendezvous or its end, then
// switches back to the block scheduler (about 5 ns per switch). Every block runs
// start to finish on one OS thread, so device code needs no locking except for
// atomics, which are real atomics because blocks run concurrently.
#include "emu/exec.h"

#include <boost/context/detail/fcontext.hpp>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "emu/control.h"
#include "emu/fiber_stacks.h"
#include "emu/profile.h"
#include "emu/runtime_internal.h"
#include "emu/settings.h"

#if EMU_ASAN  // emu/settings.h
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

extern "C" void __assert_fail(const char* assertion, const char* file, unsigned int line, const char* function) noexcept;

namespace gpt2 {
namespace emu {

thread_local ThreadContext* tls_current_thread = nullptr;

namespace {

namespace bctx = boost::context::detail;

enum class Status : uint8_t { kRunnable, kBarrier, kWarp, kExited, kFaulted };

struct EmuThread {
  ThreadContext ctx;
  bctx::fcontext_t fiber = nullptr;
  Status status = Status::kRunnable;
  int linear = 0;
  // warp rendezvous slot
  WarpOp op = WarpOp::kSyncWarp;
  ShuffleMode mode = ShuffleMode::kIdx;
  unsigned mask = 0;
  int operand = 0, width = 32;
  uint64_t value = 0, result = 0;
  const char* file = "";
  int line = 0;
  void* fake_stack = nullptr;
};

struct Warp {
  unsigned exists = 0;       // lanes present in the block
  unsigned exited = 0;
  unsigned pending = 0;      // lanes waiting in a rendezvous
  unsigned waiting_for = 0;  // union of the masks of pending lanes
};

struct LaunchState {
  KernelInvoker body;
  dim3 grid, block;
  size_t smem = 0;
  const char* name = "";
  uint64_t num_blocks = 0;
  std::atomic<uint64_t> next_block{0};
  std::atomic<bool> faulted{false};
  std::mutex fault_mutex;
  std::string fault;
  cudaError_t fault_code = cudaSuccess;
  RunOrder order = RunOrder::kForward;
  uint64_t seed = 1;
  size_t stack_bytes = 0;
  bool blocks_descending = false;  // set_block_dispatch(kDescending)
};

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::kShuffle: return "__shfl*_sync";
    case WarpOp::kBallot: return "__ballot_sync";
    case WarpOp::kAll: return "__all_sync";
    case WarpOp::kAny: return "__any_sync";
    case WarpOp::kSyncWarp: return "__syncwarp";
    case WarpOp::kReduceAdd: return "__reduce_add_sync";
    case WarpOp::kReduceMin: return "__reduce_min_sync";
    case WarpOp::kReduceMax: return "__reduce_max_sync";
  }
  return "?";
}

void fiber_entry(bctx::transfer_t transfer);

// Runs blocks on one OS thread. All emulated threads of a block are fibers of the
// worker that runs the block.
class Worker {
 public:
  void run_blocks(LaunchState& launch) {
    launch_ = &launch;
    uint64_t threads_done = 0, barriers = 0, warp_syncs = 0;
    threads_done_ = &threads_done;
    barriers_ = &barriers;
    warp_syncs_ = &warp_syncs;
    size_t n = size_t(launch.block.x) * launch.block.y * launch.block.z;
    prepare(n, launch);
    profile::launch_begin(launch.name, smem_, launch.smem);  // profile build only
    for (;;) {
      if (launch.faulted.load(std::memory_order_relaxed)) break;
      uint64_t b = launch.next_block.fetch_add(1);
      if (b >= launch.num_blocks) break;
      if (launch.blocks_descending) b = launch.num_blocks - 1 - b;
      run_block(b, n);
      profile::block_end();
    }
    profile::launch_end();
    if (smem_ != nullptr) std::free(smem_), smem_ = nullptr;
    Settings& s = settings();
    s.threads_run += threads_done;
    s.barriers += barriers;
    s.warp_syncs += warp_syncs;
    launch_ = nullptr;
  }

  // ---- called on fibers ----------------------------------------------------------
  void fiber_started(bctx::fcontext_t scheduler) {
    scheduler_ = scheduler;
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &sched_bottom_, &sched_size_);
#endif
  }
  void run_body() { launch_->body.invoke(launch_->body.ctx); }

  void thread_exit() {
    EmuThread& t = *current_;
    t.status = Status::kExited;
    --live_;
    ++exited_;
    ++*threads_done_;
    if (first_exited_ < 0) first_exited_ = t.linear;
    Warp& w = warps_[t.linear >> 5];
    unsigned bit = 1u << (t.linear & 31);
    w.exited |= bit;
    if (at_barrier_ > 0) {
      fault_here(format("thread %s exited while thread %s waits at __syncthreads (%s:%d): every thread of the "
                        "block must reach each __syncthreads (early return before a barrier)",
                        describe(t.linear).c_str(), describe(barrier_first_).c_str(), barrier_file_, barrier_line_),
                 cudaErrorLaunchFailure);
    }
    if (w.waiting_for & bit) {
      int waiter = (t.linear & ~31) + __builtin_ctz(w.pending);
      fault_here(format("thread %s exited while lane %d waits for it at %s (%s:%d)", describe(t.linear).c_str(),
                        waiter & 31, op_name(threads_[waiter].op), threads_[waiter].file, threads_[waiter].line),
                 cudaErrorLaunchFailure);
    }
#if EMU_ASAN
    __sanitizer_start_switch_fiber(nullptr, sched_bottom_, sched_size_);
#endif
    bctx::jump_fcontext(scheduler_, nullptr);
    __builtin_unreachable();
  }

  void barrier(const char* file, int line, int predicate, int reduce_op, int* result) {
    EmuThread& t = *current_;
    if (exited_ > 0) {
      fault_here(format("thread %s reached __syncthreads at %s:%d after thread %s of the same block exited: every "
                        "thread must reach each __syncthreads (early return before a barrier)",
                        describe(t.linear).c_str(), file, line, describe(first_exited_).c_str()),
                 cudaErrorLaunchFailure);
    }
    if (at_barrier_ == 0) {
      barrier_file_ = file;
      barrier_line_ = line;
      barrier_first_ = t.linear;
      barrier_acc_ = reduce_op == 1 ? 1 : 0;
    } else if (line != barrier_line_ || (file != barrier_file_ && std::strcmp(file, barrier_file_) != 0)) {
      fault_here(format("threads wait at different __syncthreads: thread %s at %s:%d, thread %s at %s:%d",
                        describe(t.linear).c_str(), file, line, describe(barrier_first_).c_str(), barrier_file_,
                        barrier_line_),
                 cudaErrorLaunchFailure);
    }
    if (reduce_op == 0) barrier_acc_ += predicate != 0;
    else if (reduce_op == 1) barrier_acc_ &= predicate != 0;
    else barrier_acc_ |= predicate != 0;
    ++at_barrier_;
    t.status = Status::kBarrier;
    t.file = file;
    t.line = line;
    if (at_barrier_ == live_) {
      for (int i = 0; i < n_; ++i)
        if (threads_[i].status == Status::kBarrier) threads_[i].status = Status::kRunnable;
      at_barrier_ = 0;
      barrier_result_ = barrier_acc_;
      ++*barriers_;
      profile::barrier_passed();
    }
    yield(t);
    if (result != nullptr) *result = barrier_result_;
  }

  uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, ShuffleMode mode, int operand, int width,
                   const char* file, int line) {
    EmuThread& t = *current_;
    int lane = t.linear & 31, base = t.linear & ~31;
    Warp& w = warps_[t.linear >> 5];
    unsigned bit = 1u << lane;
    if (!(mask & bit))
      fault_here(format("%s at %s:%d: thread %s calls it with mask 0x%08x that does not include its own lane %d",
                        op_name(op), file, line, describe(t.linear).c_str(), mask, lane),
                 cudaErrorLaunchFailure);
    if (mask & ~w.exists)
      fault_here(format("%s at %s:%d: mask 0x%08x names lanes that do not exist (block of %d threads)", op_name(op),
                        file, line, mask, n_),
                 cudaErrorLaunchFailure);
    if (mask & w.exited)
      fault_here(format("%s at %s:%d: mask 0x%08x names lane %d, which has exited", op_name(op), file, line, mask,
                        __builtin_ctz(mask & w.exited)),
                 cudaErrorLaunchFailure);
    if (op == WarpOp::kShuffle && (width < 1 || width > 32 || (width & (width - 1)) != 0))
      fault_here(format("%s at %s:%d: width %d is not a power of two in [1, 32]", op_name(op), file, line, width),
                 cudaErrorLaunchFailure);
    unsigned overlap = w.pending & mask;
    if (overlap != 0) {
      const EmuThread& other = threads_[base + __builtin_ctz(overlap)];
      if (other.mask != mask || other.op != op)
        fault_here(format("lanes of one warp at different warp operations: lane %d at %s (%s:%d, mask 0x%08x), "
                          "lane %d at %s (%s:%d, mask 0x%08x)",
                          lane, op_name(op), file, line, mask, other.linear & 31, op_name(other.op), other.file,
                          other.line, other.mask),
                   cudaErrorLaunchFailure);
    } else if (w.waiting_for & bit) {
      int waiter = base + __builtin_ctz(w.pending);
      fault_here(format("lane %d calls %s (%s:%d) with mask 0x%08x while lane %d waits for it at %s (%s:%d) with "
                        "mask 0x%08x",
                        lane, op_name(op), file, line, mask, waiter & 31, op_name(threads_[waiter].op),
                        threads_[waiter].file, threads_[waiter].line, threads_[waiter].mask),
                 cudaErrorLaunchFailure);
    }
    t.op = op;
    t.mask = mask;
    t.value = value;
    t.mode = mode;
    t.operand = operand;
    t.width = width;
    t.file = file;
    t.line = line;
    t.status = Status::kWarp;
    w.pending |= bit;
    w.waiting_for |= mask;
    if ((w.pending & mask) == mask) complete_warp_op(w, base, mask, op);
    yield(t);
    return t.result;
  }

  unsigned active_mask() const {
    const Warp& w = warps_[current_->linear >> 5];
    return w.exists & ~w.exited;
  }

  // Never returns: the faulting fiber is abandoned, so nothing on its stack is
  // destroyed. Heap buffers are released here before switching away.
  [[noreturn]] void fault_here(std::string&& message, cudaError_t code) {
    EmuThread& t = *current_;
    {
      std::string full = format("kernel %s, block (%u,%u,%u): %s", launch_->name, block_.block_idx.x,
                                block_.block_idx.y, block_.block_idx.z, message.c_str());
      std::string().swap(message);
      record_fault(std::move(full), code);
    }
    t.status = Status::kFaulted;
    stacks_.mark_dirty(static_cast<size_t>(t.linear));
    yield(t);  // the scheduler never resumes a faulted block
    __builtin_unreachable();
  }

  std::string describe(int linear) const {
    if (linear < 0) return "?";
    const uint3& i = threads_[linear].ctx.thread_idx;
    return format("(%u,%u,%u)", i.x, i.y, i.z);
  }

  bool in_kernel() const { return current_ != nullptr; }

 private:
  void prepare(size_t n, LaunchState& launch) {
    if (threads_.size() < n) threads_.resize(n);
    warps_.resize((n + 31) / 32);
    stacks_.reserve(n, launch.stack_bytes);
    order_.resize(n);
    // Exact-size dynamic shared memory so ASan reports overruns.
    if (posix_memalign(reinterpret_cast<void**>(&smem_), 128, std::max<size_t>(launch.smem, 1)) != 0)
      throw std::runtime_error("emu/exec.cpp: cannot allocate dynamic shared memory");
#if EMU_ASAN
    if (launch.smem == 0) __asan_poison_memory_region(smem_, 1);
#endif
  }

  void record_fault(std::string&& message, cudaError_t code) {
    faulted_ = true;
    std::lock_guard<std::mutex> lock(launch_->fault_mutex);
    if (!launch_->faulted.exchange(true)) {
      launch_->fault = std::move(message);
      launch_->fault_code = code;
    }
  }

  void yield(EmuThread& t) {
    if (t.status != Status::kFaulted) land_early_copies(t.ctx);  // others may read them from here on
#if EMU_ASAN
    __sanitizer_start_switch_fiber(&t.fake_stack, sched_bottom_, sched_size_);
#endif
    bctx::transfer_t back = bctx::jump_fcontext(scheduler_, nullptr);
    scheduler_ = back.fctx;
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(t.fake_stack, &sched_bottom_, &sched_size_);
#endif
  }

  void resume(EmuThread& t) {
    current_ = &t;
    tls_current_thread = &t.ctx;
#if EMU_ASAN
    __sanitizer_start_switch_fiber(&sched_fake_stack_, stacks_.bottom(static_cast<size_t>(t.linear)),
                                   stacks_.stack_bytes());
#endif
    bctx::transfer_t back = bctx::jump_fcontext(t.fiber, nullptr);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(sched_fake_stack_, nullptr, nullptr);
#endif
    t.fiber = back.fctx;
    tls_current_thread = nullptr;
    current_ = nullptr;
  }

  void complete_warp_op(Warp& w, int base, unsigned mask, WarpOp op) {
    uint64_t combined = op == WarpOp::kAll ? 1 : 0;
    if (op == WarpOp::kReduceMin) combined = ~0u;
    for (unsigned m = mask; m != 0; m &= m - 1) {
      int lane = __builtin_ctz(m);
      const EmuThread& t = threads_[base + lane];
      switch (op) {
        case WarpOp::kBallot: combined |= (t.value & 1) << lane; break;
        case WarpOp::kAll: combined &= t.value & 1; break;
        case WarpOp::kAny: combined |= t.value & 1; break;
        case WarpOp::kReduceAdd: combined = static_cast<uint32_t>(combined + t.value); break;
        case WarpOp::kReduceMin: combined = std::min<uint64_t>(combined, static_cast<uint32_t>(t.value)); break;
        case WarpOp::kReduceMax: combined = std::max<uint64_t>(combined, static_cast<uint32_t>(t.value)); break;
        default: break;
      }
    }
    for (unsigned m = mask; m != 0; m &= m - 1) {
      int lane = __builtin_ctz(m);
      EmuThread& t = threads_[base + lane];
      if (op == WarpOp::kShuffle) {
        // PTX shfl.sync semantics: lanes are split into segments of `width`; a source
        // outside the caller's segment (up/down/xor) yields the caller's own value.
        int seg_start = lane & ~(t.width - 1), seg_end = seg_start + t.width - 1;
        int src = lane;
        bool valid = true;
        switch (t.mode) {
          case ShuffleMode::kIdx: src = seg_start + (t.operand & (t.width - 1)); break;
          case ShuffleMode::kUp: src = lane - t.operand; valid = src >= seg_start; break;
          case ShuffleMode::kDown: src = lane + t.operand; valid = src <= seg_end; break;
          case ShuffleMode::kXor: src = lane ^ t.operand; valid = src >= 0 && src <= seg_end && src < 32; break;
        }
        if (!valid) src = lane;
        if (!(mask & (1u << src))) {
          current_->status = Status::kFaulted;
          fault_here(format("__shfl*_sync at %s:%d: lane %d reads lane %d, which is not in mask 0x%08x", t.file,
                            t.line, lane, src, mask),
                     cudaErrorLaunchFailure);
        }
        t.result = threads_[base + src].value;
      } else {
        t.result = combined;
      }
      t.status = Status::kRunnable;
    }
    w.pending &= ~mask;
    w.waiting_for = 0;
    for (unsigned m = w.pending; m != 0; m &= m - 1) w.waiting_for |= threads_[base + __builtin_ctz(m)].mask;
    ++*warp_syncs_;
  }

  void run_block(uint64_t b, size_t n_threads) {
    LaunchState& L = *launch_;
    n_ = static_cast<int>(n_threads);
    block_.grid_dim = L.grid;
    block_.block_dim = L.block;
    block_.block_idx = make_uint3(static_cast<unsigned>(b % L.grid.x), static_cast<unsigned>((b / L.grid.x) % L.grid.y),
                                  static_cast<unsigned>(b / (uint64_t(L.grid.x) * L.grid.y)));
    // NaN-poison dynamic shared memory: 0xFF bytes are NaN as fp32/bf16/fp16 and -1 as ints.
    if (L.smem > 0) std::memset(smem_, 0xFF, L.smem);
    block_.dynamic_smem = smem_;
    for (int i = 0; i < n_; ++i) {
      EmuThread& t = threads_[i];
      t.ctx.thread_idx = make_uint3(i % L.block.x, (i / L.block.x) % L.block.y, i / (L.block.x * L.block.y));
      t.ctx.block = &block_;
      t.ctx.async_copies.clear();  // copies a previous block never waited for never land
      t.ctx.async_groups.clear();
      t.ctx.copy_rng = L.order == RunOrder::kForward ? 0 : ((L.seed * 0x9E3779B97F4A7C15ull + b) << 10 | i) | 1;
      t.linear = i;
      t.status = Status::kRunnable;
      t.fake_stack = nullptr;
      stacks_.clean(static_cast<size_t>(i));
      t.fiber = bctx::make_fcontext(stacks_.top(static_cast<size_t>(i)), stacks_.usable_bytes(), fiber_entry);
    }
    for (size_t wi = 0; wi < warps_.size(); ++wi) {
      int lanes = std::min(32, n_ - static_cast<int>(wi) * 32);
      warps_[wi] = Warp{lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u), 0, 0, 0};
    }
    live_ = n_;
    exited_ = 0;
    at_barrier_ = 0;
    first_exited_ = -1;
    barrier_first_ = -1;
    faulted_ = false;
    std::mt19937_64 rng(L.seed * 0x9E3779B97F4A7C15ull + b);
    while (live_ > 0 && !faulted_) {
      bool ran = false;
      if (L.order == RunOrder::kForward) {
        for (int i = 0; i < n_ && !faulted_; ++i)
          if (threads_[i].status == Status::kRunnable) resume(threads_[i]), ran = true;
      } else if (L.order == RunOrder::kReverse) {
        for (int i = n_ - 1; i >= 0 && !faulted_; --i)
          if (threads_[i].status == Status::kRunnable) resume(threads_[i]), ran = true;
      } else {
        shuffle_order(rng);
        // Warps run at uneven speeds: each sits out a pass with probability 1/2, so
        // between barriers one warp gets warp operations ahead of another (a pass
        // that ran nothing is run again with every warp).
        for (int attempt = 0; attempt < 2 && !ran && !faulted_; ++attempt) {
          const uint64_t stalled = attempt == 0 ? rng() : 0;
          for (int k = 0; k < n_ && !faulted_; ++k) {
            EmuThread& t = threads_[order_[k]];
            if (t.status == Status::kRunnable && !((stalled >> (order_[k] >> 5)) & 1)) resume(t), ran = true;
          }
        }
      }
      if (!ran && !faulted_) report_deadlock();
    }
    if (faulted_) {
      // Fibers abandoned mid-kernel: their stacks need unpoisoning before reuse.
      for (int i = 0; i < n_; ++i)
        if (threads_[i].status != Status::kExited) stacks_.mark_dirty(static_cast<size_t>(i));
    }
  }

  // Warps in random order, lanes of each warp in random order.
  void shuffle_order(std::mt19937_64& rng) {
    int num_warps = (n_ + 31) / 32;
    std::vector<int>& warp_order = warp_order_;
    warp_order.resize(num_warps);
    for (int w = 0; w < num_warps; ++w) warp_order[w] = w;
    std::shuffle(warp_order.begin(), warp_order.end(), rng);
    int k = 0;
    for (int w : warp_order) {
      int start = k;
      for (int lane = 0; lane < 32 && w * 32 + lane < n_; ++lane) order_[k++] = w * 32 + lane;
      std::shuffle(order_.begin() + start, order_.begin() + k, rng);
    }
  }

  void report_deadlock() {
    std::string msg = "deadlock: no thread can run;";
    int shown = 0;
    for (int i = 0; i < n_ && shown < 4; ++i) {
      const EmuThread& t = threads_[i];
      if (t.status == Status::kBarrier) {
        msg += format(" thread %s waits at __syncthreads (%s:%d);", describe(i).c_str(), t.file, t.line);
        ++shown;
      } else if (t.status == Status::kWarp) {
        const Warp& w = warps_[i >> 5];
        unsigned missing = t.mask & ~w.pending;
        msg += format(" thread %s waits at %s (%s:%d) for lanes 0x%08x;", describe(i).c_str(), op_name(t.op), t.file,
                      t.line, missing);
        ++shown;
      }
    }
    LaunchState& L = *launch_;
    std::string full = format("kernel %s, block (%u,%u,%u): %s", L.name, block_.block_idx.x, block_.block_idx.y,
                              block_.block_idx.z, msg.c_str());
    record_fault(std::move(full), cudaErrorLaunchFailure);
  }

  LaunchState* launch_ = nullptr;
  std::vector<EmuThread> threads_;
  std::vector<Warp> warps_;
  std::vector<int> order_, warp_order_;
  StackPool stacks_;
  BlockContext block_{};
  unsigned char* smem_ = nullptr;
  EmuThread* current_ = nullptr;
  bctx::fcontext_t scheduler_ = nullptr;
  const void* sched_bottom_ = nullptr;
  size_t sched_size_ = 0;
  void* sched_fake_stack_ = nullptr;
  int n_ = 0, live_ = 0, exited_ = 0, at_barrier_ = 0, first_exited_ = -1, barrier_first_ = -1;
  const char* barrier_file_ = "";
  int barrier_line_ = 0, barrier_acc_ = 0, barrier_result_ = 0;
  bool faulted_ = false;
  uint64_t* threads_done_ = nullptr;
  uint64_t* barriers_ = nullptr;
  uint64_t* warp_syncs_ = nullptr;
};

thread_local Worker* tls_worker = nullptr;

Worker& this_worker() {
  thread_local Worker worker;
  tls_worker = &worker;
  return worker;
}

void fiber_entry(bctx::transfer_t transfer) {
  Worker* w = tls_worker;
  w->fiber_started(transfer.fctx);
  try {
    w->run_body();
  } catch (const std::exception& e) {
    w->fault_here(std::string("exception thrown in device code: ") + e.what(), cudaErrorLaunchFailure);
  }
  w->thread_exit();
}

Worker& fiber_worker(const char* what) {
  Worker* w = tls_worker;
  if (w == nullptr || !w->in_kernel()) fail_outside_kernel(what);
  return *w;
}

// OS threads that run blocks alongside the launching thread.
class Pool {
 public:
  explicit Pool(int helpers) {
    for (int i = 0; i < helpers; ++i) threads_.emplace_back([this] { loop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }
  int helpers() const { return static_cast<int>(threads_.size()); }
  void run(LaunchState& launch) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &launch;
      busy_ = static_cast<int>(threads_.size());
      ++generation_;
    }
    wake_.notify_all();
    this_worker().run_blocks(launch);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return busy_ == 0; });
    job_ = nullptr;
  }

 private:
  void loop() {
    uint64_t seen = 0;
    for (;;) {
      LaunchState* job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      this_worker().run_blocks(*job);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --busy_;
      }
      done_.notify_all();
    }
  }
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  LaunchState* job_ = nullptr;
  uint64_t generation_ = 0;
  int busy_ = 0;
  bool stop_ = false;
};

struct Engine {
  std::mutex launch_mutex;  // one grid at a time: launches are synchronous
  std::unique_ptr<Pool> pool;
  int pool_helpers = -1;
};

Engine& engine() {
  static Engine instance;
  return instance;
}

}  // namespace

void fail_outside_kernel(const char* what) {
  throw std::runtime_error(std::string("emu: ") + what + " used outside a kernel launched through LAUNCH_KERNEL");
}

void sync_threads(const char* file, int line) { fiber_worker("__syncthreads").barrier(file, line, 0, 0, nullptr); }

int sync_threads_reduce(int predicate, int op, const char* file, int line) {
  int result = 0;
  fiber_worker("__syncthreads_count/and/or").barrier(file, line, predicate, op, &result);
  return result;
}

uint64_t warp_rendezvous(WarpOp op, unsigned mask, uint64_t value, ShuffleMode mode, int operand, int width,
                         const char* file, int line) {
  return fiber_worker(op_name(op)).warp_op(op, mask, value, mode, operand, width, file, line);
}

unsigned active_mask() { return fiber_worker("__activemask").active_mask(); }

void device_fault(const char* kind, const char* message, const char* file, int line) {
  fiber_worker(kind).fault_here(format("%s at %s:%d: %s", kind, file, line, message), cudaErrorLaunchFailure);
}

void misaligned_access(const void* address, size_t alignment, const char* what) {
  fiber_worker(what).fault_here(format("misaligned address %p: %s needs %zu-byte alignment (the address is %zu "
                                       "bytes past a boundary)", address, what, alignment,
                                       static_cast<size_t>(reinterpret_cast<uintptr_t>(address) % alignment)),
                                cudaErrorMisalignedAddress);
}

void device_assert_fail(const char* expr, const char* file, int line, const char* function) {
  Worker* w = tls_worker;
  if (w == nullptr || !w->in_kernel()) __assert_fail(expr, file, static_cast<unsigned>(line), function);
  w->fault_here(format("device assert failed at %s:%d in %s: %s (thread %s)", file, line, function, expr,
                       w->describe(static_cast<int>(tls_current_thread->thread_idx.x +
                                                    tls_current_thread->block->block_dim.x *
                                                        (tls_current_thread->thread_idx.y +
                                                         tls_current_thread->block->block_dim.y *
                                                             tls_current_thread->thread_idx.z)))
                           .c_str()),
                cudaErrorAssert);
}

namespace {

// Runs a checked launch to completion; the fault code (its text in last_kernel_fault).
cudaError_t execute_grid(KernelInvoker body, dim3 grid, dim3 block, size_t smem, const char* name, RunOrder order,
                         uint64_t seed, size_t stack_bytes) {
  LaunchState launch;
  launch.body = body;
  launch.grid = grid;
  launch.block = block;
  launch.smem = smem;
  launch.name = name;
  launch.num_blocks = uint64_t(grid.x) * grid.y * grid.z;
  launch.order = order;
  launch.seed = seed;
  launch.stack_bytes = stack_bytes;
  Settings& s = settings();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.launch_mutex);
  int workers;
  {
    std::lock_guard<std::mutex> slock(s.mutex);
    workers = s.workers;
    launch.blocks_descending = s.blocks_descending;
  }
  int helpers = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(workers), launch.num_blocks)) - 1;
  if (helpers <= 0) {
    this_worker().run_blocks(launch);
  } else {
    if (!e.pool || e.pool_helpers != workers - 1) {
      e.pool.reset();
      e.pool = std::make_unique<Pool>(workers - 1);
      e.pool_helpers = workers - 1;
    }
    e.pool->run(launch);
  }
  if (launch.faulted.load()) {
    note_kernel_fault(launch.fault_code, launch.fault);
    record_error(launch.fault_code);
    set_kernel_fault(launch.fault);
    return launch.fault_code;
  }
  set_kernel_fault("");
  return cudaSuccess;
}

}  // namespace

cudaError_t run_grid(const void* kernel_id, const char* kernel_name, dim3 grid, dim3 block, size_t dynamic_smem,
                     cudaStream_t stream, KernelInvoker body, std::shared_ptr<const void> keep) {
  const std::string& label = kernel_label(kernel_id, kernel_name);
  if (tls_current_thread != nullptr) {
    record_error(cudaErrorNotSupported);
    set_kernel_fault("kernel " + label + ": launching from device code is not supported");
    return cudaErrorNotSupported;
  }
  Settings& s = settings();
  DeviceConfig dev;
  RunOrder order;
  uint64_t seed;
  size_t stack_bytes;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    dev = s.device;
    order = s.order;
    seed = s.seed;
    stack_bytes = s.stack_bytes;
  }
  uint64_t threads = uint64_t(block.x) * block.y * block.z;
  std::string problem;
  cudaError_t code = cudaErrorInvalidConfiguration;
  if (threads == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0) problem = "empty grid or block";
  else if (threads > static_cast<uint64_t>(dev.max_threads_per_block) || block.x > 1024 || block.y > 1024 ||
           block.z > 64)
    problem = format("block (%u,%u,%u) exceeds the device limits", block.x, block.y, block.z);
  else if (grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
    problem = format("grid (%u,%u,%u) exceeds the device limits", grid.x, grid.y, grid.z);
  else if (int bound = kernel_launch_bound(kernel_id); bound > 0 && threads > static_cast<uint64_t>(bound)) {
    // The driver refuses a block larger than the kernel's maxThreadsPerBlock.
    problem = format("a block of %llu threads exceeds the kernel's __launch_bounds__(%d)",
                     static_cast<unsigned long long>(threads), bound);
    code = cudaErrorLaunchOutOfResources;
  } else {
    size_t limit = std::max(dev.smem_per_block, kernel_max_dynamic_smem(kernel_id));
    if (dynamic_smem > limit) {
      problem = format("%zu bytes of dynamic shared memory exceed the %zu allowed (opt in with "
                       "cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes))",
                       dynamic_smem, limit);
      code = cudaErrorInvalidValue;
    }
  }
  if (!problem.empty()) {  // configuration errors are not sticky, as on a GPU
    record_error(code);
    set_kernel_fault("kernel " + label + ": " + problem);
    return code;
  }
  std::string fault;
  if (cudaError_t sticky = surface_fault(&fault); sticky != cudaSuccess) {
    record_error(sticky);
    set_kernel_fault("kernel " + label + " not run: " + fault);
    return sticky;
  }
  if (injected_fault(label, &fault)) return cudaSuccess;  // asynchronous: surfaces at the next launch or sync
  if (defers(stream)) {
    // Queued: a fault inside the kernel surfaces at the synchronisation that runs it.
    enqueue(stream, [=, name = label.c_str()] {
      if (cudaError_t code = execute_grid(body, grid, block, dynamic_smem, name, order, seed, stack_bytes);
          code != cudaSuccess) {
        std::fprintf(stderr, "emu: queued kernel faulted: %s\n", last_kernel_fault().c_str());
        report_deferred_error(code);
      }
      (void)keep;  // owns the bound arguments until the kernel has run
    }, "kernel");
    return cudaSuccess;
  }
  if (cudaError_t queued = drain_legacy(); queued != cudaSuccess) {  // the legacy stream waits for the others
    record_error(queued);
    return queued;
  }
  return execute_grid(body, grid, block, dynamic_smem, label.c_str(), order, seed, stack_bytes);
}

}  // namespace emu
}  // namespace gpt2

long long int clock64() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
