// Process bootstrap for data-parallel training: who am I, how many of us, on
// which node. One binary runs in three launch modes without changes:
//   ./train_gpt2cu                 standalone: MPI singleton, world size 1
//   mpirun -np N ./train_gpt2cu    OpenMPI's own launcher (ORTE)
//   srun ./train_gpt2cu            Slurm direct launch through PMIx
// Everything is taken from MPI; under srun the Slurm view (SLURM_PROCID, ...)
// must agree with it, otherwise start-up fails with an error naming both.
//
// This header does not include <mpi.h>, so code that only needs the rank
// layout compiles without the MPI include path.
#ifndef DISTRIBUTED_CONTEXT_H
#define DISTRIBUTED_CONTEXT_H

#include <map>
#include <memory>
#include <string>

namespace gpt2 {

class Communicator;
class CommWatchdog;
class SetUpWatch;
struct EnvLaunch;

enum class LaunchMode {
  kStandalone,  // no launcher (MPI singleton)
  kMpirun,      // started by mpirun/mpiexec (OpenMPI sets OMPI_COMM_WORLD_SIZE)
  kSrun,        // started by srun (SLURM_STEP_ID + PMIx, no mpirun in between)
  kTorchrun,    // no MPI: torchrun's variables (RANK, WORLD_SIZE, ...), distributed/env_launch.h
  kSrunNoMpi,   // no MPI: srun --mpi=none (SLURM_PROCID, SLURM_NTASKS, ...)
};
const char* launch_mode_name(LaunchMode mode);

// The rank layout of this process. Node index and node count count the
// distinct shared-memory domains (MPI_COMM_TYPE_SHARED), numbered in the order
// of their lowest world rank.
struct DistContext {
  int rank = 0;
  int world = 1;
  int local_rank = 0;   // rank among the processes of this node; picks the GPU
  int local_world = 1;  // processes on this node
  int node = 0;
  int num_nodes = 1;
  std::string host;
  LaunchMode mode = LaunchMode::kStandalone;
  std::string rendezvous;  // without MPI: "tcp HOST:PORT" or "file DIR"; else empty

  bool is_main() const { return rank == 0; }  // only rank 0 prints and writes shared files
  // "rank R/W (host): " - every error a rank reports starts with this.
  std::string prefix() const;
  // One line for logs: "rank 1/4 local 1/2 node 0/2 host node1 launch srun"
  // (without MPI: "... launch torchrun (RANK/WORLD_SIZE) rendezvous tcp node1:29500").
  std::string describe() const;
};

// `message` with ctx.prefix() in front, unless it already starts with it (errors
// thrown by distributed/ carry it already). For the "error: ..." line at main.
std::string with_rank_prefix(const DistContext& ctx, const std::string& message);

// Launch mode from the environment of this process (see LaunchMode).
LaunchMode detect_launch_mode(const std::map<std::string, std::string>& env);

// Checks the MPI-derived layout against SLURM_PROCID / SLURM_NTASKS /
// SLURM_LOCALID / SLURM_NODEID / SLURM_NNODES when mode is kSrun (other modes:
// nothing to check, Slurm variables there describe the batch step or mpirun's
// daemons, not the ranks). Throws std::runtime_error listing every mismatch.
void check_against_slurm(const DistContext& ctx, const std::map<std::string, std::string>& env);

// The variables above, read from the process environment.
std::map<std::string, std::string> launch_environment();

// Owns MPI initialisation for the whole process: construct it first thing in
// main() and keep it alive until the end. MPI can only be initialised once per
// process, so there is at most one DistRuntime; if something else already
// initialised MPI, this one neither re-initialises nor finalises it.
// How a job launched without MPI (torchrun, srun --mpi=none) meets.
struct LaunchSettings {
  std::string rendezvous;    // --rendezvous: "" (tcp at MASTER_ADDR:MASTER_PORT), tcp:HOST:PORT, file:DIR
  double timeout_s = 300;    // the rendezvous's bound
  bool device_ranks = true;  // false (--device cpu): several ranks without MPI are refused
};

class DistRuntime {
 public:
  // With MPI (mpirun, srun --mpi=pmix, or a lone process): initialises MPI
  // (threads: funneled - OpenMP workers never call MPI), computes the layout
  // and cross-checks it against Slurm. Without MPI (torchrun's or an srun
  // --mpi=none step's variables, world > 1): the layout from them
  // (distributed/env_launch.h), MPI is never initialised, and the ranks meet
  // at the rendezvous (distributed/rendezvous.h), which carries rank 0's NCCL
  // unique id: their collectives, host scalars included, then go through NCCL
  // (make_host_communicator). CPU ranks cannot: refused with a message.
  explicit DistRuntime(int* argc, char*** argv, const LaunchSettings& settings = {});
  ~DistRuntime();
  DistRuntime(const DistRuntime&) = delete;
  DistRuntime& operator=(const DistRuntime&) = delete;

  const DistContext& context() const { return ctx_; }

  // Ends every rank of the job with `code` (MPI_Abort). Call it after printing
  // an error on one rank while others may be waiting in a collective: a plain
  // return would leave them blocked forever.
  [[noreturn]] void abort_all(int code) const;

  bool uses_mpi() const { return uses_mpi_; }
  // Without MPI: the NCCL unique id every rank received at the rendezvous.
  const std::string& nccl_id() const { return nccl_id_; }
  // Without MPI, until the first communicator is made: a peer whose process
  // ends is reported at once (rendezvous.h's SetUpWatch). Then this ends it.
  void set_up_done() const;

 private:
  void start_without_mpi(const EnvLaunch& launch, const LaunchSettings& settings);

  DistContext ctx_;
  bool owns_mpi_ = false;
  bool uses_mpi_ = true;
  std::string nccl_id_;
  std::shared_ptr<SetUpWatch> set_up_watch_;
};

// The ranks meet at a rendezvous only where a launcher without MPI started
// them: a run with no launcher at all would ignore --rendezvous, so it is
// refused (UsageError). Under MPI it is unused too, but kept: a job may give
// both launchers the same flags.
void refuse_unused_rendezvous(const std::string& rendezvous, const std::map<std::string, std::string>& env);

// What refuses several CPU ranks without MPI (names the launcher and the ways out).
std::string cpu_ranks_need_mpi(const DistContext& ctx);

// NCCL's half of a launch without MPI, defined by distributed/comm_nccl.cpp in
// binaries with NCCL; without it (a CPU-only build) nccl_linked() is false and
// the others throw the refusal above.
// The unique id (rank 0 makes it), and a host-memory communicator whose calls
// stage through the rank's GPU (local_rank) and one NCCL communicator.
// nccl_launch_problem: why this rank cannot make that communicator ("" : it
// can), known before the rendezvous, which carries it to every rank.
bool nccl_linked();
std::string nccl_unique_id_for_launch(const DistContext& ctx);
std::string nccl_launch_problem(const DistContext& ctx);
std::unique_ptr<Communicator> make_nccl_host_communicator(const std::string& nccl_id, const DistContext& ctx,
                                                          CommWatchdog* watchdog);

}  // namespace gpt2

#endif  // DISTRIBUTED_CONTEXT_H
