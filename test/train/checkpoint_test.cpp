#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <unistd.h>

#include "distributed/comm.h"
#include "test/train/checkpoint_fakes.h"
#include "test/temp_dir.h"
#include "train/checkpoint.h"
#include "util/checked_io.h"
#include "util/checksum.h"

namespace gpt2 {
namespace {

TrainState sample_state(uint64_t begin, uint64_t end, uint32_t rank, uint32_t world) {
  TrainState s;
  s.step = 42;
  s.config.num_layers = 3;
  s.world = world;
  s.rank = rank;
  s.zero_stage = 1;
  s.shard_begin = begin;
  s.shard_end = end;
  s.num_params = 100;
  s.batch_size = 4;
  s.seq_len = 64;
  s.total_batch_tokens = 512;
  s.seed = 7;
  s.sample_rng = 0xabcdef;
  s.nan_skips = 2;
  s.loader_state = {1, 2, 3, 4, 5};
  for (uint64_t i = begin; i < end; i++) {
    s.m.push_back(static_cast<float>(i));
    s.v.push_back(static_cast<float>(i) * 0.5f);
  }
  return s;
}

TEST(StateFile, RoundTrip) {
  const std::string d = temp_dir("state");
  TrainState s = sample_state(10, 60, 1, 2);
  write_state_file(d + "/s.bin", s);
  TrainState r = read_state_file(d + "/s.bin");
  EXPECT_EQ(r.step, 42u);
  EXPECT_EQ(r.config, s.config);
  EXPECT_EQ(r.rank, 1u);
  EXPECT_EQ(r.world, 2u);
  EXPECT_EQ(r.shard_begin, 10u);
  EXPECT_EQ(r.shard_end, 60u);
  EXPECT_EQ(r.sample_rng, 0xabcdefu);
  EXPECT_EQ(r.nan_skips, 2u);
  EXPECT_EQ(r.loader_state, s.loader_state);
  EXPECT_EQ(r.m, s.m);
  EXPECT_EQ(r.v, s.v);
}

TEST(StateFile, MasterWeightsRoundTrip) {
  const std::string d = temp_dir("master");
  TrainState s = sample_state(0, 20, 0, 1);
  for (int i = 0; i < 20; i++) s.master.push_back(0.25f * i);
  write_state_file(d + "/s.bin", s);
  TrainState r = read_state_file(d + "/s.bin");
  EXPECT_EQ(r.master, s.master);
  EXPECT_EQ(r.m, s.m);
}

TEST(StateFile, CorruptionIsDetected) {
  const std::string d = temp_dir("corrupt");
  const std::string path = d + "/s.bin";
  write_state_file(path, sample_state(0, 50, 0, 1));
  std::string good = read_text_file(path);
  auto expect_error = [&](const std::string& bytes, const char* what) {
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
    try {
      read_state_file(path);
      ADD_FAILURE() << "no error for " << what;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  std::string flipped = good;
  flipped[good.size() - 20] ^= 0x01;  // a bit of v
  expect_error(flipped, "checksum");
  expect_error(good.substr(0, good.size() - 9), "truncated");
  expect_error("NOTSTATE" + good.substr(8), "bad magic");
  expect_error(good.substr(0, 10), "truncated");
}

TEST(CheckpointDir, MarkersPruneAndReshard) {
  const std::string d = temp_dir("ckdir");
  CheckpointDir ck(d);
  EXPECT_TRUE(ck.complete_steps().empty());
  // Steps 5, 10, 15 complete with 2 ranks (shards [0,50) and [50,100)); step 20 incomplete.
  for (uint64_t step : {5, 10, 15, 20}) {
    write_text_file_atomic(ck.model_path(step), "model");
    for (uint32_t r = 0; r < 2; r++) {
      TrainState s = sample_state(r * 50, (r + 1) * 50, r, 2);
      s.step = step;
      write_state_file(ck.state_path(step, r), s);
    }
    if (step != 20) ck.write_marker(step, 2, 1);
  }
  EXPECT_EQ(ck.complete_steps(), (std::vector<uint64_t>{5, 10, 15}));
  uint32_t world = 0, stage = 0;
  ck.read_marker(15, &world, &stage);
  EXPECT_EQ(world, 2u);
  EXPECT_EQ(stage, 1u);

  // Re-shard for 3 ranks: rank 1 of 3 owns [34, 68).
  std::vector<float> m, v;
  std::vector<float> master;
  load_resharded_moments(ck, 15, 2, 34, 68, &m, &v, &master);
  EXPECT_TRUE(master.empty());  // fp32 run: no master weights
  ASSERT_EQ(m.size(), 34u);
  for (size_t i = 0; i < m.size(); i++) {
    EXPECT_EQ(m[i], static_cast<float>(34 + i));
    EXPECT_EQ(v[i], 0.5f * static_cast<float>(34 + i));
  }
  // Losing a rank's file is an error, not silent zeros.
  std::remove(ck.state_path(10, 1).c_str());
  EXPECT_THROW(load_resharded_moments(ck, 10, 2, 0, 100, &m, &v, &master), std::runtime_error);

  write_text_file_atomic(ck.done_path(12) + ".tmp", "step=12");  // a marker write cut short
  ck.prune(2, 15);
  EXPECT_FALSE(file_exists(ck.done_path(12) + ".tmp"));
  EXPECT_EQ(ck.complete_steps(), (std::vector<uint64_t>{10, 15}));
  EXPECT_FALSE(file_exists(ck.model_path(5)));
  EXPECT_FALSE(file_exists(ck.state_path(5, 0)));
  EXPECT_TRUE(file_exists(ck.model_path(15)));
  // The incomplete step 20 is newer than the newest complete one: kept (it may be in progress).
  EXPECT_TRUE(file_exists(ck.model_path(20)));
  // The checkpoint just written is never pruned, even when newer ones exist (a
  // run resumed from an older checkpoint): keep 1 with 10 just written keeps 10 and 15.
  ck.prune(1, 10);
  EXPECT_EQ(ck.complete_steps(), (std::vector<uint64_t>{10, 15}));
  EXPECT_TRUE(file_exists(ck.model_path(10)));
  ck.prune(1, 15);
  EXPECT_EQ(ck.complete_steps(), (std::vector<uint64_t>{15}));
  // A new run replacing the directory's: every checkpoint file goes, markers first.
  write_text_file_atomic(ck.final_model_path(), "final");
  EXPECT_EQ(ck.remove_all(), (std::vector<uint64_t>{15}));
  EXPECT_TRUE(ck.complete_steps().empty());
  EXPECT_FALSE(file_exists(ck.model_path(15)));
  EXPECT_FALSE(file_exists(ck.state_path(15, 0)));
  EXPECT_FALSE(file_exists(ck.model_path(20)));
  EXPECT_FALSE(file_exists(ck.final_model_path()));
}

// ---- checksums ------------------------------------------------------------------

TEST(Xxh64, MatchesReferenceValues) {
  // From libxxhash 0.8 (XXH64, seed 0 unless given).
  EXPECT_EQ(xxh64("", 0), 0xef46db3751d8e999ULL);
  EXPECT_EQ(xxh64("a", 1), 0xd24ec4f1a98c6e5bULL);
  EXPECT_EQ(xxh64("abc", 3), 0x44bc2cf5ad770999ULL);
  std::vector<unsigned char> d(5000);
  for (size_t i = 0; i < d.size(); i++) d[i] = static_cast<unsigned char>(i * 131 + 7);
  EXPECT_EQ(xxh64(d.data(), 100), 0x9ddada11d3dc2d8fULL);
  EXPECT_EQ(xxh64(d.data(), 5000, 42), 0xc74f55596add9729ULL);
  // Streaming in uneven pieces (across the 32-byte stripes) equals one shot.
  for (size_t n : {0, 1, 31, 32, 33, 100, 4999}) {
    Xxh64 h(42);
    for (size_t pos = 0, piece = 1; pos < n; pos += piece, piece = piece * 2 + 1)
      h.update(d.data() + pos, std::min(piece, n - pos));
    EXPECT_EQ(h.digest(), xxh64(d.data(), n, 42)) << n;
  }
  uint64_t x = 0;
  EXPECT_TRUE(parse_hex64(hex64(0x0123456789abcdefULL), &x));
  EXPECT_EQ(x, 0x0123456789abcdefULL);
  EXPECT_FALSE(parse_hex64("0123456789ABCDEF", &x));
  EXPECT_FALSE(parse_hex64("12", &x));
}

// ---- completion markers with checksums --------------------------------------------

// A 2-rank checkpoint at `step`, completed the way the trainer does it.
void write_checkpoint(const CheckpointDir& ck, uint64_t step) {
  write_text_file_atomic(ck.model_path(step), "model weights of step " + std::to_string(step));
  FileDigest digests[2];
  for (uint32_t r = 0; r < 2; r++) {
    TrainState s = sample_state(r * 50, (r + 1) * 50, r, 2);
    s.step = step;
    digests[r] = write_state_file(ck.state_path(step, r), s);
  }
  FakeComm comm(0, 2);
  comm.peer_block = {digests[1].size, digests[1].xxh64};
  ck.complete_checkpoint(comm, step, 1, digests[0]);
}

void flip_byte(const std::string& path, size_t offset) {
  std::string bytes = read_text_file(path);
  bytes[offset] ^= 0x01;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
}

TEST(CheckpointMarker, RecordsEveryFileAndVerifies) {
  const std::string d = temp_dir("marker");
  CheckpointDir ck(d);
  write_checkpoint(ck, 7);
  const CheckpointMarker mk = ck.read_marker(7);
  EXPECT_EQ(mk.world, 2u);
  EXPECT_EQ(mk.zero_stage, 1u);
  ASSERT_EQ(mk.files.size(), 3u);
  // What was hashed while writing equals the files on disk.
  EXPECT_EQ(mk.files[0], digest_file(ck.model_path(7)));
  EXPECT_EQ(mk.files[1], digest_file(ck.state_path(7, 0)));
  EXPECT_EQ(mk.files[2], digest_file(ck.state_path(7, 1)));
  EXPECT_EQ(mk.files[2].name, "state_00000007_00001.bin");
  const std::string text = read_text_file(ck.done_path(7));
  EXPECT_EQ(text.rfind("step=7 world=2 zero_stage=1\nfile model_00000007.bin size=", 0), 0u) << text;
  std::string note = "unset";
  EXPECT_EQ(ck.verify(7, &note), "");
  EXPECT_EQ(note, "unset");

  // Ranks other than 0 only contribute their digest.
  FakeComm rank1(1, 2);
  ck.complete_checkpoint(rank1, 8, 1, mk.files[2]);
  EXPECT_FALSE(file_exists(ck.done_path(8)));
}

TEST(CheckpointMarker, EveryDamagedFileIsNamed) {
  const std::string d = temp_dir("damage");
  CheckpointDir ck(d);
  write_checkpoint(ck, 3);
  const std::string clean = d + "/clean";
  std::system(("mkdir -p " + clean + " && cp " + d + "/*_00000003* " + clean + "/").c_str());
  auto restore = [&] { std::system(("cp " + clean + "/* " + d + "/").c_str()); };

  flip_byte(ck.model_path(3), 5);
  std::string p = ck.verify(3);
  EXPECT_NE(p.find("model_00000003.bin checksum mismatch (expected xxh64 "), std::string::npos) << p;
  restore();
  flip_byte(ck.state_path(3, 1), 100);
  p = ck.verify(3);
  EXPECT_NE(p.find("state_00000003_00001.bin checksum mismatch"), std::string::npos) << p;
  restore();
  const size_t marker_bytes = read_text_file(ck.done_path(3)).size();
  for (size_t offset : {size_t{2}, size_t{40}, marker_bytes - 5}) {  // first line, a file line, the end line
    // a digit for another (a flipped bit may turn the end line's hex into a
    // non-digit, which is a malformed marker rather than a corrupt one)
    std::string bytes = read_text_file(ck.done_path(3));
    bytes[offset] = bytes[offset] == '0' ? '1' : '0';
    std::ofstream(ck.done_path(3), std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
    p = ck.verify(3);
    EXPECT_NE(p.find("DONE_00000003 is corrupt"), std::string::npos) << offset << ": " << p;
    EXPECT_NE(error_of([&] { ck.read_marker(3); }).find(ck.done_path(3)), std::string::npos);
    restore();
  }
  for (size_t cut : {size_t{5}, size_t{20}}) {  // a marker cut short inside its end line
    EXPECT_EQ(truncate(ck.done_path(3).c_str(), static_cast<off_t>(marker_bytes - cut)), 0);
    p = ck.verify(3);
    EXPECT_EQ(p.rfind("DONE_00000003: malformed completion marker", 0), 0u) << p;
    restore();
  }
  EXPECT_EQ(truncate(ck.state_path(3, 0).c_str(), 10), 0);
  p = ck.verify(3);
  EXPECT_NE(p.find("state_00000003_00000.bin has 10 bytes, expected "), std::string::npos) << p;
  restore();
  std::remove(ck.model_path(3).c_str());
  EXPECT_EQ(ck.verify(3), "model_00000003.bin is missing");
  restore();
  EXPECT_EQ(ck.verify(3), "");
}

TEST(CheckpointMarker, OldMarkersStillLoadUnverified) {
  const std::string d = temp_dir("oldmarker");
  CheckpointDir ck(d);
  write_text_file_atomic(ck.model_path(4), "m");
  write_state_file(ck.state_path(4, 0), sample_state(0, 10, 0, 1));
  write_text_file_atomic(ck.done_path(4), "step=4 world=1 zero_stage=0\n");  // as written before checksums
  const CheckpointMarker mk = ck.read_marker(4);
  EXPECT_EQ(mk.world, 1u);
  EXPECT_TRUE(mk.files.empty());
  std::string note;
  EXPECT_EQ(ck.verify(4, &note), "");
  EXPECT_NE(note.find("predates checksums"), std::string::npos) << note;
  std::remove(ck.state_path(4, 0).c_str());
  EXPECT_EQ(ck.verify(4), "state_00000004_00000.bin is missing");
  // A marker listing other files than the checkpoint's is malformed.
  CheckpointDir other(d);
  other.write_marker(5, 1, 0, {FileDigest{"model_00000005.bin", 1, 2}});
  EXPECT_NE(error_of([&] { other.read_marker(5); }).find("malformed"), std::string::npos);
}

TEST(ResumeSelection, RefusesCorruptNewestOrFallsBack) {
  const std::string d = temp_dir("select");
  CheckpointDir ck(d);
  FakeComm comm(0, 1);
  std::vector<std::string> notes;
  const Notify note = [&](const std::string& s) { notes.push_back(s); };
  EXPECT_EQ(ck.select_resume_step(comm, false, note), -1);  // nothing yet: start fresh
  for (uint64_t step : {5, 10, 15}) write_checkpoint(ck, step);
  EXPECT_EQ(ck.select_resume_step(comm, false, note), 15);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("checkpoint step 15: checksums verified"), std::string::npos) << notes[0];

  flip_byte(ck.model_path(15), 3);
  flip_byte(ck.state_path(10, 0), 60);
  const std::string refusal = error_of([&] { ck.select_resume_step(comm, false, note); });
  EXPECT_EQ(refusal.rfind("checkpoint step 15 in " + d + " is corrupt: model_00000015.bin checksum mismatch", 0), 0u)
      << refusal;
  EXPECT_NE(refusal.find("the previous complete checkpoint that verifies is step 5: rerun with --resume-fallback"),
            std::string::npos)
      << refusal;
  EXPECT_EQ(ck.complete_steps(), (std::vector<uint64_t>{5, 10, 15}));  // refusing changes nothing

  notes.clear();
  EXPECT_EQ(ck.select_resume_step(comm, true, note), 5);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].rfind("WARNING: checkpoint step 15 in " + d + " is corrupt", 0), 0u) << notes[0];
  EXPECT_NE(notes[0].find("resuming from step 5 instead"), std::string::npos) << notes[0];
  // The corrupt checkpoints no longer count as complete (resume, prune).
  EXPECT_EQ(ck.complete_steps(), (std::vector<uint64_t>{5}));
  EXPECT_TRUE(file_exists(ck.done_path(15) + ".corrupt"));
  EXPECT_TRUE(file_exists(ck.done_path(10) + ".corrupt"));

  flip_byte(ck.state_path(5, 1), 70);
  EXPECT_NE(error_of([&] { ck.select_resume_step(comm, true, note); }).find("no older complete checkpoint verifies"),
            std::string::npos);
  // Other ranks take rank 0's choice.
  FakeComm rank1(1, 2);
  rank1.broadcast_value = 5;
  EXPECT_EQ(ck.select_resume_step(rank1, false, note), 5);
}

// ---- the output directory lock ------------------------------------------------------

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
    ASSERT_TRUE(file_exists(first.lock_path()));
    LockHolder h;
    ASSERT_TRUE(parse_lock(read_text_file(first.lock_path()), &h));
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
