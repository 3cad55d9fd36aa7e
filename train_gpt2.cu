// train_gpt2cu: train GPT-2 on token shards.
//   CLI -> distributed bootstrap -> backend -> model -> the loop (train/trainer.cpp)
// or, with --eval-only / --generate, run trained weights (train/evaluation.cpp,
// train/generation.cpp), or with --dry-run print the memory plan (train/memory_plan.cpp).
// The same file builds with g++ (CPU backend) and, with the CUDA backend, nvcc.
#include <csignal>
#include <cstdio>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "distributed/comm.h"
#include "distributed/context.h"
#include "distributed/preempt.h"
#include "distributed/watchdog.h"
#include "train/evaluation.h"
#include "train/generation.h"
#include "train/memory_plan.h"
#include "train/options.h"
#include "train/path_guard.h"
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
  // A run never writes over what it reads: checked before any work.
  try {
    gpt2::check_outputs_spare_inputs(opts);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  // Record preemption signals from the very start: a SIGUSR1 during MPI
  // start-up must not kill the process before it can checkpoint.
  gpt2::install_stop_handlers({SIGUSR1, SIGTERM});
  // Ctrl-C stops the same way (checkpoint, lock released); a second one ends the
  // process at once, as the default action would.
  gpt2::install_stop_handlers({SIGINT}, /*second_is_default=*/true);
  // MPI (or, launched without it, the rendezvous) comes up after the CLI check
  // so a typo fails fast without a launcher.
  std::unique_ptr<gpt2::DistRuntime> runtime;
  try {
    gpt2::LaunchSettings launch;  // for launches without MPI (torchrun, srun --mpi=none)
    launch.rendezvous = opts.rendezvous;
    launch.timeout_s = opts.comm_timeout > 0 ? opts.comm_timeout : gpt2::kDefaultCommTimeoutSeconds;
    launch.device_ranks = opts.device != gpt2::Device::kCpu;
    runtime = std::make_unique<gpt2::DistRuntime>(&argc, &argv, launch);
  } catch (const gpt2::StopRequested& e) {  // during the rendezvous: nothing to save
    std::fprintf(stderr, "error: %s while waiting for the other ranks\n", e.what());
    return gpt2::stopped_exit_code(e.signum);
  } catch (const std::exception& e) {  // a --rendezvous that no launcher would use: exit 2
    std::fprintf(stderr, "error: %s\n", e.what());
    return dynamic_cast<const gpt2::UsageError*>(&e) ? 2 : 1;
  }
  const gpt2::DistContext& dist = runtime->context();
  // The collective timeout: a collective that waits --comm-timeout seconds for
  // a dead or hung peer ends the job (distributed/watchdog.h). It outlives the
  // communicators, which hand it on to the NCCL one.
  gpt2::CommWatchdog watchdog(opts.comm_timeout, dist.prefix());
  int rc = 0;
  try {
    std::unique_ptr<gpt2::Communicator> comm = gpt2::make_host_communicator(*runtime, &watchdog);
    rc = opts.eval_only  ? gpt2::run_evaluation(opts, dist, *comm)
         : opts.generate ? gpt2::run_generation(opts, dist)
                         : gpt2::run_training(opts, dist, *comm);
  } catch (const gpt2::StopRequested& e) {  // a wait of rank 0 alone (the prompt from stdin): no peer waits
    std::fprintf(stderr, "%s: %s; no result (exit %d)\n",
                 opts.eval_only ? "--eval-only" : opts.generate ? "--generate" : "training", e.what(),
                 gpt2::stopped_exit_code(e.signum));
    return gpt2::stopped_exit_code(e.signum);
  } catch (const std::exception& e) {
    // a flag that meets the world size, the model or the data: exit 2, like the parser's
    const int code = dynamic_cast<const gpt2::UsageError*>(&e) ? 2 : 1;
    // a host container too large for what is left (the backends name their buffers)
    const std::string what = dynamic_cast<const std::bad_alloc*>(&e)
                                 ? "out of host memory (std::bad_alloc); --dry-run 1 prints what the run needs"
                                 : e.what();
    std::fprintf(stderr, "error: %s\n", gpt2::with_rank_prefix(dist, what).c_str());
    std::fflush(stderr);
    if (dist.world > 1) runtime->abort_all(code);  // peers may be blocked in a collective
    return code;
  }
  // What went to standard output (samples, the log, --eval-json -) must have
  // arrived: a full disk or a closed pipe is an error, not exit 0.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "error: %s\n", gpt2::with_rank_prefix(dist, "standard output: write failed").c_str());
    return rc == 0 ? 1 : rc;
  }
  return rc;
}
