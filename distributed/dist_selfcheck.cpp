// dist_selfcheck: checks a launch end to end without the trainer.
//
// Every rank prints one line with its layout (rank, world, local rank, node,
// host, launch mode) after running every collective of the communicator on
// known values. With --max-steps it also runs a fake training loop that
// honours the preemption protocol exactly like the trainer: a stop check at
// every step boundary, a "checkpoint" (the step number, written by rank 0 in
// --output-dir, atomically) and exit status 75 when stopped, --resume to go on.
//
//   ./build/distributed/dist_selfcheck
//   mpirun -np 2 ./build/distributed/dist_selfcheck
//   srun -N 2 -n 2 ./build/distributed/dist_selfcheck --max-steps 50 --step-ms 100 --output-dir out
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "distributed/comm.h"
#include "distributed/context.h"
#include "distributed/preempt.h"

namespace gpt2 {
namespace {

struct Options {
  int max_steps = 0;
  int step_ms = 50;
  std::string output_dir;
  bool resume = false;
  std::vector<int> stop_signals;
};

const char* const kUsage =
    "usage: dist_selfcheck [--max-steps N] [--step-ms MS] [--output-dir DIR] [--resume]\n"
    "                      [--stop-signal SIG]...\n"
    "  Prints each rank's layout after checking every collective. With --max-steps N runs\n"
    "  N fake steps of MS ms, stops at a step boundary on SIGUSR1/SIGTERM (or the given\n"
    "  --stop-signal), saving the step in DIR/selfcheck_step and exiting with status 75;\n"
    "  --resume continues from that step.\n";

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error("option " + a + " needs a value");
      return argv[++i];
    };
    auto integer = [&](const std::string& v) {
      char* end = nullptr;
      long x = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || x < 0 || x > 1000000000)
        throw std::runtime_error("option " + a + ": '" + v + "' is not a non-negative integer");
      return static_cast<int>(x);
    };
    if (a == "--max-steps") o.max_steps = integer(value());
    else if (a == "--step-ms") o.step_ms = integer(value());
    else if (a == "--output-dir") o.output_dir = value();
    else if (a == "--resume") o.resume = true;
    else if (a == "--stop-signal") o.stop_signals.push_back(parse_signal_name(value()));
    else if (a == "-h" || a == "--help") { std::fputs(kUsage, stdout); std::exit(0); }
    else throw std::runtime_error("unknown option '" + a + "' (see --help)");
  }
  if (o.max_steps > 0 && o.output_dir.empty())
    throw std::runtime_error("--max-steps needs --output-dir for its checkpoint");
  if (o.stop_signals.empty()) o.stop_signals = {parse_signal_name("USR1"), parse_signal_name("TERM")};
  return o;
}

void expect(bool ok, const DistContext& ctx, const std::string& what) {
  if (!ok) throw std::runtime_error(ctx.prefix() + "collective check failed: " + what);
}

// Each collective on values whose result is known in closed form.
void check_collectives(Communicator& comm, const DistContext& ctx) {
  const int w = ctx.world, r = ctx.rank;
  std::vector<double> d = {1.0 + r, 2.0 * r};
  all_reduce(comm, d.data(), d.size(), ReduceOp::kSum);
  expect(d[0] == w * (w + 1) / 2.0 && d[1] == 1.0 * w * (w - 1), ctx, "all_reduce sum");
  float f = static_cast<float>(r);
  all_reduce(comm, &f, 1, ReduceOp::kAvg);
  expect(f == static_cast<float>((w - 1) / 2.0), ctx, "all_reduce avg");
  std::vector<float> blocks(static_cast<size_t>(w) * 3);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<float>(i + r);
  std::vector<float> mine(3);
  comm.reduce_scatter(blocks.data(), mine.data(), 3, DataType::kFloat32, ReduceOp::kSum);
  for (int k = 0; k < 3; ++k)
    expect(mine[k] == static_cast<float>(w * (3 * r + k) + w * (w - 1) / 2), ctx,
           "reduce_scatter");
  std::vector<float> gathered(static_cast<size_t>(w) * 3);
  comm.all_gather(mine.data(), gathered.data(), 3, DataType::kFloat32);
  for (int q = 0; q < w; ++q)
    for (int k = 0; k < 3; ++k)
      expect(gathered[q * 3 + k] == static_cast<float>(w * (3 * q + k) + w * (w - 1) / 2), ctx,
             "all_gather");
  char host[64] = {};
  if (r == 0) std::snprintf(host, sizeof host, "%s", ctx.host.c_str());
  comm.broadcast(host, sizeof host, 0);
  expect(host[0] != '\0', ctx, "broadcast");
  comm.barrier();
}

std::string step_file(const Options& o) { return o.output_dir + "/selfcheck_step"; }

int read_saved_step(const Options& o, const DistContext& ctx) {
  std::ifstream in(step_file(o));
  int step = -1;
  if (!(in >> step) || step < 0)
    throw std::runtime_error(ctx.prefix() + step_file(o) + ": no saved step to resume from");
  return step;
}

// Temp file, flush, rename: a crash never leaves a half-written step file.
void save_step(const Options& o, int step) {
  const std::string tmp = step_file(o) + ".tmp";
  {
    std::ofstream out(tmp);
    out << step << "\n";
    if (!out.flush()) throw std::runtime_error(tmp + ": write failed");
  }
  if (std::rename(tmp.c_str(), step_file(o).c_str()) != 0)
    throw std::runtime_error(step_file(o) + ": rename failed");
}

int fake_training(Communicator& comm, const DistContext& ctx, const Options& o) {
  int32_t start = 0;
  if (o.resume && ctx.is_main()) start = read_saved_step(o, ctx);
  comm.broadcast(&start, sizeof start, 0);
  if (ctx.is_main()) std::printf("selfcheck: training from step %d to %d\n", start, o.max_steps);
  double checksum = 0;
  for (int step = start; step < o.max_steps; ++step) {
    if (should_stop(comm)) {
      if (ctx.is_main()) {
        save_step(o, step);
        std::printf("selfcheck: stop (rank 0 saw signal %d), saved step %d, exiting %d\n",
                    local_stop_signal(), step, kPreemptedExitCode);
        std::fflush(stdout);
      }
      comm.barrier();  // the checkpoint is complete before any rank exits
      return kPreemptedExitCode;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(o.step_ms));
    checksum += all_reduce_value(comm, step + 1.0, ReduceOp::kSum);
    if (ctx.is_main()) {
      std::printf("selfcheck: step %d sum %.0f\n", step + 1, checksum);
      std::fflush(stdout);
    }
  }
  if (ctx.is_main()) {
    save_step(o, o.max_steps);
    std::printf("selfcheck: finished %d steps\n", o.max_steps);
  }
  return 0;
}

}  // namespace
}  // namespace gpt2

int main(int argc, char** argv) {
  gpt2::DistContext ctx;
  try {
    const gpt2::Options opts = gpt2::parse(argc, argv);
    // Before anything slow: a stop signal that arrives during start-up must be
    // recorded, not kill the process with the default action.
    if (opts.max_steps > 0) gpt2::install_stop_handlers(opts.stop_signals);
    gpt2::DistRuntime runtime(&argc, &argv);
    ctx = runtime.context();
    try {
      auto comm = gpt2::make_mpi_communicator(runtime);
      gpt2::check_collectives(*comm, ctx);
      std::printf("selfcheck rank=%d world=%d local_rank=%d local_world=%d node=%d num_nodes=%d "
                  "host=%s launch=%s pid=%d collectives=ok\n",
                  ctx.rank, ctx.world, ctx.local_rank, ctx.local_world, ctx.node, ctx.num_nodes,
                  ctx.host.c_str(), gpt2::launch_mode_name(ctx.mode), static_cast<int>(getpid()));
      std::fflush(stdout);
      if (opts.max_steps > 0) return gpt2::fake_training(*comm, ctx, opts);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", gpt2::with_rank_prefix(ctx, e.what()).c_str());
      if (ctx.world > 1) runtime.abort_all(1);  // peers may be blocked in a collective
      return 1;
    }
  } catch (const std::exception& e) {
    // Options and bootstrap: errors before the layout is known (MPI's own name the rank).
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
