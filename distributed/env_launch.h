// Rank discovery without MPI: the layout of a process that torchrun,
// `accelerate launch` or `srun --mpi=none` started, read from the variables
// those launchers set, in this order of precedence (after MPI itself):
//   torchrun:  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//              (GROUP_RANK: the node, when set). Under torchrun itself
//              (TORCHELASTIC_RUN_ID set) its agent holds MASTER_PORT with its own
//              store, so the rendezvous uses MASTER_PORT + 1.
//   Slurm:     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID,
//              SLURM_STEP_TASKS_PER_NODE (local world), SLURM_STEP_NUM_NODES; the
//              master is MASTER_ADDR or else the first host of SLURM_JOB_NODELIST,
//              the port MASTER_PORT or else 20000 + SLURM_JOB_ID % 20000 (the same
//              on every task of a job, different for jobs sharing a node).
// Pure functions of an environment map, so tests need no launcher.
#ifndef DISTRIBUTED_ENV_LAUNCH_H
#define DISTRIBUTED_ENV_LAUNCH_H

#include <map>
#include <string>

namespace gpt2 {

enum class RankSource { kNone, kTorchrun, kSlurm };
// "torchrun (RANK/WORLD_SIZE)", "slurm (SLURM_PROCID/SLURM_NTASKS)": for the banner.
const char* rank_source_name(RankSource source);

struct EnvLaunch {
  RankSource source = RankSource::kNone;
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_world = 1;
  int node = 0;
  int num_nodes = 1;
  std::string master_addr;  // where rank 0 listens (TCP rendezvous)
  int master_port = 0;
  std::string job_id;  // SLURM_JOB_ID / TORCHELASTIC_RUN_ID ("" if none): tells stale rendezvous files apart
};

// True when MPI launched this process (mpirun's OMPI_COMM_WORLD_SIZE, PMIx's
// PMIX_RANK under srun --mpi=pmix): MPI then owns the layout.
bool launched_by_mpi(const std::map<std::string, std::string>& env);

// The torchrun or Slurm layout, or source kNone (a standalone run, or MPI).
// Malformed or inconsistent values throw std::runtime_error naming the variable.
EnvLaunch discover_env_launch(const std::map<std::string, std::string>& env);

// The first host of a Slurm node list: "gpu[03-05,9],cpu1" -> "gpu03".
std::string first_slurm_host(const std::string& nodelist);

// Tasks on node `node` from a Slurm tasks-per-node list: "2(x3),1", node 3 -> 1.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node);

// The launch variables (MPI's, torchrun's, Slurm's), read from the process environment.
std::map<std::string, std::string> env_launch_variables();

}  // namespace gpt2

#endif  // DISTRIBUTED_ENV_LAUNCH_H
