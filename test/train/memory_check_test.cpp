// --memory-check's measurement and comparison, from the
// texts the kernel's files hold, and the plan it compares against; on a GPU,
// the comparison with the free memory its backend reports.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include "backend/backend.h"
#include "model_io/model_file.h"
#include "train/memory_plan.h"
#include "train/options.h"
#include "test/temp_dir.h"
#include "test/tiny_config.h"

namespace gpt2 {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(MemoryCheck, MemAvailableFromMeminfo) {
  const std::string meminfo =
      "MemTotal:       25165824 kB\nMemFree:        23000000 kB\nMemAvailable:   24237056 kB\nBuffers: 0 kB\n";
  uint64_t bytes = 0;
  ASSERT_TRUE(meminfo_available(meminfo, &bytes));
  EXPECT_EQ(bytes, uint64_t{24237056} * 1024);
  EXPECT_FALSE(meminfo_available("MemTotal: 1 kB\nMemFree: 1 kB\n", &bytes));
  EXPECT_FALSE(meminfo_available("MemAvailableX: 5 kB\n", &bytes));
}

TEST(MemoryCheck, CgroupRoomCountsInactivePageCacheAsFree) {
  uint64_t room = 0;
  // v2: 8 GiB limit, 6 GiB charged of which 1 GiB inactive page cache: 3 GiB of room
  ASSERT_TRUE(cgroup_room("8589934592\n", "6442450944\n", "anon 5368709120\ninactive_file 1073741824\n",
                          "inactive_file", &room));
  EXPECT_EQ(room, 3 * kGiB);
  // no stat: the usage counts whole
  ASSERT_TRUE(cgroup_room("8589934592\n", "6442450944\n", "", "inactive_file", &room));
  EXPECT_EQ(room, 2 * kGiB);
  // over the limit already: no room, not a wrapped-around huge number
  ASSERT_TRUE(cgroup_room("1073741824\n", "2147483648\n", "", "inactive_file", &room));
  EXPECT_EQ(room, 0u);
  // no limit: v2's "max", v1's ~2^63
  EXPECT_FALSE(cgroup_room("max\n", "6442450944\n", "", "inactive_file", &room));
  EXPECT_FALSE(cgroup_room("9223372036854771712\n", "1353453568\n", "", "total_inactive_file", &room));
  EXPECT_FALSE(cgroup_room("", "", "", "inactive_file", &room));  // no such cgroup file
}

TEST(MemoryCheck, ShortfallNamesNeededAndAvailable) {
  const MemoryBudget have{24 * kGiB, "MemAvailable in /proc/meminfo"};
  EXPECT_EQ(memory_shortfall(24 * kGiB, 1, have), "");  // exactly fits
  EXPECT_EQ(memory_shortfall(25 * kGiB, 1, have),
            "this run needs 25.00 GiB per rank (the --dry-run total: parameters, gradients, optimizer state, "
            "activations), more than the 24.00 GiB available (MemAvailable in /proc/meminfo)");
  // ranks of one node share its memory
  EXPECT_EQ(memory_shortfall(8 * kGiB, 3, have), "");
  EXPECT_NE(memory_shortfall(9 * kGiB, 3, have).find("9.00 GiB per rank (the --dry-run total: parameters, gradients, "
                                                     "optimizer state, activations) x 3 ranks on this node = 27.00 GiB"),
            std::string::npos);
}

// The test stand-in replaces the measurement; anything but a count is an error.
TEST(MemoryCheck, TestStandInForTheMeasurement) {
  setenv("GPT2_TEST_AVAILABLE_MEMORY", "12345", 1);
  const MemoryBudget b = host_memory_budget();
  EXPECT_EQ(b.bytes, 12345u);
  EXPECT_NE(b.source.find("GPT2_TEST_AVAILABLE_MEMORY"), std::string::npos);
  setenv("GPT2_TEST_AVAILABLE_MEMORY", "lots", 1);
  EXPECT_THROW(host_memory_budget(), std::runtime_error);
  unsetenv("GPT2_TEST_AVAILABLE_MEMORY");
  EXPECT_GT(host_memory_budget().bytes, 0u);  // this machine's own number
}

// The check refuses, warns or stays silent as --memory-check says, before
// anything is allocated, against the --dry-run plan of the run.
TEST(MemoryCheck, RefusesWarnsOrIsOff) {
  TrainOptions o;
  o.device = Device::kCpu;
  o.config_overrides = "n_layer=2,n_head=2,n_embd=64,max_seq=64";
  o.seq_len = 32;
  o.dry_run_worlds = {1};
  DistContext dist;
  TrainLogger quiet(false, "");
  RunPlan plan = plan_training_run(o, 1, quiet);
  const size_t need = planned_rank_bytes(plan);
  EXPECT_NE(memory_plan_table(o).find(" " + std::to_string(need) + "\n"), std::string::npos);
  setenv("GPT2_TEST_AVAILABLE_MEMORY", std::to_string(need - 1).c_str(), 1);
  try {
    check_host_memory(plan, dist);
    ADD_FAILURE() << "a plan 1 byte over the budget passed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("not enough memory: this run needs"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--memory-check warn (or off) to run anyway"), std::string::npos);
  }
  o.memory_check = "warn";
  EXPECT_NO_THROW(check_host_memory(plan, dist));
  o.memory_check = "on";
  setenv("GPT2_TEST_AVAILABLE_MEMORY", std::to_string(need).c_str(), 1);
  EXPECT_NO_THROW(check_host_memory(plan, dist));
  dist.local_world = 2;  // two ranks of this node need twice as much
  EXPECT_THROW(check_host_memory(plan, dist), std::runtime_error);
  unsetenv("GPT2_TEST_AVAILABLE_MEMORY");
}

// On a GPU: the plan per rank against the free memory of the rank's own GPU,
// with both exact counts (a tiny plan and its budget round alike) and the device.
TEST(MemoryCheck, DeviceShortfallNamesNeededFreeAndTheGpu) {
  const DeviceMemory gpu{true, 20 * kGiB, 80 * kGiB, "GPU 1 (NVIDIA H100 80GB HBM3)"};
  EXPECT_EQ(device_memory_shortfall(20 * kGiB, gpu), "");  // exactly fits
  EXPECT_EQ(device_memory_shortfall(20 * kGiB + 1, gpu),
            "this run needs 20.00 GiB (21474836481 B) per rank on its GPU (the --dry-run total: parameters, "
            "gradients, optimizer state, activations), more than the 20.00 GiB (21474836480 B) free of 80.00 GiB "
            "on GPU 1 (NVIDIA H100 80GB HBM3) (cudaMemGetInfo)");
}

// The GPU check refuses with the ways out, warns on every rank (each has a GPU
// of its own, unlike the host check's once per node) or stays silent.
TEST(MemoryCheck, DeviceCheckRefusesWarnsOrIsOff) {
  TrainOptions o;
  DistContext dist;
  dist.rank = dist.local_rank = 1;
  dist.world = dist.local_world = 2;
  const DeviceMemory gpu{true, kGiB, 80 * kGiB, "GPU 1 (test GPU)"};
  try {
    check_device_memory(o, dist, kGiB + 1, gpu);
    ADD_FAILURE() << "a plan 1 byte over the free GPU memory passed";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("not enough GPU memory: this run needs 1.00 GiB (1073741825 B) per rank on its GPU", 0), 0u)
        << what;
    for (const char* way : {"on GPU 1 (test GPU) (cudaMemGetInfo)", "lower -B or -T", "--recompute 1|2",
                            "--zero-stage 1|2", "store in bf16 with --dtype bf16",
                            "--memory-check warn (or off) to run anyway"})
      EXPECT_NE(what.find(way), std::string::npos) << way << " missing from: " << what;
  }
  o.dtype = Precision::kBf16;  // no longer a way out
  try {
    check_device_memory(o, dist, kGiB + 1, gpu);
    ADD_FAILURE() << "a bf16 plan 1 byte over the free GPU memory passed";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).find("--dtype bf16"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(check_device_memory(o, dist, kGiB, gpu));  // fits
  o.memory_check = "warn";
  testing::internal::CaptureStderr();
  EXPECT_NO_THROW(check_device_memory(o, dist, kGiB + 1, gpu));
  const std::string warned = testing::internal::GetCapturedStderr();
  EXPECT_EQ(warned.rfind(dist.prefix() + "warning: this run needs 1.00 GiB (1073741825 B) per rank on its GPU", 0), 0u)
      << warned;
  EXPECT_NE(warned.find("going on (--memory-check warn)"), std::string::npos) << warned;
  o.memory_check = "off";
  testing::internal::CaptureStderr();
  EXPECT_NO_THROW(check_device_memory(o, dist, 100 * kGiB, gpu));
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

// A backend of host memory (the CPU backend, which has no device memory) is
// held against the host's budget.
TEST(MemoryCheck, RunOnTheCpuBackendChecksHostMemory) {
  TrainOptions o;
  o.device = Device::kCpu;
  o.config_overrides = "n_layer=2,n_head=2,n_embd=64,max_seq=64";
  o.seq_len = 32;
  const std::unique_ptr<Backend> cpu = make_cpu_backend(1);
  ASSERT_FALSE(cpu->device_memory().present);
  DistContext dist;
  TrainLogger quiet(false, "");
  RunPlan plan = plan_training_run(o, 1, quiet);
  setenv("GPT2_TEST_AVAILABLE_MEMORY", std::to_string(planned_rank_bytes(plan) - 1).c_str(), 1);
  try {
    check_run_memory(plan, dist, *cpu);
    ADD_FAILURE() << "a plan 1 byte over the host budget passed";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("not enough memory: this run needs", 0), 0u) << e.what();
  }
  o.memory_check = "off";
  EXPECT_NO_THROW(check_run_memory(plan, dist, *cpu));
  unsetenv("GPT2_TEST_AVAILABLE_MEMORY");
}

}  // namespace
// --dry-run plans the run training would make: --init-from FILE is the model
// (not the default --model d12), and the plan's T is capped to it.
TEST(MemoryPlan, InitFromNamesTheModelPlanned) {
  const TempDir dir("memory_plan");
  const GPT2Config cfg = tiny_gpt2_config(2, 2, 32, 16, 64);
  write_model_file(dir.file("model.bin"), cfg, std::vector<float>(ParamLayout::for_config(cfg).total, 0.0f));
  TrainOptions o;
  o.device = Device::kCpu;
  o.init_from = dir.file("model.bin");
  o.seq_len = 64;
  o.dry_run_worlds = {1};
  const std::string table = memory_plan_table(o);
  EXPECT_EQ(table.rfind("memory plan: " + o.init_from + ", " + std::to_string(ParamLayout::for_config(cfg).total) +
                            " parameters; cpu fp32, B=4 T=16,", 0), 0u) << table;
}

}  // namespace gpt2
