#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>

#include "distributed/comm.h"
#include "test/train/checkpoint_fakes.h"
#include "test/temp_dir.h"
#include "train/checkpoint.h"
#include "util/checked_io.h"
#include "util/checksum.h"

namespace gpt2 {
namespace {

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
  const CheckpointMarker mk = ck.read_marker(15);
  EXPECT_EQ(mk.world, 2u);
  EXPECT_EQ(mk.zero_stage, 1u);

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

}  // namespace
}  // namespace gpt2
