#include "dataloader/loss_mask.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "loss-mask headers are little-endian int32");

namespace gpt2 {
using namespace fileio;
namespace {

constexpr size_t kChunk = 1 << 20;

int32_t checked_T(const std::string& path, int32_t T) {
  if (T < 0) throw file_error(path, "negative packed row length T=" + std::to_string(T));
  return T;
}

}  // namespace

std::string loss_mask_path(const std::string& shard_path) {
  const std::string bin = ".bin";
  if (shard_path.size() > bin.size() &&
      shard_path.compare(shard_path.size() - bin.size(), bin.size(), bin) == 0)
    return shard_path.substr(0, shard_path.size() - bin.size()) + ".mask";
  return shard_path + ".mask";
}

LossMaskInfo parse_loss_mask_header(const uint8_t* header, size_t n, uint64_t file_size,
                                    const std::string& path) {
  check_header_present(n, file_size, kLossMaskHeaderBytes, path, "loss-mask");
  const int32_t magic = header_word(header, 0), version = header_word(header, 1);
  if (magic != kLossMaskMagic)
    throw file_error(path, "bad magic " + std::to_string(magic) + " (expected " +
                               std::to_string(kLossMaskMagic) + " for a loss-mask file)");
  if (version != kLossMaskVersion)
    throw file_error(path, "bad loss-mask version " + std::to_string(version) + " (expected " +
                               std::to_string(kLossMaskVersion) + ")");
  LossMaskInfo info;
  info.count = header_count(header);
  info.T = header_word(header, 4);
  info.examples = static_cast<uint32_t>(header_word(header, 5));
  if (info.T < 0) throw file_error(path, "bad packed row length T=" + std::to_string(info.T));
  const uint64_t payload = file_size - kLossMaskHeaderBytes;
  if (payload != info.count)
    throw file_error(path, std::string(payload < info.count ? "truncated" : "oversized") +
                               " loss mask: header says " + std::to_string(info.count) + " tokens (" +
                               (info.count <= UINT64_MAX - kLossMaskHeaderBytes
                                    ? std::to_string(kLossMaskHeaderBytes + info.count)
                                    : std::string("too many")) +
                               " bytes) but the file has " + std::to_string(file_size) + " bytes");
  return info;
}

void check_loss_mask_bytes(const uint8_t* mask, size_t n, uint64_t first_index, const std::string& path) {
  for (size_t i = 0; i < n; ++i)
    if (mask[i] > 1) {
      const uint64_t index = first_index + i;
      throw file_error(path, "bad loss-mask byte " + std::to_string(mask[i]) + " at token " +
                                 std::to_string(index) + " (byte offset " +
                                 std::to_string(kLossMaskHeaderBytes + index) + "; expected 0 or 1)");
    }
}

// ---------------------------------------------------------------- writer

LossMaskWriter::LossMaskWriter(const std::string& path, int32_t T)
    : T_(checked_T(path, T)), out_(path, kLossMaskHeaderBytes, kChunk) {}

LossMaskWriter::~LossMaskWriter() = default;

void LossMaskWriter::append(const uint8_t* mask, size_t n) {
  out_.check_open();
  check_loss_mask_bytes(mask, n, count_, out_.path());
  out_.append(mask, n);
  count_ += n;
}

void LossMaskWriter::close() {
  int32_t header[256] = {};
  header[0] = kLossMaskMagic;
  header[1] = kLossMaskVersion;
  set_header_count(header, count_);
  header[4] = T_;
  header[5] = static_cast<int32_t>(examples_);
  out_.finish(reinterpret_cast<const uint8_t*>(header));
}

void write_loss_mask(const std::string& path, const std::vector<uint8_t>& mask, int32_t T,
                     uint32_t examples) {
  LossMaskWriter writer(path, T);
  writer.append(mask.data(), mask.size());
  writer.add_examples(examples);
  writer.close();
}

std::vector<uint8_t> read_loss_mask(const std::string& path, LossMaskInfo* info) {
  LossMaskFile file(path);
  std::vector<uint8_t> mask(file.count());
  file.read(0, mask.size(), mask.data());
  if (info) *info = file.info();
  return mask;
}

// ---------------------------------------------------------------- reader

LossMaskFile::LossMaskFile(const std::string& path) : file_(path, "cannot open loss mask") {
  uint8_t header[kLossMaskHeaderBytes] = {};
  info_ = parse_loss_mask_header(header, file_.read_prefix(header, kLossMaskHeaderBytes), file_.size(), path);
}

void LossMaskFile::read(uint64_t first, size_t n, uint8_t* out) const {
  if (!file_.is_open()) throw std::runtime_error("LossMaskFile: read from a closed file");
  if (first > info_.count || n > info_.count - first)
    throw file_error(path(), "read of tokens [" + std::to_string(first) + ", " + std::to_string(first + n) +
                                ") past the end (" + std::to_string(info_.count) + " tokens)");
  file_.read_at(kLossMaskHeaderBytes + first, n, out);
  check_loss_mask_bytes(out, n, first, path());
}

void LossMaskFile::check_all() const {
  std::vector<uint8_t> chunk(kChunk);
  for (uint64_t first = 0; first < info_.count; first += kChunk) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, info_.count - first));
    read(first, n, chunk.data());
  }
}

}  // namespace gpt2
