// train_gpt2cu: train GPT-2 on token shards.
//   CLI -> distributed bootstrap -> backend -> model -> the loop (train/trainer.cpp)
// or, with --eval-only / --generate, run trained weights (train/evaluation.cpp,
// train/generation.cpp), or with --dry-run print the memory plan (train/memory_plan.cpp).
// The same file builds with g++ (CPU backend) and, with the CUDA backend, nvcc.
#include <csignal>
#include <cstdio>
#include <exception>
#include <memory>

#include "distributed/comm.h"
#include "distributed/context.h"
#include "distributed/preempt.h"
#include "distributed/watchdog.h"
#include "train/evaluation.h"
#include "train/generation.h"
#include "train/memory_plan.h"
#include "train/options.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  gpt2::TrainOptions opts;
  try {
    if (!gpt2::parse_train_options(argc, argv, &opts)) return 0;  // --help
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  // --dry-run: arithmetic on the configuration, before MPI or any device.
  if (!opts.dry_run_worlds.empty()) return gpt2::run_memory_plan(opts);
  // Record preemption signals from the very start: a SIGUSR1 during MPI
  // start-up must not kill the process before it can checkpoint.
  gpt2::install_stop_handlers({SIGUSR1, SIGTERM});
  // MPI comes up after the CLI check so a typo fails fast without a launcher.
  std::unique_ptr<gpt2::DistRuntime> runtime;
  try {
    runtime = std::make_unique<gpt2::DistRuntime>(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  const gpt2::DistContext& dist = runtime->context();
  // The collective timeout: a collective that waits --comm-timeout seconds for
  // a dead or hung peer ends the job (distributed/watchdog.h). It outlives the
  // communicators, which hand it on to the NCCL one.
  gpt2::CommWatchdog watchdog(opts.comm_timeout, dist.prefix());
  try {
    std::unique_ptr<gpt2::Communicator> comm = gpt2::make_mpi_communicator(*runtime);
    comm->set_watchdog(&watchdog);
    if (opts.eval_only) return gpt2::run_evaluation(opts, dist, *comm);
    if (opts.generate) return gpt2::run_generation(opts, dist);
    return gpt2::run_training(opts, dist, *comm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", gpt2::with_rank_prefix(dist, e.what()).c_str());
    std::fflush(stderr);
    if (dist.world > 1) runtime->abort_all(1);  // peers may be blocked in a collective
    return 1;
  }
}
