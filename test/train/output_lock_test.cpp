// The output directory lock (train/output_lock.h): its file format, the
// staleness rules, exclusivity through CheckpointDir, and the heartbeat.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "test/train/checkpoint_fakes.h"
#include "test/temp_dir.h"
#include "train/checkpoint.h"
#include "train/output_lock.h"
#include "util/checked_io.h"

namespace gpt2 {
namespace {

TEST(OutputDirLock, FormatAndStaleRules) {
  LockHolder me = this_process_lock_holder();
  EXPECT_EQ(me.pid, getpid());
  LockHolder h = me;
  h.pid = 123;
  h.slurm_job = "991";
  h.slurm_restart = "0";
  LockHolder back;
  ASSERT_TRUE(parse_lock(format_lock(h), &back));
  EXPECT_EQ(back.host, h.host);
  EXPECT_EQ(back.pid, 123);
  EXPECT_EQ(back.started, h.started);
  EXPECT_EQ(back.heartbeat, h.heartbeat);
  EXPECT_EQ(back.slurm_job, "991");
  EXPECT_FALSE(parse_lock("hello\n", &back));
  EXPECT_FALSE(parse_lock("host=a\npid=x\nheartbeat=1\n", &back));

  const int64_t now = me.heartbeat;
  LockHolder local = me;
  local.pid = getpid();  // alive
  EXPECT_NE(stale_lock_reason(local, me, true, false, now), "");   // flock granted on this host: gone
  EXPECT_EQ(stale_lock_reason(local, me, false, true, now), "");   // no flock, PID alive
  local.pid = 0x7ffffff0;                                          // no such PID
  EXPECT_NE(stale_lock_reason(local, me, false, true, now).find("no longer exists"), std::string::npos);

  LockHolder remote = me;
  remote.host = me.host + "-other";
  remote.heartbeat = now - 30;
  EXPECT_EQ(stale_lock_reason(remote, me, true, false, now), "");  // flock across nodes is not trusted
  remote.heartbeat = now - kLockStaleSeconds - 1;
  EXPECT_NE(stale_lock_reason(remote, me, true, false, now).find("has not renewed it"), std::string::npos);

  LockHolder requeued = remote;
  requeued.heartbeat = now;
  requeued.slurm_job = "991";
  requeued.slurm_restart = "0";
  LockHolder me_slurm = me;
  me_slurm.slurm_job = "991";
  me_slurm.slurm_restart = "1";
  EXPECT_NE(stale_lock_reason(requeued, me_slurm, true, false, now).find("earlier run of this Slurm job"),
            std::string::npos);
  me_slurm.slurm_restart = "0";  // the same run: a second srun of this job on the directory
  EXPECT_EQ(stale_lock_reason(requeued, me_slurm, true, false, now), "");
  me_slurm.slurm_job = "992";    // a duplicated job
  EXPECT_EQ(stale_lock_reason(requeued, me_slurm, true, false, now), "");
}

TEST(OutputDirLock, ExclusiveReleasedAndStaleTakenOver) {
  const std::string d = temp_dir("lock");
  const LockHolder me = this_process_lock_holder();
  std::vector<std::string> notes;
  const Notify note = [&](const std::string& s) { notes.push_back(s); };
  {
    CheckpointDir first(d + "/out", true, note);  // creates the directory
    ASSERT_TRUE(file_exists(d + "/out/.lock"));
    LockHolder h;
    ASSERT_TRUE(parse_lock(read_text_file(d + "/out/.lock"), &h));
    EXPECT_EQ(h.pid, getpid());
    // A second holder (own open file description, so flock refuses it even in this process).
    const std::string e = error_of([&] { CheckpointDir second(d + "/out/", true, note); });
    EXPECT_EQ(e.rfind("--output-dir " + d + "/out is in use by PID " + std::to_string(getpid()) + " on host " +
                          me.host + " (started ",
                      0),
              0u)
        << e;
    EXPECT_NE(e.find("remove " + d + "/out/.lock"), std::string::npos) << e;
    CheckpointDir reader(d + "/out");  // other ranks: no lock
  }
  EXPECT_FALSE(file_exists(d + "/out/.lock"));  // released and removed
  EXPECT_TRUE(notes.empty());

  // Left behind by a killed run on this host: nobody holds the flock.
  LockHolder dead = me;
  dead.pid = 0x7ffffff0;
  write_text_file_atomic(d + "/out/.lock", format_lock(dead));
  { CheckpointDir again(d + "/out", true, note); }
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("taking over the stale lock"), std::string::npos) << notes[0];

  // Another host's lock with a recent heartbeat is respected; an old one is stale.
  LockHolder remote = me;
  remote.host = "elsewhere-node";
  remote.pid = 4242;
  write_text_file_atomic(d + "/out/.lock", format_lock(remote));
  const std::string e = error_of([&] { CheckpointDir c(d + "/out", true, note); });
  EXPECT_NE(e.find("in use by PID 4242 on host elsewhere-node"), std::string::npos) << e;
  remote.heartbeat -= kLockStaleSeconds + 5;
  write_text_file_atomic(d + "/out/.lock", format_lock(remote));
  { CheckpointDir c(d + "/out", true, note); }
  EXPECT_NE(notes.back().find("elsewhere-node has not renewed it"), std::string::npos) << notes.back();
}

TEST(OutputDirLock, HeartbeatIsRenewed) {
  const std::string d = temp_dir("heartbeat");
  OutputDirLock lock(d, {}, 1);
  LockHolder first, later;
  ASSERT_TRUE(parse_lock(read_text_file(lock.path()), &first));
  for (int i = 0; i < 40; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_TRUE(parse_lock(read_text_file(lock.path()), &later));
    if (later.heartbeat > first.heartbeat) break;
  }
  EXPECT_GT(later.heartbeat, first.heartbeat);
  EXPECT_EQ(later.started, first.started);
}

}  // namespace
}  // namespace gpt2
