// Launch-mode detection and the Slurm cross-check, on synthetic environments.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "distributed/context.h"
#include "util/usage_error.h"

namespace gpt2 {
namespace {

DistContext two_nodes_rank3() {
  DistContext c;
  c.rank = 3;
  c.world = 4;
  c.local_rank = 1;
  c.local_world = 2;
  c.node = 1;
  c.num_nodes = 2;
  c.host = "node2";
  c.mode = LaunchMode::kSrun;
  return c;
}

std::map<std::string, std::string> srun_env_rank3() {
  return {{"SLURM_STEP_ID", "0"},  {"PMIX_RANK", "3"},     {"SLURM_PROCID", "3"},
          {"SLURM_NTASKS", "4"},   {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "1"},
          {"SLURM_NNODES", "2"},   {"SLURM_STEP_NUM_NODES", "2"}, {"SLURM_STEP_NUM_TASKS", "4"}};
}

TEST(LaunchMode, DetectedFromEnvironment) {
  EXPECT_EQ(detect_launch_mode({}), LaunchMode::kStandalone);
  EXPECT_EQ(detect_launch_mode(srun_env_rank3()), LaunchMode::kSrun);
  // mpirun inside a Slurm job: the SLURM_* variables belong to mpirun's daemons.
  auto mpirun_in_job = srun_env_rank3();
  mpirun_in_job["OMPI_COMM_WORLD_SIZE"] = "4";
  EXPECT_EQ(detect_launch_mode(mpirun_in_job), LaunchMode::kMpirun);
  // The batch script itself (no srun step, no PMIx): a standalone run.
  EXPECT_EQ(detect_launch_mode({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}),
            LaunchMode::kStandalone);
  EXPECT_STREQ(launch_mode_name(LaunchMode::kSrun), "srun");
}

TEST(LaunchMode, SlurmAgreementPasses) {
  EXPECT_NO_THROW(check_against_slurm(two_nodes_rank3(), srun_env_rank3()));
  // Variables an older Slurm lacks are not required.
  EXPECT_NO_THROW(check_against_slurm(two_nodes_rank3(), {{"SLURM_PROCID", "3"}}));
}

TEST(LaunchMode, SlurmMismatchIsAClearError) {
  auto env = srun_env_rank3();
  env["SLURM_PROCID"] = "2";
  env["SLURM_NODEID"] = "0";
  try {
    check_against_slurm(two_nodes_rank3(), env);
    FAIL() << "no error for a mismatched SLURM_PROCID";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("rank 3/4 (node2): ", 0), 0u) << msg;
    EXPECT_NE(msg.find("SLURM_PROCID=2 but MPI rank is 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("SLURM_NODEID=0 but node index"), std::string::npos) << msg;
  }
  env = srun_env_rank3();
  env["SLURM_NTASKS"] = "four";
  EXPECT_THROW(check_against_slurm(two_nodes_rank3(), env), std::runtime_error);
}

TEST(LaunchMode, NoCrossCheckOutsideSrun) {
  DistContext c = two_nodes_rank3();
  auto env = srun_env_rank3();
  env["SLURM_PROCID"] = "0";  // the daemon's step, not this rank
  c.mode = LaunchMode::kMpirun;
  EXPECT_NO_THROW(check_against_slurm(c, env));
  c.mode = LaunchMode::kStandalone;
  EXPECT_NO_THROW(check_against_slurm(c, env));
}

// --rendezvous without a launcher that would use it is a usage error (main
// exits 2); under MPI or a launcher without it, it is accepted.
TEST(LaunchMode, ARendezvousNeedsALauncher) {
  try {
    refuse_unused_rendezvous("file:/shared/r", {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}});  // a batch script
    ADD_FAILURE() << "a standalone run's --rendezvous was accepted";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "--rendezvous file:/shared/r is where ranks launched without MPI meet (torchrun, srun "
                           "--mpi=none); this run has no launcher, so nothing would use it");
  }
  EXPECT_THROW(refuse_unused_rendezvous("tcp", {}), UsageError);
  EXPECT_NO_THROW(refuse_unused_rendezvous("", {}));
  EXPECT_NO_THROW(refuse_unused_rendezvous("tcp", {{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"}}));
  EXPECT_NO_THROW(refuse_unused_rendezvous("tcp", srun_env_rank3()));  // srun --mpi=pmix
  EXPECT_NO_THROW(refuse_unused_rendezvous("file:/shared/r", {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"},
                                                              {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"},
                                                              {"MASTER_PORT", "29500"}}));
}

TEST(DistContext, PrefixAndDescription) {
  const DistContext c = two_nodes_rank3();
  EXPECT_EQ(c.prefix(), "rank 3/4 (node2): ");
  EXPECT_EQ(c.describe(), "rank 3/4 local 1/2 node 1/2 host node2 launch srun");
  EXPECT_FALSE(c.is_main());
  EXPECT_EQ(with_rank_prefix(c, "x.bin: bad magic"), "rank 3/4 (node2): x.bin: bad magic");
  EXPECT_EQ(with_rank_prefix(c, "rank 3/4 (node2): already"), "rank 3/4 (node2): already");
}

}  // namespace
}  // namespace gpt2
