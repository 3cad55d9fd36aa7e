// Loss-mask sidecars: path rule, round trip (streaming and whole-file, random access), every
// malformed file named in its error, and the DataLoader applying the mask (targets -1 where the
// mask is 0), rejecting a shard without a sidecar among shards with one, a count mismatch and a
// packed-T mismatch, and resuming exactly with masks.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "dataloader/dataloader.h"
#include "dataloader/loss_mask.h"
#include "dataloader/shard.h"
#include "test/temp_dir.h"
#include "test/dataloader/test_util.h"

namespace gpt2 {
namespace {

TEST(LossMask, SidecarPath) {
  EXPECT_EQ(loss_mask_path("data/sft_train_000001.bin"), "data/sft_train_000001.mask");
  EXPECT_EQ(loss_mask_path("x.bin"), "x.mask");
  EXPECT_EQ(loss_mask_path("data/tokens"), "data/tokens.mask");
  EXPECT_EQ(loss_mask_path("data/a.bin.old"), "data/a.bin.old.mask");
  EXPECT_EQ(loss_mask_path(".bin"), ".bin.mask");  // no stem to keep
}

TEST(LossMask, RoundTripHeaderAndRandomAccess) {
  TempDir dir;
  const std::string path = dir.file("m.mask");
  const std::vector<uint8_t> mask = {0, 1, 1, 0, 1, 0, 0, 1, 1, 1};
  write_loss_mask(path, mask, 4, 3);
  const std::vector<uint8_t> bytes = file_bytes(path);
  ASSERT_EQ(bytes.size(), 1024u + 10u);
  EXPECT_EQ(word(bytes, 0), 20241123);
  EXPECT_EQ(word(bytes, 1), 1);
  EXPECT_EQ(word(bytes, 2), 10);
  EXPECT_EQ(word(bytes, 3), 0);
  EXPECT_EQ(word(bytes, 4), 4);
  EXPECT_EQ(word(bytes, 5), 3);
  for (int i = 6; i < 256; ++i) ASSERT_EQ(word(bytes, i), 0) << i;
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin() + 1024, bytes.end()), mask);
  EXPECT_FALSE(::access((path + ".tmp").c_str(), F_OK) == 0);

  LossMaskInfo info;
  EXPECT_EQ(read_loss_mask(path, &info), mask);
  EXPECT_EQ(info.count, 10u);
  EXPECT_EQ(info.T, 4);
  EXPECT_EQ(info.examples, 3u);

  LossMaskFile file(path);
  uint8_t part[4];
  file.read(3, 4, part);
  EXPECT_EQ(std::vector<uint8_t>(part, part + 4), (std::vector<uint8_t>{0, 1, 0, 0}));
  file.read(10, 0, part);  // empty read at the end is fine
  expect_error([&] { file.read(8, 3, part); }, {path, "past the end"});
}

TEST(LossMask, StreamingWriterOverManyChunksAndAbandonedWriter) {
  TempDir dir;
  const std::string path = dir.file("big.mask");
  std::vector<uint8_t> want;
  {
    LossMaskWriter w(path, 0);
    std::vector<uint8_t> piece(700001);
    for (int k = 0; k < 4; ++k) {
      for (size_t i = 0; i < piece.size(); ++i) piece[i] = static_cast<uint8_t>((i * 7 + k) % 3 == 0);
      w.append(piece.data(), piece.size());
      want.insert(want.end(), piece.begin(), piece.end());
    }
    w.add_examples(5);
    EXPECT_EQ(w.count(), 4u * 700001u);
    w.close();
  }
  LossMaskInfo info;
  EXPECT_EQ(read_loss_mask(path, &info), want);
  EXPECT_EQ(info.T, 0);
  EXPECT_EQ(info.examples, 5u);
  {
    LossMaskWriter w(dir.file("gone.mask"), 8);
    const uint8_t one = 1;
    w.append(&one, 1);
    EXPECT_TRUE(::access(dir.file("gone.mask.tmp").c_str(), F_OK) == 0);
  }
  EXPECT_FALSE(::access(dir.file("gone.mask.tmp").c_str(), F_OK) == 0);
  EXPECT_FALSE(::access(dir.file("gone.mask").c_str(), F_OK) == 0);
}

TEST(LossMask, WriterRejectsBytesOtherThanZeroAndOne) {
  TempDir dir;
  const std::string path = dir.file("w.mask");
  LossMaskWriter w(path, 4);
  const uint8_t bad[3] = {1, 0, 2};
  expect_error([&] { w.append(bad, 3); }, {path, "bad loss-mask byte 2 at token 2"});
  expect_error([&] { LossMaskWriter(dir.file("n.mask"), -1); }, {"n.mask", "T=-1"});
}

TEST(LossMask, EveryMalformedFileIsNamed) {
  TempDir dir;
  const std::string good = dir.file("good.mask");
  write_loss_mask(good, {0, 1, 1, 0, 1, 1}, 2, 2);
  const std::vector<uint8_t> bytes = file_bytes(good);
  const std::string path = dir.file("bad.mask");

  std::vector<uint8_t> b = bytes;
  set_word(b, 0, 12345);
  write_bytes(path, b);
  expect_error([&] { LossMaskFile f(path); }, {path + ": bad magic 12345 (expected 20241123"});

  b = bytes;
  set_word(b, 1, 2);
  write_bytes(path, b);
  expect_error([&] { LossMaskFile f(path); }, {path + ": bad loss-mask version 2 (expected 1)"});

  b = bytes;
  b.pop_back();
  write_bytes(path, b);
  expect_error([&] { LossMaskFile f(path); },
               {path + ": truncated loss mask: header says 6 tokens (1030 bytes) but the file has 1029 bytes"});

  b = bytes;
  b.push_back(0);
  write_bytes(path, b);
  expect_error([&] { LossMaskFile f(path); }, {path + ": oversized loss mask: header says 6 tokens"});

  write_bytes(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + 100));
  expect_error([&] { LossMaskFile f(path); }, {path + ": file of 100 bytes is shorter than the 1024-byte"});

  b = bytes;
  set_word(b, 4, -5);
  write_bytes(path, b);
  expect_error([&] { LossMaskFile f(path); }, {path + ": bad packed row length T=-5"});

  b = bytes;
  set_word(b, 3, 1);  // 2^32 + 6 tokens claimed
  write_bytes(path, b);
  expect_error([&] { LossMaskFile f(path); }, {path + ": truncated loss mask: header says 4294967302 tokens"});

  b = bytes;
  b[1024 + 4] = 7;
  write_bytes(path, b);
  expect_error([&] { read_loss_mask(path); }, {path + ": bad loss-mask byte 7 at token 4 (byte offset 1028"});
  LossMaskFile f(path);  // the header is fine; the byte is caught by any read covering it
  uint8_t out[6];
  f.read(0, 4, out);
  expect_error([&] { f.read(3, 2, out); }, {path, "bad loss-mask byte 7 at token 4"});
  expect_error([&] { f.check_all(); }, {path, "bad loss-mask byte 7"});

  expect_error([&] { LossMaskFile m(dir.file("missing.mask")); }, {dir.file("missing.mask") + ": cannot open"});
}

// ---------------------------------------------------------------- DataLoader with masks

// A shard of `n` uint16 tokens (token i = 1000*s + i) and, when `with_mask`, a sidecar with
// mask byte i = (i % 3 != 0).
std::string make_masked_shard(const TempDir& dir, int s, uint32_t n, bool with_mask, int32_t T = 0) {
  std::vector<uint32_t> tokens(n);
  std::vector<uint8_t> mask(n);
  for (uint32_t i = 0; i < n; ++i) {
    tokens[i] = 1000u * static_cast<uint32_t>(s) + i;
    mask[i] = i % 3 != 0;
  }
  char name[32];
  std::snprintf(name, sizeof name, "sft_%03d.bin", s);
  const std::string path = dir.file(name);
  write_shard(path, tokens, TokenWidth::kU16);
  if (with_mask) write_loss_mask(loss_mask_path(path), mask, T);
  return path;
}

DataLoaderOptions opts(const std::string& pattern, int B, int T) {
  DataLoaderOptions o;
  o.pattern = pattern;
  o.B = B;
  o.T = T;
  return o;
}

TEST(DataLoaderLossMask, TargetsAreMinusOneWhereTheMaskIsZero) {
  TempDir dir;
  make_masked_shard(dir, 0, 25, true, 4);  // B*T = 8: 3 windows
  DataLoader loader(opts(dir.file("sft_*.bin"), 2, 4));
  EXPECT_TRUE(loader.has_loss_mask());
  std::vector<int32_t> in(8), tg(8);
  for (int w = 0; w < 3; ++w) {
    loader.next_batch(in.data(), tg.data());
    for (int j = 0; j < 8; ++j) {
      const int32_t token = 8 * w + j;
      EXPECT_EQ(in[j], token) << "window " << w << " input " << j;  // inputs unchanged
      const int32_t target = token + 1;
      EXPECT_EQ(tg[j], target % 3 != 0 ? target : -1) << "window " << w << " target " << j;
    }
  }
  // Window 0: targets are tokens 1..8, masked at 3 and 6.
  loader.reset();
  loader.next_batch(in.data(), tg.data());
  EXPECT_EQ(tg, (std::vector<int32_t>{1, 2, -1, 4, 5, -1, 7, 8}));
}

TEST(DataLoaderLossMask, WithoutSidecarsNothingChanges) {
  TempDir dir;
  make_masked_shard(dir, 0, 17, false);
  DataLoader loader(opts(dir.file("sft_*.bin"), 2, 4));
  EXPECT_FALSE(loader.has_loss_mask());
  std::vector<int32_t> in(8), tg(8);
  loader.next_batch(in.data(), tg.data());
  for (int j = 0; j < 8; ++j) EXPECT_EQ(tg[j], j + 1);
}

TEST(DataLoaderLossMask, ShardWithoutSidecarAmongShardsWithOneIsNamed) {
  TempDir dir;
  make_masked_shard(dir, 0, 17, true);
  const std::string bare = make_masked_shard(dir, 1, 17, false);
  make_masked_shard(dir, 2, 17, true);
  expect_error([&] { DataLoader l(opts(dir.file("sft_*.bin"), 2, 4)); },
               {bare + ": shard has no loss-mask sidecar " + dir.file("sft_001.mask"), dir.file("sft_000.mask")});
}

TEST(DataLoaderLossMask, CountMismatchAndPackedTMismatchAreNamed) {
  TempDir dir;
  const std::string shard = make_masked_shard(dir, 0, 17, true, 4);
  write_loss_mask(loss_mask_path(shard), std::vector<uint8_t>(16, 1), 4);
  expect_error([&] { DataLoader l(opts(shard, 2, 4)); },
               {dir.file("sft_000.mask") + ": loss mask has 16 tokens but its shard " + shard + " has 17"});

  TempDir dir2;
  const std::string s2 = make_masked_shard(dir2, 0, 2 * 512 + 1, true, 512);
  expect_error([&] { DataLoader l(opts(s2, 1, 1024)); },
               {dir2.file("sft_000.mask") + ": packed for T=512 but the run uses --seq-len 1024"});
  DataLoader ok(opts(s2, 2, 512));  // the matching T loads
  EXPECT_TRUE(ok.has_loss_mask());
  // T = 0 in the header: any T.
  TempDir dir3;
  const std::string s3 = make_masked_shard(dir3, 0, 65, true, 0);
  DataLoader any(opts(s3, 2, 8));
  EXPECT_TRUE(any.has_loss_mask());
}

TEST(DataLoaderLossMask, BadMaskByteIsAnErrorNamingTheSidecar) {
  TempDir dir;
  const std::string shard = make_masked_shard(dir, 0, 17, true);
  std::vector<uint8_t> b = file_bytes(loss_mask_path(shard));
  b[1024 + 9] = 2;
  write_bytes(loss_mask_path(shard), b);
  // The constructor validates headers; the first read of the shard scans every byte.
  expect_error([&] { DataLoader l(opts(shard, 2, 4)); }, {dir.file("sft_000.mask"), "bad loss-mask byte 2 at token 9"});
}

TEST(DataLoaderLossMask, ShuffledMultiShardResumeKeepsMasks) {
  TempDir dir;
  for (int s = 0; s < 3; ++s) make_masked_shard(dir, s, 8 * (4 + s) + 1, true, 4);
  DataLoaderOptions o = opts(dir.file("sft_*.bin"), 2, 4);
  o.shuffle = true;
  o.seed = 9;
  DataLoader a(o);
  std::vector<int32_t> in(8), tg(8);
  for (int k = 0; k < 5; ++k) a.next_batch(in.data(), tg.data());
  const std::vector<uint8_t> state = a.save_state();
  DataLoader b(o);
  b.load_state(state);
  for (int k = 0; k < 20; ++k) {
    std::vector<int32_t> in2(8), tg2(8);
    a.next_batch(in.data(), tg.data());
    b.next_batch(in2.data(), tg2.data());
    ASSERT_EQ(in, in2);
    ASSERT_EQ(tg, tg2);
    for (int j = 0; j < 8; ++j) {
      const int32_t target = in[j] + 1;  // shards hold consecutive tokens 1000*s + i
      EXPECT_EQ(tg[j], (target % 1000) % 3 != 0 ? target : -1);
    }
  }
}

}  // namespace
}  // namespace gpt2
