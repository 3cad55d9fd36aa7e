// dist_bench: the collectives of one data-parallel training step, replayed on
// the real communicator with a GPT-2 parameter table, for each ZeRO stage:
//   stage 0: all-reduce of the whole gradient;
//   stage 1: reduce-scatter of the gradient, all-gather of the parameters;
//   stage 2: one reduce_scatter_v per backward unit (layers L-1..0, then the
//            embeddings), all-gather of the parameters;
// plus what every stage does: the loss average, the grad-norm sum (stages 1/2)
// and the preemption check. Prints one line per stage: time per step and the
// bytes this rank sends (the interface's ring-model counters).
//   mpirun -np 2 ./build/distributed/dist_bench --layers 12 --channels 768 --vocab 50304 --seq 1024
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "distributed/comm.h"
#include "distributed/context.h"
#include "distributed/preempt.h"
#include "distributed/zero_plan.h"

namespace gpt2 {
namespace {

struct BenchOptions {
  int layers = 12, channels = 768, vocab = 50304, seq = 1024, steps = 5;
};

BenchOptions parse(int argc, char** argv) {
  BenchOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) throw std::runtime_error("option " + a + " needs a value");
    const char* v = argv[++i];
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (*end != '\0' || x < 1 || x > 1000000)
      throw std::runtime_error("option " + a + ": '" + v + "' is not a positive integer");
    if (a == "--layers") o.layers = static_cast<int>(x);
    else if (a == "--channels") o.channels = static_cast<int>(x);
    else if (a == "--vocab") o.vocab = static_cast<int>(x);
    else if (a == "--seq") o.seq = static_cast<int>(x);
    else if (a == "--steps") o.steps = static_cast<int>(x);
    else throw std::runtime_error("unknown option '" + a + "'");
  }
  return o;
}

// GPT-2's parameter tensors in llm.c's order.
std::vector<ParamTensorSpec> gpt2_table(const BenchOptions& o) {
  const size_t L = static_cast<size_t>(o.layers), C = static_cast<size_t>(o.channels);
  const size_t V = static_cast<size_t>(o.vocab), T = static_cast<size_t>(o.seq);
  const int l = o.layers;
  return {{"wte", V * C, 0},           {"wpe", T * C, 0},           {"ln1w", L * C, l},
          {"ln1b", L * C, l},          {"qkvw", L * 3 * C * C, l},  {"qkvb", L * 3 * C, l},
          {"attprojw", L * C * C, l},  {"attprojb", L * C, l},      {"ln2w", L * C, l},
          {"ln2b", L * C, l},          {"fcw", L * 4 * C * C, l},   {"fcb", L * 4 * C, l},
          {"fcprojw", L * 4 * C * C, l}, {"fcprojb", L * C, l},     {"lnfw", C, 0},
          {"lnfb", C, 0}};
}

void one_step(Communicator& comm, const ZeroPlan& plan, int stage, std::vector<float>& grads,
              std::vector<float>& params, std::vector<float>& recv) {
  const size_t S = plan.shard_size();
  float* mine_g = grads.data() + S * static_cast<size_t>(comm.rank());
  float* mine_p = params.data() + S * static_cast<size_t>(comm.rank());
  all_reduce_value(comm, 1.0, ReduceOp::kAvg);  // the step's mean loss
  if (stage == 0) {
    comm.all_reduce(grads.data(), grads.data(), grads.size(), DataType::kFloat32, ReduceOp::kAvg);
  } else if (stage == 1) {
    comm.reduce_scatter(grads.data(), mine_g, S, DataType::kFloat32, ReduceOp::kAvg);
  } else {
    for (int u = plan.num_layers() - 1; u >= -1; --u) {  // backward order, embeddings last
      const UnitExchange& ex = plan.unit(u < 0 ? plan.rest_unit() : u);
      const size_t mine = ex.counts[static_cast<size_t>(comm.rank())];
      // The unit's gradients as the backward stages them (flat order = packed order).
      comm.reduce_scatter_v(grads.data(), mine ? recv.data() : nullptr, ex.counts,
                            DataType::kFloat32, ReduceOp::kAvg);
    }
  }
  if (stage > 0) {
    all_reduce_value(comm, 1.0, ReduceOp::kSum);  // squared grad norm of the shards
    comm.all_gather(mine_p, params.data(), S, DataType::kFloat32);
  }
  should_stop(comm);
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
      auto comm = gpt2::make_mpi_communicator(runtime);
      const gpt2::ZeroPlan plan(gpt2::gpt2_table(o), ctx.world);
      std::vector<float> grads(plan.padded_size(), 1.0f), params(plan.padded_size(), 0.5f);
      size_t most = 1;
      for (int u = 0; u < plan.num_units(); ++u)
        most = std::max(most, plan.unit(u).counts[static_cast<size_t>(ctx.rank)]);
      std::vector<float> recv(most);
      if (ctx.is_main())
        std::printf("dist_bench: %zu params (padded %zu), world %d, %d steps per stage\n",
                    plan.num_params(), plan.padded_size(), ctx.world, o.steps);
      for (int stage = 0; stage <= 2; ++stage) {
        gpt2::one_step(*comm, plan, stage, grads, params, recv);  // warm-up
        comm->barrier();
        comm->reset_stats();
        const auto t0 = std::chrono::steady_clock::now();
        for (int s = 0; s < o.steps; ++s) gpt2::one_step(*comm, plan, stage, grads, params, recv);
        const double ms = std::chrono::duration<double, std::milli>(
                              std::chrono::steady_clock::now() - t0).count() / o.steps;
        uint64_t sent = 0, calls = 0;
        for (const gpt2::CommTraffic& t : comm->stats()) {
          sent += t.sent_bytes;
          calls += t.calls;
        }
        const double worst_ms = gpt2::all_reduce_value(*comm, ms, gpt2::ReduceOp::kMax);
        if (ctx.is_main())
          std::printf("stage %d world %d: comm %.2f ms/step, %.2f MB sent/rank/step, %.0f calls/step\n",
                      stage, ctx.world, worst_ms, sent / 1e6 / o.steps,
                      static_cast<double>(calls) / o.steps);
      }
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
