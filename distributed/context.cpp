#include "distributed/context.h"

#include <mpi.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "distributed/comm.h"
#include "distributed/env_launch.h"
#include "distributed/rendezvous.h"
#include "distributed/watchdog.h"
#include "util/usage_error.h"

namespace gpt2 {
namespace {

// Environment variables that decide the launch mode or are cross-checked.
const char* const kLaunchVariables[] = {
    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK",     "SLURM_STEP_ID",
    "SLURM_PROCID",         "SLURM_NTASKS",         "SLURM_LOCALID", "SLURM_NODEID",
    "SLURM_NNODES",         "SLURM_STEP_NUM_NODES", "SLURM_STEP_NUM_TASKS"};

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw std::runtime_error(std::string("distributed/context.cpp: ") + what + " failed: " +
                           std::string(text, len));
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

const std::string* find(const std::map<std::string, std::string>& env, const char* key) {
  auto it = env.find(key);
  return it == env.end() ? nullptr : &it->second;
}

// Parses a Slurm integer variable; a malformed value is an error, not a guess.
long parse_slurm_int(const std::string& key, const std::string& value) {
  char* end = nullptr;
  long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0')
    throw std::runtime_error("environment: " + key + "='" + value + "' is not an integer");
  return v;
}

}  // namespace

const char* launch_mode_name(LaunchMode mode) {
  switch (mode) {
    case LaunchMode::kStandalone: return "standalone";
    case LaunchMode::kMpirun: return "mpirun";
    case LaunchMode::kSrun: return "srun";
    case LaunchMode::kTorchrun: return "torchrun (RANK/WORLD_SIZE)";
    case LaunchMode::kSrunNoMpi: return "srun --mpi=none (SLURM_PROCID/SLURM_NTASKS)";
  }
  return "unknown";
}

std::string DistContext::prefix() const {
  return "rank " + std::to_string(rank) + "/" + std::to_string(world) + " (" + host + "): ";
}

std::string DistContext::describe() const {
  return "rank " + std::to_string(rank) + "/" + std::to_string(world) + " local " +
         std::to_string(local_rank) + "/" + std::to_string(local_world) + " node " +
         std::to_string(node) + "/" + std::to_string(num_nodes) + " host " + host + " launch " +
         launch_mode_name(mode) + (rendezvous.empty() ? "" : " rendezvous " + rendezvous);
}

std::string with_rank_prefix(const DistContext& ctx, const std::string& message) {
  const std::string prefix = ctx.prefix();
  if (message.compare(0, prefix.size(), prefix) == 0) return message;
  return prefix + message;
}

std::map<std::string, std::string> launch_environment() {
  std::map<std::string, std::string> env;
  for (const char* key : kLaunchVariables)
    if (const char* v = std::getenv(key)) env[key] = v;
  return env;
}

LaunchMode detect_launch_mode(const std::map<std::string, std::string>& env) {
  // mpirun's daemons export OMPI_COMM_WORLD_* to every rank, also when mpirun
  // itself runs inside a Slurm job (then SLURM_* describe the daemons' step).
  if (find(env, "OMPI_COMM_WORLD_SIZE")) return LaunchMode::kMpirun;
  // A task of an srun step: slurmstepd sets SLURM_STEP_ID and its PMIx server
  // wired us up (PMIX_RANK). A program started directly by the batch script
  // has SLURM_PROCID=0 and SLURM_NTASKS of the job but neither of these: it is
  // a standalone run of one rank.
  if (find(env, "SLURM_STEP_ID") && find(env, "PMIX_RANK")) return LaunchMode::kSrun;
  return LaunchMode::kStandalone;
}

void check_against_slurm(const DistContext& ctx, const std::map<std::string, std::string>& env) {
  if (ctx.mode != LaunchMode::kSrun) return;
  struct Expect {
    const char* key;
    int mpi_value;
    const char* meaning;
  };
  const Expect expects[] = {
      {"SLURM_PROCID", ctx.rank, "MPI rank"},
      {"SLURM_NTASKS", ctx.world, "MPI world size"},
      {"SLURM_STEP_NUM_TASKS", ctx.world, "MPI world size"},
      {"SLURM_LOCALID", ctx.local_rank, "local rank (MPI_COMM_TYPE_SHARED)"},
      {"SLURM_NODEID", ctx.node, "node index (MPI_COMM_TYPE_SHARED)"},
      {"SLURM_STEP_NUM_NODES", ctx.num_nodes, "node count (MPI_COMM_TYPE_SHARED)"},
  };
  std::string problems;
  for (const Expect& e : expects) {
    const std::string* v = find(env, e.key);
    if (!v) continue;  // older Slurm versions lack some of these
    long slurm_value = parse_slurm_int(e.key, *v);
    if (slurm_value != e.mpi_value)
      problems += std::string(problems.empty() ? "" : "; ") + e.key + "=" + *v + " but " +
                  e.meaning + " is " + std::to_string(e.mpi_value);
  }
  if (!problems.empty())
    throw std::runtime_error(ctx.prefix() + "launched by srun but Slurm and MPI disagree: " +
                             problems +
                             " (is Open MPI using PMIx? Debian's Open MPI needs srun --mpi=pmix)");
}

void refuse_unused_rendezvous(const std::string& rendezvous, const std::map<std::string, std::string>& env) {
  if (rendezvous.empty() || launched_by_mpi(env) || discover_env_launch(env).source != RankSource::kNone) return;
  throw UsageError("--rendezvous " + rendezvous + " is where ranks launched without MPI meet (torchrun, srun "
                   "--mpi=none); this run has no launcher, so nothing would use it");
}

DistRuntime::DistRuntime(int* argc, char*** argv, const LaunchSettings& settings) {
  const std::map<std::string, std::string> variables = env_launch_variables();
  refuse_unused_rendezvous(settings.rendezvous, variables);
  const EnvLaunch launch = discover_env_launch(variables);
  if (launch.source != RankSource::kNone && launch.world > 1) {
    start_without_mpi(launch, settings);
    return;
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    owns_mpi_ = true;
  }
  // Errors come back as return codes that we turn into exceptions naming the
  // rank, instead of MPI's default of aborting the job without context.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

  const std::map<std::string, std::string> env = launch_environment();
  ctx_.mode = detect_launch_mode(env);
  ctx_.host = host_name();
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &ctx_.rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &ctx_.world), "MPI_Comm_size");

  // Ranks sharing memory form one node; the lowest world rank of each node
  // (local rank 0) is its leader, and the leaders' order numbers the nodes.
  MPI_Comm node_comm = MPI_COMM_NULL, leader_comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, ctx_.rank, MPI_INFO_NULL,
                                &node_comm),
            "MPI_Comm_split_type(SHARED)");
  check_mpi(MPI_Comm_rank(node_comm, &ctx_.local_rank), "MPI_Comm_rank(node)");
  check_mpi(MPI_Comm_size(node_comm, &ctx_.local_world), "MPI_Comm_size(node)");
  const bool leader = ctx_.local_rank == 0;
  check_mpi(MPI_Comm_split(MPI_COMM_WORLD, leader ? 0 : MPI_UNDEFINED, ctx_.rank, &leader_comm),
            "MPI_Comm_split(leaders)");
  int node_and_count[2] = {0, 0};
  if (leader) {
    MPI_Comm_rank(leader_comm, &node_and_count[0]);
    MPI_Comm_size(leader_comm, &node_and_count[1]);
    MPI_Comm_free(&leader_comm);
  }
  check_mpi(MPI_Bcast(node_and_count, 2, MPI_INT, 0, node_comm), "MPI_Bcast(node index)");
  MPI_Comm_free(&node_comm);
  ctx_.node = node_and_count[0];
  ctx_.num_nodes = node_and_count[1];

  check_against_slurm(ctx_, env);
}

std::string cpu_ranks_need_mpi(const DistContext& ctx) {
  return std::to_string(ctx.world) + " CPU ranks launched by " + launch_mode_name(ctx.mode) +
         " without MPI: CPU ranks exchange gradients through MPI; launch them with mpirun -np " +
         std::to_string(ctx.world) + " or srun --mpi=pmix, or train on GPUs (one per rank, NCCL)";
}

// The layout from the launcher's variables, then the rendezvous, which carries
// rank 0's NCCL unique id to every rank. No MPI call is made.
void DistRuntime::start_without_mpi(const EnvLaunch& launch, const LaunchSettings& settings) {
  uses_mpi_ = false;
  ctx_.mode = launch.source == RankSource::kSlurm ? LaunchMode::kSrunNoMpi : LaunchMode::kTorchrun;
  ctx_.host = host_name();
  ctx_.rank = launch.rank;
  ctx_.world = launch.world;
  ctx_.local_rank = launch.local_rank;
  ctx_.local_world = launch.local_world;
  ctx_.node = launch.node;
  ctx_.num_nodes = launch.num_nodes;
  if (!settings.device_ranks || !nccl_linked())
    throw std::runtime_error(ctx_.prefix() + cpu_ranks_need_mpi(ctx_) +
                             (nccl_linked() ? "" : " (this binary was built without NCCL)"));
  const RendezvousSpec spec = parse_rendezvous(settings.rendezvous, launch.master_addr, launch.master_port);
  ctx_.rendezvous = spec.describe();
  RendezvousRequest req;
  req.rank = ctx_.rank;
  req.world = ctx_.world;
  req.job_id = launch.job_id;
  req.host = ctx_.host;
  req.prefix = ctx_.prefix();
  req.timeout_s = settings.timeout_s;
  // A rank that cannot go on still comes, so that its peers learn it now
  // rather than wait for it in NCCL's set-up until the timeout.
  req.problem = nccl_launch_problem(ctx_);
  if (ctx_.rank == 0 && req.problem.empty()) {
    try {
      req.payload = nccl_unique_id_for_launch(ctx_);
    } catch (const std::exception& e) {
      req.problem = e.what();
    }
  }
  const RendezvousResult met = rendezvous(spec, req);
  nccl_id_ = met.payload;
  set_up_watch_ = met.watch;
}

void DistRuntime::set_up_done() const {
  if (set_up_watch_) set_up_watch_->done();
}

// Weak: binaries with NCCL replace these (distributed/comm_nccl.cpp).
__attribute__((weak)) bool nccl_linked() { return false; }

__attribute__((weak)) std::string nccl_unique_id_for_launch(const DistContext& ctx) {
  throw std::runtime_error(ctx.prefix() + cpu_ranks_need_mpi(ctx) + " (this binary was built without NCCL)");
}

__attribute__((weak)) std::string nccl_launch_problem(const DistContext&) { return ""; }

__attribute__((weak)) std::unique_ptr<Communicator> make_nccl_host_communicator(const std::string&,
                                                                                const DistContext& ctx,
                                                                                CommWatchdog*) {
  throw std::runtime_error(ctx.prefix() + cpu_ranks_need_mpi(ctx) + " (this binary was built without NCCL)");
}

DistRuntime::~DistRuntime() {
  if (!owns_mpi_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void DistRuntime::abort_all(int code) const {
  if (!uses_mpi_) std::_Exit(code);  // without MPI each rank ends itself; peers see it gone
  // MPI_Abort can block when the launcher's daemon is gone: the process ends anyway.
  const ExitDeadline deadline(kAbortGraceSeconds, ctx_.prefix() + "ending the process: MPI_Abort did not return "
                                                  "in time", code);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

}  // namespace gpt2
