// Shard format: writer/reader round trips in both widths, exact header bytes,
// 64-bit offsets, and every malformed file the reader must reject by name.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dataloader/shard.h"
#include "test/temp_dir.h"
#include "test/dataloader/test_util.h"

namespace gpt2 {
namespace {

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

TEST(Shard, U16RoundTripAndExactBytes) {
  TempDir dir;
  const std::string path = dir.file("a.bin");
  const std::vector<uint32_t> tokens = {50256, 0, 1, 65535, 31373, 995};
  write_shard(path, tokens, TokenWidth::kU16);
  const std::vector<uint8_t> bytes = file_bytes(path);
  ASSERT_EQ(bytes.size(), 1024u + 2 * tokens.size());
  EXPECT_EQ(word(bytes, 0), 20240520);
  EXPECT_EQ(word(bytes, 1), 1);
  EXPECT_EQ(word(bytes, 2), 6);
  for (int i = 3; i < 256; ++i) EXPECT_EQ(word(bytes, i), 0) << "header word " << i;
  // Token 3 (65535) as little-endian uint16 right after the header.
  EXPECT_EQ(bytes[1024 + 6], 0xFF);
  EXPECT_EQ(bytes[1024 + 7], 0xFF);
  EXPECT_EQ(bytes[1024 + 0], 50256 & 0xFF);
  EXPECT_EQ(bytes[1024 + 1], 50256 >> 8);
  EXPECT_EQ(read_shard(path), tokens);
  EXPECT_FALSE(file_exists(path + ".tmp"));
}

TEST(Shard, U32RoundTripAndExactBytes) {
  TempDir dir;
  const std::string path = dir.file("a.bin");
  const std::vector<uint32_t> tokens = {0, 70000, 100276, 4294967295u, 7};
  write_shard(path, tokens, TokenWidth::kU32);
  const std::vector<uint8_t> bytes = file_bytes(path);
  ASSERT_EQ(bytes.size(), 1024u + 4 * tokens.size());
  EXPECT_EQ(word(bytes, 0), 20240801);
  EXPECT_EQ(word(bytes, 1), 7);
  EXPECT_EQ(word(bytes, 2), 5);
  EXPECT_EQ(word(bytes, 3), 0);
  EXPECT_EQ(word(bytes, 256 + 1), 70000);
  EXPECT_EQ(read_shard(path), tokens);
  ShardFile file(path);
  EXPECT_EQ(file.width(), TokenWidth::kU32);
  EXPECT_EQ(file.count(), 5u);
  uint32_t two[2];
  file.read(2, 2, two);
  EXPECT_EQ(two[0], 100276u);
  EXPECT_EQ(two[1], 4294967295u);
}

TEST(Shard, StreamingWriterCrossesItsBufferAndCounts) {
  TempDir dir;
  const std::string path = dir.file("big.bin");
  // 1.5M tokens in uneven pieces crosses the 1M-token write buffer.
  std::vector<uint32_t> all(1500000);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint32_t>((i * 7919) % 50257);
  {
    ShardWriter writer(path, TokenWidth::kU16);
    size_t done = 0, piece = 1;
    while (done < all.size()) {
      const size_t n = std::min(piece, all.size() - done);
      writer.append(all.data() + done, n);
      done += n;
      piece = piece * 3 + 1;
      EXPECT_EQ(writer.count(), done);
    }
    EXPECT_TRUE(file_exists(path + ".tmp"));
    EXPECT_FALSE(file_exists(path));
    writer.close();
  }
  EXPECT_FALSE(file_exists(path + ".tmp"));
  EXPECT_EQ(read_shard(path, 50257), all);
  ShardFile file(path);
  std::vector<uint32_t> mid(1000);
  file.read(999500, mid.size(), mid.data());
  EXPECT_TRUE(std::equal(mid.begin(), mid.end(), all.begin() + 999500));
}

TEST(Shard, WriterWithoutCloseLeavesNothing) {
  TempDir dir;
  const std::string path = dir.file("x.bin");
  {
    ShardWriter writer(path, TokenWidth::kU16);
    const uint32_t t[3] = {1, 2, 3};
    writer.append(t, 3);
  }
  EXPECT_FALSE(file_exists(path));
  EXPECT_FALSE(file_exists(path + ".tmp"));
}

TEST(Shard, WriterRejectsIdsTooWideForU16) {
  TempDir dir;
  const std::string path = dir.file("w.bin");
  ShardWriter writer(path, TokenWidth::kU16);
  const uint32_t t[3] = {1, 65536, 3};
  expect_error([&] { writer.append(t, 3); }, {path, "65536", "uint16"});
}

TEST(Shard, OffsetsAre64Bit) {
  EXPECT_EQ(shard_token_offset(0, TokenWidth::kU16), 1024u);
  EXPECT_EQ(shard_token_offset(1ull << 31, TokenWidth::kU16), 1024u + (1ull << 32));
  EXPECT_EQ(shard_token_offset(3000000000ull, TokenWidth::kU32), 1024u + 12000000000ull);
}

TEST(Shard, ParsesCountAbove2To32FromHighHeaderWord) {
  std::vector<uint8_t> header(1024, 0);
  set_word(header, 0, kShardMagicU32);
  set_word(header, 1, kShardVersionU32);
  const uint64_t count = (1ull << 32) + 5;
  set_word(header, 2, 5);
  set_word(header, 3, 1);
  const ShardInfo info = parse_shard_header(header.data(), header.size(), 1024 + 4 * count, "big.bin");
  EXPECT_EQ(info.count, count);
  EXPECT_EQ(info.width, TokenWidth::kU32);
  expect_error([&] { parse_shard_header(header.data(), header.size(), 1024 + 4 * count - 4, "big.bin"); },
               {"big.bin", "truncated", "4294967301"});
}

// A sparse uint16 shard of 1.2e9 tokens (2.4 GB, almost no disk) with real
// tokens past byte 2^31: reads at those offsets must land where written.
TEST(Shard, ReadsPastTwoGiBInSparseFile) {
  TempDir dir;
  const std::string path = dir.file("sparse.bin");
  const uint64_t count = 1200000000ull;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  int32_t header[256] = {kShardMagicU16, kShardVersionU16, static_cast<int32_t>(count)};
  ASSERT_EQ(::pwrite(fd, header, sizeof(header), 0), static_cast<ssize_t>(sizeof(header)));
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(1024 + 2 * count)), 0);
  const uint64_t at = 1100000000ull;  // byte offset 2.2e9 > 2^31
  const uint16_t marks[3] = {11, 22, 33};
  ASSERT_EQ(::pwrite(fd, marks, sizeof(marks), static_cast<off_t>(shard_token_offset(at, TokenWidth::kU16))), 6);
  ::close(fd);

  ShardFile file(path);
  EXPECT_EQ(file.count(), count);
  uint32_t got[5];
  file.read(at - 1, 5, got);
  EXPECT_EQ(got[0], 0u);
  EXPECT_EQ(got[1], 11u);
  EXPECT_EQ(got[2], 22u);
  EXPECT_EQ(got[3], 33u);
  EXPECT_EQ(got[4], 0u);
  file.read(count - 2, 2, got);  // the last tokens, at byte ~2.4e9
  EXPECT_EQ(got[0], 0u);
  expect_error([&] { file.read(count - 1, 2, got); }, {path, "past the end"});
}

class ShardErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("bad.bin");
    write_shard(path_, {1, 2, 3, 4}, TokenWidth::kU16);
    good_ = file_bytes(path_);
  }
  TempDir dir_;
  std::string path_;
  std::vector<uint8_t> good_;
};

TEST_F(ShardErrors, MissingFile) {
  expect_error([&] { read_shard(dir_.file("nope.bin")); }, {dir_.file("nope.bin"), "cannot open"});
}

TEST_F(ShardErrors, BadMagic) {
  set_word(good_, 0, 12345);
  write_bytes(path_, good_);
  expect_error([&] { read_shard(path_); }, {path_, "bad magic 12345", "20240520"});
}

TEST_F(ShardErrors, BadVersionForEachMagic) {
  set_word(good_, 1, 7);  // the uint32 version under the uint16 magic
  write_bytes(path_, good_);
  expect_error([&] { read_shard(path_); }, {path_, "bad version 7"});
  set_word(good_, 0, kShardMagicU32);
  set_word(good_, 1, 1);
  write_bytes(path_, good_);
  expect_error([&] { read_shard(path_); }, {path_, "bad version 1", "expected 7"});
}

TEST_F(ShardErrors, TruncatedTokens) {
  good_.pop_back();
  write_bytes(path_, good_);
  expect_error([&] { read_shard(path_); }, {path_, "truncated", "1031 bytes"});
}

TEST_F(ShardErrors, TruncatedHeader) {
  good_.resize(100);
  write_bytes(path_, good_);
  expect_error([&] { read_shard(path_); }, {path_, "shorter than the 1024-byte"});
  write_bytes(path_, {});
  expect_error([&] { read_shard(path_); }, {path_, "0 bytes"});
}

TEST_F(ShardErrors, Oversized) {
  good_.push_back(0);
  good_.push_back(0);
  write_bytes(path_, good_);
  expect_error([&] { read_shard(path_); }, {path_, "oversized", "4 tokens"});
}

TEST_F(ShardErrors, CountDisagreesWithSize) {
  set_word(good_, 2, 5);
  write_bytes(path_, good_);
  expect_error([&] { read_shard(path_); }, {path_, "truncated", "5 tokens"});
}

TEST_F(ShardErrors, IdOutOfVocab) {
  write_shard(path_, {1, 2, 50257, 4}, TokenWidth::kU16);
  EXPECT_EQ(read_shard(path_, 50258).size(), 4u);
  expect_error([&] { read_shard(path_, 50257); }, {path_, "50257", "at token 2", "byte offset 1028"});
}

TEST_F(ShardErrors, DirectoryOrFifoIsNotAShard) {
  expect_error([&] { read_shard(dir_.path()); }, {dir_.path(), "not a regular file"});
  const std::string fifo = dir_.file("pipe.bin");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  expect_error([&] { read_shard(fifo); }, {fifo, "not a regular file"});  // and does not block
}

}  // namespace
}  // namespace gpt2
