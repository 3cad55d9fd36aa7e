// dist_bench: the collectives of one data-parallel training step, replayed on
// the real communicators with a GPT-2 parameter table, for each ZeRO stage, as
// train/data_parallel.cpp issues them:
//   stage 0: all-reduce of the whole gradient;
//   stage 1: reduce-scatter of the gradient, all-gather of the parameters;
//   stage 2: reduce_scatter_v per backward unit (layers L-1..0, the tied wte
//            in chunks of rows, then the rest: wpe, lnf), sliced at 4M elements
//            (GPT2_ZERO2_SLICE_ELEMS) like the trainer, all-gather of the
//            parameters;
// on device buffers at world > 1 (--comm nccl) stages 0/1 go in 25 MiB buckets
// of layers (reduce_pieces, GPT2_DP_BUCKET_BYTES) and stage 2 exchanges each
// layer unit and wte chunk in one call, as the trainer's overlapped path does. At world 1
// stages 0/1 issue no buffer collective (the trainer's neither). Host scalars
// go through the MPI communicator as in the trainer: the stop check, the loss
// sum, and the grad-norm sum (stages 1/2).
//
// Prints, per stage, one row per (communicator, kind of call) with calls,
// payload and bytes this rank sends per step (the interface's ring-model
// counters, distributed/comm.h), a total row with the replay's time per step,
// and a machine-readable summary line. With --busbw-iters N > 0 it then times
// all_reduce, reduce_scatter, all_gather and broadcast of the padded parameter
// buffer and prints nccl-tests' algbw and busbw (time averaged over ranks).
//
//   mpirun -np 2 build/distributed/dist_bench --layers 12 --channels 768 --vocab 50304 --seq 1024
//   mpirun -np 2 build/distributed/dist_bench_cuda --comm nccl --dtype bf16 --busbw-iters 20  (GPUs)
//   GPT2_EMU_DEVICE_COUNT=2 mpirun -np 2 -x GPT2_EMU_DEVICE_COUNT build/distributed/dist_bench_emu --comm nccl
//
// --comm nccl exists only in the builds with GPT2_DIST_BENCH_NCCL (dist_bench_emu:
// the emulator's CUDA and NCCL; dist_bench_cuda: the real ones); rank r takes
// device local_rank.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "distributed/comm.h"
#include "distributed/context.h"
#include "distributed/preempt.h"
#include "distributed/zero_plan.h"

#ifdef GPT2_DIST_BENCH_NCCL
#include <cuda_runtime_api.h>

#include "distributed/comm_nccl.h"
#endif

namespace gpt2 {
namespace {

struct BenchOptions {
  int layers = 12, channels = 768, vocab = 50304, seq = 1024, steps = 5, busbw_iters = 0;
  std::string comm = "mpi", dtype = "fp32";
};

BenchOptions parse(int argc, char** argv) {
  BenchOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) throw std::runtime_error("option " + a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--comm" || a == "--dtype") {
      const bool comm = a == "--comm";
      if (comm ? (v != "mpi" && v != "nccl") : (v != "fp32" && v != "bf16"))
        throw std::runtime_error("option " + a + ": '" + v + "' is not " + (comm ? "mpi|nccl" : "fp32|bf16"));
      (comm ? o.comm : o.dtype) = v;
      continue;
    }
    char* end = nullptr;
    const long x = std::strtol(v.c_str(), &end, 10);
    const long least = a == "--busbw-iters" ? 0 : 1;
    if (*end != '\0' || x < least || x > 1000000)
      throw std::runtime_error("option " + a + ": '" + v + "' is not a " + (least ? "positive" : "non-negative") +
                               " integer");
    if (a == "--layers") o.layers = static_cast<int>(x);
    else if (a == "--channels") o.channels = static_cast<int>(x);
    else if (a == "--vocab") o.vocab = static_cast<int>(x);
    else if (a == "--seq") o.seq = static_cast<int>(x);
    else if (a == "--steps") o.steps = static_cast<int>(x);
    else if (a == "--busbw-iters") o.busbw_iters = static_cast<int>(x);
    else throw std::runtime_error("unknown option '" + a + "'");
  }
#ifndef GPT2_DIST_BENCH_NCCL
  if (o.comm == "nccl")
    throw std::runtime_error("--comm nccl: this build has no NCCL (use build/distributed/dist_bench_emu or _cuda)");
#endif
  if (o.dtype == "bf16" && o.comm != "nccl") throw std::runtime_error("--dtype bf16 needs --comm nccl");
  return o;
}

size_t env_count(const char* name, size_t fallback) {  // as train/data_parallel.cpp
  const char* env = std::getenv(name);
  if (env == nullptr) return fallback;
  const long long v = std::atoll(env);
  if (v < 1) throw std::runtime_error(std::string(name) + " must be a positive count");
  return static_cast<size_t>(v);
}

// GPT-2's parameter tensors in llm.c's order; the tied wte's ZeRO-2 units are
// chunks of rows as in model/gpt2.cpp's ParamLayout::wte_chunk_rows (a layer's
// size rounded down to 64 rows, at least 64; GPT2_TEST_WTE_CHUNK_ROWS).
std::vector<ParamTensorSpec> gpt2_table(const BenchOptions& o) {
  const size_t L = static_cast<size_t>(o.layers), C = static_cast<size_t>(o.channels);
  const size_t V = static_cast<size_t>(o.vocab), T = static_cast<size_t>(o.seq);
  const int l = o.layers;
  const size_t layer_numel = 12 * C * C + 13 * C;
  const size_t rows = std::min(env_count("GPT2_TEST_WTE_CHUNK_ROWS", std::max<size_t>(layer_numel / C / 64 * 64, 64)), V);
  return {{"wte", V * C, 0, rows * C},           {"wpe", T * C, 0},           {"ln1w", L * C, l},
          {"ln1b", L * C, l},          {"qkvw", L * 3 * C * C, l},  {"qkvb", L * 3 * C, l},
          {"attprojw", L * C * C, l},  {"attprojb", L * C, l},      {"ln2w", L * C, l},
          {"ln2b", L * C, l},          {"fcw", L * 4 * C * C, l},   {"fcb", L * 4 * C, l},
          {"fcprojw", L * 4 * C * C, l}, {"fcprojb", L * C, l},     {"lnfw", C, 0},
          {"lnfb", C, 0}};
}

// Zero-filled buffers in the communicator's memory kind.
class Memory {
 public:
  explicit Memory(bool device) : device_(device) {}
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  ~Memory() {
    for (void* p : blocks_) {
#ifdef GPT2_DIST_BENCH_NCCL
      if (device_) {
        cudaFree(p);
        continue;
      }
#endif
      std::free(p);
    }
  }
  char* alloc(size_t bytes) {
    bytes = std::max<size_t>(bytes, 16);
    void* p = nullptr;
#ifdef GPT2_DIST_BENCH_NCCL
    if (device_) {
      if (cudaMalloc(&p, bytes) != cudaSuccess || cudaMemset(p, 0, bytes) != cudaSuccess)
        throw std::runtime_error("cudaMalloc of " + std::to_string(bytes) + " bytes failed");
      blocks_.push_back(p);
      return static_cast<char*>(p);
    }
#endif
    p = std::calloc(bytes, 1);
    if (p == nullptr) throw std::runtime_error("out of host memory");
    blocks_.push_back(p);
    return static_cast<char*>(p);
  }

 private:
  bool device_;
  std::vector<void*> blocks_;
};

// One training step's collectives, issued like train/data_parallel.cpp and train/trainer.cpp.
class StepReplay {
 public:
  StepReplay(Communicator& buffers, Communicator& host, const ZeroPlan& plan, const std::vector<ParamTensorSpec>& table,
             DataType type, Memory& mem)
      : buf_(buffers), host_(host), plan_(plan), type_(type), eb_(data_type_bytes(type)),
        overlap_(buffers.is_device_memory() && buffers.world() > 1) {
    grads_ = mem.alloc(plan.padded_size() * eb_);
    params_ = mem.alloc(plan.padded_size() * eb_);
    size_t most = 1, layer_most = 1, rest_most = 0;
    for (int u = 0; u < plan.num_units(); ++u)
      for (size_t c : plan.unit(u).counts) {
        most = std::max(most, c);
        if (u != plan.rest_unit()) layer_most = std::max(layer_most, c);  // layers and wte chunks
        if (u == plan.rest_unit()) rest_most = std::max(rest_most, c);
      }
    slice_ = std::min(most, env_count("GPT2_ZERO2_SLICE_ELEMS", size_t{1} << 22));
    overlap_layers_ = overlap_ && plan.num_layers() > 0 && layer_most <= slice_;
    overlap_rest_ = overlap_layers_ && rest_most > 0 && rest_most <= slice_;
    recv_ = mem.alloc(std::max(slice_, overlap_layers_ ? std::max(layer_most, rest_most) : 0) * eb_);
    if (overlap_) build_buckets(table);
  }

  void step(int stage) {
    should_stop(host_);
    all_reduce_value(host_, 1.0, ReduceOp::kSum);  // the step's loss sum
    const int world = buf_.world(), rank = buf_.rank();
    const size_t S = plan_.shard_size();
    if (stage == 2) {
      std::vector<CommTicket> tickets;
      for (int u = plan_.num_layers() - 1; u >= 0; --u) exchange(u, overlap_layers_, tickets);
      for (int k = 0; k < plan_.num_chunk_units(); ++k) exchange(plan_.first_chunk_unit() + k, overlap_layers_, tickets);
      exchange(plan_.rest_unit(), overlap_rest_, tickets);
      for (CommTicket t : tickets) buf_.wait(t);
    } else if (world > 1 && !buckets_[stage].empty()) {
      std::vector<CommTicket> tickets;
      for (const std::vector<ReducePiece>& pieces : buckets_[stage]) {
        buf_.begin_async();
        buf_.reduce_pieces(grads_, pieces, type_, ReduceOp::kAvg);
        tickets.push_back(buf_.end_async());
      }
      for (CommTicket t : tickets) buf_.wait(t);
    } else if (world > 1 && stage == 0) {
      buf_.all_reduce(grads_, grads_, plan_.padded_size(), type_, ReduceOp::kAvg);
    } else if (world > 1) {
      buf_.reduce_scatter(grads_, grads_ + S * eb_ * static_cast<size_t>(rank), S, type_, ReduceOp::kAvg);
    }
    if (stage > 0) all_reduce_value(host_, 1.0, ReduceOp::kSum);  // squared grad norm of the shards
    if (stage > 0 && world > 1)
      buf_.all_gather(params_ + S * eb_ * static_cast<size_t>(rank), params_, S, type_);
  }

  char* params() const { return params_; }

 private:
  // A unit's reduce_scatter_v: in one asynchronous call (overlapped path), else in slices.
  void exchange(int unit, bool whole, std::vector<CommTicket>& tickets) {
    const UnitExchange& ex = plan_.unit(unit);
    const size_t world = static_cast<size_t>(buf_.world()), me = static_cast<size_t>(buf_.rank());
    if (ex.numel == 0) return;  // the trainer has no buffer to exchange then
    if (whole) {
      buf_.begin_async();
      buf_.reduce_scatter_v(grads_, ex.counts[me] ? recv_ : nullptr, ex.counts, type_, ReduceOp::kAvg);
      tickets.push_back(buf_.end_async());
      return;
    }
    std::vector<size_t> start(world + 1, 0), counts(world);
    for (size_t r = 0; r < world; r++) start[r + 1] = start[r] + ex.counts[r];
    for (size_t a = 0; a < ex.numel; a += slice_) {
      const size_t b = std::min(ex.numel, a + slice_);
      for (size_t r = 0; r < world; r++)
        counts[r] = std::max(start[r], std::min(b, start[r + 1])) - std::max(start[r], std::min(a, start[r + 1]));
      buf_.reduce_scatter_v(grads_ + a * eb_, counts[me] ? recv_ : nullptr, counts, type_, ReduceOp::kAvg);
    }
  }

  // train/data_parallel.cpp's buckets: consecutive layers, top first, each closed
  // at GPT2_DP_BUCKET_BYTES; the last adds the embeddings and the final layernorm;
  // none when everything fits one. Stage 1 cuts the ranges at shard boundaries.
  void build_buckets(const std::vector<ParamTensorSpec>& table) {
    const int L = plan_.num_layers();
    std::vector<size_t> offset(table.size() + 1, 0);
    size_t layer_numel = 0;
    for (size_t t = 0; t < table.size(); ++t) {
      offset[t + 1] = offset[t] + table[t].numel;
      if (table[t].num_layers > 0) layer_numel += table[t].numel / static_cast<size_t>(table[t].num_layers);
    }
    const size_t cap = std::max<size_t>(1, env_count("GPT2_DP_BUCKET_BYTES", size_t{25} << 20) / eb_);
    for (int stage = 0; stage <= 1; ++stage) {
      auto add = [&](std::vector<ReducePiece>& b, size_t begin, size_t end) {
        for (size_t pos = begin; pos < end;) {
          const int owner = stage == 0 ? -1 : plan_.owner_of(pos);
          const size_t stop = stage == 0 ? end : std::min(end, plan_.shard(owner).end);
          b.push_back({pos, stop - pos, owner});
          pos = stop;
        }
      };
      auto layers = [&](std::vector<ReducePiece>& b, int lo, int hi) {
        for (size_t t = 0; t < table.size(); ++t)
          if (table[t].num_layers > 0) {
            const size_t per = table[t].numel / static_cast<size_t>(table[t].num_layers);
            add(b, offset[t] + per * static_cast<size_t>(lo), offset[t] + per * static_cast<size_t>(hi + 1));
          }
      };
      std::vector<std::vector<ReducePiece>>& out = buckets_[stage];
      int hi = L - 1;
      for (int l = L - 1; l >= 0; l--) {
        if (static_cast<size_t>(hi - l + 1) * layer_numel < cap) continue;
        out.emplace_back();
        layers(out.back(), l, hi);
        hi = l - 1;
      }
      std::vector<ReducePiece> last;
      if (hi >= 0) layers(last, 0, hi);
      for (size_t t = 0; t < table.size(); ++t)
        if (table[t].num_layers == 0) add(last, offset[t], offset[t + 1]);
      out.push_back(std::move(last));
      if (out.size() == 1) out.clear();
    }
  }

  Communicator& buf_;
  Communicator& host_;
  const ZeroPlan& plan_;
  DataType type_;
  size_t eb_;
  bool overlap_, overlap_layers_ = false, overlap_rest_ = false;
  size_t slice_ = 1;
  char* grads_ = nullptr;
  char* params_ = nullptr;
  char* recv_ = nullptr;
  std::vector<std::vector<ReducePiece>> buckets_[2];  // stage 0, stage 1
};

std::string mb(double bytes) {
  char s[32];
  std::snprintf(s, sizeof s, bytes > 0 && bytes < 5e3 ? "%.6f" : "%.3f", bytes / 1e6);
  return s;
}

// Waits for everything issued on both communicators (NCCL's barrier synchronises its stream).
void sync(Communicator& buffers, Communicator& host) {
  buffers.barrier();
  host.barrier();
}

// nccl-tests' definitions: bytes = the full buffer (all_reduce: count x size;
// reduce_scatter: the send buffer, all_gather: the receive buffer; broadcast:
// the buffer), algbw = bytes / time, busbw = algbw x 2(n-1)/n for all_reduce,
// (n-1)/n for reduce_scatter and all_gather, 1 for broadcast. The time is the
// mean over ranks of each rank's mean per call (nccl-tests' default -a 1).
void busbw(Communicator& buf, Communicator& host, const ZeroPlan& plan, DataType type, char* data, int iters,
           bool main) {
  const size_t eb = data_type_bytes(type), S = plan.shard_size(), P = plan.padded_size();
  const int n = buf.world();
  char* mine = data + S * eb * static_cast<size_t>(buf.rank());
  struct Case {
    const char* name;
    double factor;
  };
  const Case cases[] = {{"all_reduce", 2.0 * (n - 1) / n}, {"reduce_scatter", double(n - 1) / n},
                        {"all_gather", double(n - 1) / n}, {"broadcast", 1.0}};
  if (main)
    std::printf("busbw, nccl-tests definitions (%s %s, buffer = padded parameters, %d iterations, time = mean over ranks):\n"
                "%-16s %12s %12s %12s %12s\n",
                buf.name().c_str(), type == DataType::kBFloat16 ? "bf16" : "fp32", iters, "collective", "size MB",
                "time us", "algbw GB/s", "busbw GB/s");
  for (const Case& c : cases) {
    const std::string name = c.name;
    auto call = [&] {
      if (name == "all_reduce") buf.all_reduce(data, data, P, type, ReduceOp::kSum);
      else if (name == "reduce_scatter") buf.reduce_scatter(data, mine, S, type, ReduceOp::kSum);
      else if (name == "all_gather") buf.all_gather(mine, data, S, type);
      else buf.broadcast(data, P * eb, 0);
    };
    call();  // warm-up
    call();
    sync(buf, host);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) call();
    buf.barrier();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    const double mean_s = all_reduce_value(host, s, ReduceOp::kAvg);
    const double bytes = static_cast<double>(P * eb), algbw = bytes / mean_s / 1e9;
    if (main)
      std::printf("%-16s %12s %12.1f %12.3f %12.3f\n", c.name, mb(bytes).c_str(), mean_s * 1e6, algbw,
                  algbw * c.factor);
  }
}

}  // namespace
}  // namespace gpt2

int main(int argc, char** argv) {
  gpt2::DistContext ctx;
  try {
    gpt2::DistRuntime runtime(&argc, &argv);
    ctx = runtime.context();
    try {
      const gpt2::BenchOptions o = gpt2::parse(argc, argv);
      // Host scalars on their own MPI communicator (the trainer's host one; also the
      // NCCL bootstrap), gradients and parameters on the buffers' one: separate counters.
      auto host = gpt2::make_mpi_communicator(runtime);
      std::unique_ptr<gpt2::Communicator> device;
#ifdef GPT2_DIST_BENCH_NCCL
      if (o.comm == "nccl") {
        int count = 0;
        if (cudaGetDeviceCount(&count) != cudaSuccess || count <= ctx.local_rank)
          throw std::runtime_error("local rank " + std::to_string(ctx.local_rank) + " has no CUDA device (" +
                                   std::to_string(count) + " visible)");
        device = gpt2::make_nccl_communicator(*host, ctx.local_rank, nullptr);
      }
#endif
      if (!device) device = gpt2::make_mpi_communicator(runtime);
      gpt2::Communicator& buffers = *device;
      const gpt2::DataType type = o.dtype == "bf16" ? gpt2::DataType::kBFloat16 : gpt2::DataType::kFloat32;
      const std::vector<gpt2::ParamTensorSpec> table = gpt2::gpt2_table(o);
      const gpt2::ZeroPlan plan(table, ctx.world);
      gpt2::Memory mem(buffers.is_device_memory());
      gpt2::StepReplay replay(buffers, *host, plan, table, type, mem);
      const bool main_rank = ctx.is_main();
      if (main_rank)
        std::printf("dist_bench: %zu params (padded %zu), world %d, buffers %s %s, host scalars %s, %d steps per "
                    "stage; per step and rank:\n%-5s %-5s %-8s %-16s %10s %14s %14s\n",
                    plan.num_params(), plan.padded_size(), ctx.world, buffers.name().c_str(), o.dtype.c_str(),
                    host->name().c_str(), o.steps, "stage", "world", "carries", "collective", "calls", "payload MB",
                    "sent MB");
      for (int stage = 0; stage <= 2; ++stage) {
        replay.step(stage);  // warm-up
        gpt2::sync(buffers, *host);
        buffers.reset_stats();
        host->reset_stats();
        const auto t0 = std::chrono::steady_clock::now();
        for (int s = 0; s < o.steps; ++s) replay.step(stage);
        const gpt2::CommStats by_buffers = buffers.stats();
        const gpt2::CommStats by_host = host->stats();
        gpt2::sync(buffers, *host);
        const double ms = std::chrono::duration<double, std::milli>(
                              std::chrono::steady_clock::now() - t0).count() / o.steps;
        const double worst_ms = gpt2::all_reduce_value(*host, ms, gpt2::ReduceOp::kMax);
        if (!main_rank) continue;
        uint64_t sent = 0, calls = 0, payload = 0;
        const std::pair<const char*, const gpt2::CommStats*> rows[] = {{"buffers", &by_buffers},
                                                                       {"scalars", &by_host}};
        for (const auto& [what, st] : rows)
          for (size_t k = 0; k < st->size(); ++k) {
            const gpt2::CommTraffic& t = (*st)[k];
            if (t.calls == 0) continue;
            sent += t.sent_bytes;
            calls += t.calls;
            payload += t.payload_bytes;
            std::printf("%-5d %-5d %-8s %-16s %10.2f %14s %14s\n", stage, ctx.world, what,
                        gpt2::comm_call_name(static_cast<gpt2::CommCall>(k)), static_cast<double>(t.calls) / o.steps,
                        gpt2::mb(static_cast<double>(t.payload_bytes) / o.steps).c_str(),
                        gpt2::mb(static_cast<double>(t.sent_bytes) / o.steps).c_str());
          }
        std::printf("%-5d %-5d %-8s %-16s %10.2f %14s %14s   replay %.2f ms/step\n", stage, ctx.world, "all", "total",
                    static_cast<double>(calls) / o.steps, gpt2::mb(static_cast<double>(payload) / o.steps).c_str(),
                    gpt2::mb(static_cast<double>(sent) / o.steps).c_str(), worst_ms);
        std::printf("summary stage %d world %d: comm %.3f ms/step, %.0f bytes sent/rank/step, %.2f calls/step\n",
                    stage, ctx.world, worst_ms, static_cast<double>(sent) / o.steps,
                    static_cast<double>(calls) / o.steps);
      }
      if (o.busbw_iters > 0 && ctx.world > 1)
        gpt2::busbw(buffers, *host, plan, type, replay.params(), o.busbw_iters, main_rank);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", gpt2::with_rank_prefix(ctx, e.what()).c_str());
      if (ctx.world > 1) runtime.abort_all(1);
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
