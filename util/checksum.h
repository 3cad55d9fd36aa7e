// XXH64, the 64-bit xxHash (https://github.com/Cyan4973/xxHash, spec in its
// doc/xxhash_spec.md): the whole-file checksum of checkpoints. Bit-identical
// to libxxhash's XXH64 and to `xxhsum -H1 FILE` (seed 0), so a file can be
// checked by hand against its completion marker.
//
// Why not fnv1a64 (util/checked_io.h, kept inside state files for their format):
// FNV-1a does one dependent multiply per byte (~1 GB/s); XXH64 does four
// independent lanes of 8 bytes (~10 GB/s), which matters for multi-GB files
// hashed at every checkpoint and on every resume.
#ifndef UTIL_CHECKSUM_H
#define UTIL_CHECKSUM_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace gpt2 {

// Streaming form: update() any number of times, digest() any time.
class Xxh64 {
 public:
  explicit Xxh64(uint64_t seed = 0);
  void update(const void* data, size_t bytes);
  uint64_t digest() const;
  uint64_t total_bytes() const { return total_; }

 private:
  uint64_t acc_[4];
  uint64_t seed_;
  uint64_t total_ = 0;
  unsigned char buf_[32];
  size_t buffered_ = 0;
};

uint64_t xxh64(const void* data, size_t bytes, uint64_t seed = 0);

// XXH64 of a whole file (read in chunks); `size` gets its length in bytes.
// Errors name the file.
uint64_t xxh64_file(const std::string& path, uint64_t* size);

// 16 lower-case hex digits, and back (false on anything else).
std::string hex64(uint64_t x);
bool parse_hex64(const std::string& s, uint64_t* x);

}  // namespace gpt2

#endif  // UTIL_CHECKSUM_H
