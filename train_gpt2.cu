// train_gpt2cu: train GPT-2 on token shards.
//   CLI -> distributed bootstrap -> backend -> model -> the loop (train/trainer.cpp)
// The same file builds with g++ (CPU backend) and, with the CUDA backend, nvcc.
#include <csignal>
#include <cstdio>
#include <memory>
#include <exception>

#include "dist/comm.h"
#include "dist/context.h"
#include "dist/preempt.h"
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
  // MPI comes up after the CLI check so a typo fails fast without a launcher.
  gpt2::DistRuntime runtime(&argc, &argv);
  const gpt2::DistContext& dist = runtime.context();
  try {
    gpt2::install_stop_handlers({SIGUSR1, SIGTERM});
    std::unique_ptr<gpt2::Communicator> comm = gpt2::make_mpi_communicator(runtime);
    return gpt2::run_training(opts, dist, *comm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s%s\n", dist.prefix().c_str(), e.what());
    std::fflush(stderr);
    if (dist.world > 1) runtime.abort_all(1);  // peers may be blocked in a collective
    return 1;
  }
}
