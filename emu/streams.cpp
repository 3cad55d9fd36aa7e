// The deferred stream mode (docs/emulator.md, "Streams"): work issued on a
// created stream is queued per stream and run at a synchronisation point, in a
// seeded random interleaving that keeps only what CUDA guarantees:
//   * order within a stream;
//   * cudaStreamWaitEvent: a wait item depends on the event's recording item;
//   * the legacy default stream: its operations run at once, after every
//     blocking stream's queued work (drain_legacy); later blocking-stream work
//     then comes after them trivially;
//   * synchronising calls run exactly what they wait for (the closure of the
//     target's predecessors), nothing more.
// Running only the needed closure (not "whatever happens to be runnable")
// makes the set of items a synchronisation point runs a function of the
// program alone: every rank of an emulated NCCL job runs the same collectives
// at the same synchronisation point, so a collective (MPI, which blocks the
// host thread) never waits for a rank that has gone on into a host MPI call.
// Only the order inside that set is random.
//
// Single-threaded: the draining host thread runs the items itself, under one
// recursive mutex; work issued from inside a running item runs at once.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <unordered_map>
#include <vector>

#include "emu/control.h"
#include "emu/runtime_internal.h"
#include "emu/settings.h"

namespace gpt2 {
namespace emu {
namespace {

struct Item {
  uint64_t id;
  uint64_t after;  // another item that must run first (event wait, NCCL issue order); 0: none
  std::function<void()> work;
  const char* what;
};

struct Queue {
  cudaStream_t stream;
  bool blocking;
  std::deque<Item> items;  // ids increase from front to back
  size_t need = 0;         // the first `need` items must run in the current drain
};

struct Scheduler {
  std::recursive_mutex mutex;
  std::atomic<bool> deferred{false};
  std::vector<std::unique_ptr<Queue>> queues;  // creation order: the same on every rank
  std::unordered_map<cudaStream_t, Queue*> by_stream;
  std::unordered_map<uint64_t, Queue*> where;  // pending item -> its queue
  uint64_t next_id = 1;
  std::mt19937_64 rng{1};
  cudaError_t error = cudaSuccess;  // first failure of a queued item, not yet reported
  std::atomic<uint64_t> run{0};
  uint64_t drains = 0;  // synchronisation points that ran queued items
  uint64_t seed = 1;
  bool from_env = false;  // GPT2_EMU_STREAMS=deferred: one summary line at exit
  // deferred-late: a collective runs only when no other head can, so work that
  // should have waited for one sees its buffers before the collective writes them.
  bool collectives_last = false;

  Scheduler() {
    Settings& s = settings();
    std::lock_guard<std::mutex> lock(s.mutex);
    deferred = from_env = s.stream_mode == StreamMode::kDeferred;
    collectives_last = s.collectives_last;
    seed = s.stream_seed;
    rng.seed(seed);
  }
  // Shows that the run was deferred (tests grep it); the default mode prints nothing.
  ~Scheduler() {
    if (from_env)
      std::fprintf(stderr, "emu: deferred streams (seed %llu): %llu queued items run at %llu synchronisation points\n",
                   static_cast<unsigned long long>(seed), static_cast<unsigned long long>(run.load()),
                   static_cast<unsigned long long>(drains));
  }
};

Scheduler& sched() {
  static Scheduler instance;
  return instance;
}

// Set while the scheduler runs an item on this thread: nested calls run at once.
thread_local bool tls_in_item = false;

bool pending(Scheduler& s, uint64_t id) { return id != 0 && s.where.count(id) != 0; }

// Marks item `id` and, transitively, everything it waits for as needed.
void mark(Scheduler& s, uint64_t id) {
  std::vector<uint64_t> work{id};
  while (!work.empty()) {
    const uint64_t cur = work.back();
    work.pop_back();
    auto it = s.where.find(cur);
    if (it == s.where.end()) continue;
    Queue& q = *it->second;
    auto pos = std::lower_bound(q.items.begin(), q.items.end(), cur,
                                [](const Item& item, uint64_t v) { return item.id < v; });
    const size_t upto = static_cast<size_t>(pos - q.items.begin()) + 1;
    for (size_t i = q.need; i < upto; ++i)
      if (pending(s, q.items[i].after)) work.push_back(q.items[i].after);
    q.need = std::max(q.need, upto);
  }
}

// Runs every needed item, picking uniformly among the stream heads whose
// dependency has run. Dependencies only point to earlier-issued items, so some
// head is always runnable.
cudaError_t run_needed(Scheduler& s) {
  std::vector<Queue*> ready;
  for (;;) {
    ready.clear();
    bool any = false;
    for (auto& q : s.queues) {
      if (q->need == 0) continue;
      any = true;
      if (!pending(s, q->items.front().after)) ready.push_back(q.get());
    }
    if (!any) break;
    if (ready.empty()) {
      std::fprintf(stderr, "emu: deferred streams: no runnable item (internal error)\n");
      std::abort();
    }
    size_t choices = ready.size();
    if (s.collectives_last) {
      const auto first_collective = std::stable_partition(ready.begin(), ready.end(), [](const Queue* r) {
        return std::strcmp(r->items.front().what, kCollectiveItem) != 0;
      });
      if (first_collective != ready.begin()) choices = static_cast<size_t>(first_collective - ready.begin());
    }
    Queue& q = *ready[s.rng() % choices];
    Item item = std::move(q.items.front());
    q.items.pop_front();
    --q.need;
    tls_in_item = true;
    try {
      item.work();
    } catch (...) {  // queued work reports through report_deferred_error; never unwind the drain
      if (s.error == cudaSuccess) s.error = cudaErrorUnknown;
    }
    tls_in_item = false;
    s.where.erase(item.id);
    s.run.fetch_add(1);
  }
  cudaError_t e = s.error;
  s.error = cudaSuccess;
  return e;
}

template <class Mark>
cudaError_t drain(Mark&& marker) {
  Scheduler& s = sched();
  // The running item is already ordered; the synchronous mode never queues (no lock taken).
  if (tls_in_item || !s.deferred.load(std::memory_order_relaxed)) return cudaSuccess;
  std::lock_guard<std::recursive_mutex> lock(s.mutex);
  if (s.where.empty() && s.error == cudaSuccess) return cudaSuccess;
  marker(s);
  ++s.drains;
  return run_needed(s);
}

}  // namespace

bool defers(cudaStream_t stream) {
  if (!sched().deferred.load(std::memory_order_relaxed) || tls_in_item) return false;
  return stream != nullptr && stream != cudaStreamLegacy && stream != cudaStreamPerThread;
}

uint64_t enqueue(cudaStream_t stream, std::function<void()> work, const char* what, uint64_t after) {
  Scheduler& s = sched();
  std::lock_guard<std::recursive_mutex> lock(s.mutex);
  Queue*& q = s.by_stream[stream];
  if (q == nullptr) {
    s.queues.push_back(std::make_unique<Queue>(Queue{stream, stream_is_blocking(stream), {}, 0}));
    q = s.queues.back().get();
  }
  const uint64_t id = s.next_id++;
  q->items.push_back(Item{id, pending(s, after) ? after : 0, std::move(work), what});
  s.where[id] = q;
  return id;
}

bool item_pending(uint64_t id) {
  Scheduler& s = sched();
  std::lock_guard<std::recursive_mutex> lock(s.mutex);
  return pending(s, id);
}

uint64_t last_item(cudaStream_t stream) {
  Scheduler& s = sched();
  std::lock_guard<std::recursive_mutex> lock(s.mutex);
  auto it = s.by_stream.find(stream);
  return it == s.by_stream.end() || it->second->items.empty() ? 0 : it->second->items.back().id;
}

cudaError_t drain_item(uint64_t id) {
  return drain([id](Scheduler& s) { mark(s, id); });
}

cudaError_t drain_stream(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return drain_legacy();
  return drain([stream](Scheduler& s) {
    auto it = s.by_stream.find(stream);
    if (it != s.by_stream.end() && !it->second->items.empty()) mark(s, it->second->items.back().id);
  });
}

cudaError_t drain_legacy() {
  return drain([](Scheduler& s) {
    for (auto& q : s.queues)
      if (q->blocking && !q->items.empty()) mark(s, q->items.back().id);
  });
}

cudaError_t drain_all() {
  return drain([](Scheduler& s) {
    for (auto& q : s.queues)
      if (!q->items.empty()) mark(s, q->items.back().id);
  });
}

void forget_stream(cudaStream_t stream) {
  drain_stream(stream);
  Scheduler& s = sched();
  std::lock_guard<std::recursive_mutex> lock(s.mutex);
  auto it = s.by_stream.find(stream);
  if (it == s.by_stream.end() || !it->second->items.empty()) return;
  Queue* q = it->second;
  s.by_stream.erase(it);
  s.queues.erase(std::find_if(s.queues.begin(), s.queues.end(), [q](const auto& p) { return p.get() == q; }));
}

void report_deferred_error(cudaError_t code) {
  Scheduler& s = sched();
  std::lock_guard<std::recursive_mutex> lock(s.mutex);
  if (s.error == cudaSuccess) s.error = code;
}

// ---- control API ------------------------------------------------------------------------
void set_stream_mode(StreamMode mode, uint64_t seed) {
  drain_all();
  Scheduler& s = sched();
  std::lock_guard<std::recursive_mutex> lock(s.mutex);
  s.deferred = mode == StreamMode::kDeferred;
  s.seed = seed;
  s.rng.seed(seed);
}

StreamMode stream_mode() { return sched().deferred.load() ? StreamMode::kDeferred : StreamMode::kSync; }

size_t pending_stream_items() {
  Scheduler& s = sched();
  std::lock_guard<std::recursive_mutex> lock(s.mutex);
  return s.where.size();
}

uint64_t deferred_items_run() { return sched().run.load(); }

}  // namespace emu
}  // namespace gpt2
