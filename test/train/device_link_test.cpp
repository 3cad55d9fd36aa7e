// Device choice per rank: local rank r takes GPU r; more ranks on a node than
// visible GPUs is refused with the rank, node and counts, never wrapped around.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "distributed/context.h"
#include "train/device_link.h"

namespace gpt2 {
namespace {

DistContext layout(int rank, int world, int local_rank, int local_world) {
  DistContext d;
  d.rank = rank;
  d.world = world;
  d.local_rank = local_rank;
  d.local_world = local_world;
  d.host = "node1";
  return d;
}

std::string refusal(const DistContext& d, int gpus, const char* visible) {
  try {
    cuda_device_for_rank(d, gpus, visible);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(DeviceChoice, EachLocalRankTakesItsOwnGpu) {
  EXPECT_EQ(cuda_device_for_rank(layout(0, 1, 0, 1), 1, nullptr), 0);  // one process, one GPU
  EXPECT_EQ(cuda_device_for_rank(layout(0, 1, 0, 1), 8, nullptr), 0);  // world 1 takes device 0 of many
  for (int r = 0; r < 8; ++r) EXPECT_EQ(cuda_device_for_rank(layout(8 + r, 16, r, 8), 8, "0,1,2,3,4,5,6,7"), r);
  EXPECT_EQ(cuda_device_for_rank(layout(5, 6, 1, 2), 4, nullptr), 1);  // fewer ranks than GPUs
}

TEST(DeviceChoice, MoreRanksThanGpusIsRefusedNotWrapped) {
  // local_rank % gpus would put rank 2 on GPU 0 next to rank 0
  EXPECT_EQ(refusal(layout(2, 3, 2, 3), 2, "0,1"),
            "rank 2/3 (node1): 3 ranks on this node but only 2 visible GPUs (CUDA_VISIBLE_DEVICES=0,1); "
            "start at most one rank per GPU (every rank of a node must see all its GPUs)");
  // every rank of the node refuses, not just the one that would wrap
  EXPECT_EQ(refusal(layout(0, 2, 0, 2), 1, nullptr),
            "rank 0/2 (node1): 2 ranks on this node but only 1 visible GPU (CUDA_VISIBLE_DEVICES=<unset>); "
            "start at most one rank per GPU (every rank of a node must see all its GPUs)");
  // the message already carries main's rank prefix, so it is not doubled
  const DistContext d = layout(0, 2, 0, 2);
  EXPECT_EQ(with_rank_prefix(d, refusal(d, 1, nullptr)), refusal(d, 1, nullptr));
}

TEST(DeviceChoice, NoGpuOrBrokenLayoutIsRefused) {
  EXPECT_EQ(refusal(layout(0, 1, 0, 1), 0, ""), "rank 0/1 (node1): no visible GPU (CUDA_VISIBLE_DEVICES=)");
  EXPECT_EQ(refusal(layout(3, 4, 2, 2), 4, nullptr), "rank 3/4 (node1): inconsistent node layout: local rank 2 of 2");
}

}  // namespace
}  // namespace gpt2
