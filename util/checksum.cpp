#include "util/checksum.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "util/checked_io.h"

namespace gpt2 {

namespace {

constexpr uint64_t kP1 = 11400714785074694791ULL;
constexpr uint64_t kP2 = 14029467366897019727ULL;
constexpr uint64_t kP3 = 1609587929392839161ULL;
constexpr uint64_t kP4 = 9650029242287828579ULL;
constexpr uint64_t kP5 = 2870177450012600261ULL;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// Unaligned little-endian loads (the host is little-endian, as everywhere here).
inline uint64_t load64(const unsigned char* p) {
  uint64_t x;
  std::memcpy(&x, p, 8);
  return x;
}
inline uint32_t load32(const unsigned char* p) {
  uint32_t x;
  std::memcpy(&x, p, 4);
  return x;
}

inline uint64_t round64(uint64_t acc, uint64_t input) {
  acc += input * kP2;
  return rotl(acc, 31) * kP1;
}

inline uint64_t merge_round(uint64_t h, uint64_t acc) {
  h ^= round64(0, acc);
  return h * kP1 + kP4;
}

// Consumes whole 32-byte stripes; returns the bytes used.
size_t consume_stripes(uint64_t acc[4], const unsigned char* p, size_t bytes) {
  size_t done = 0;
  for (; done + 32 <= bytes; done += 32) {
    acc[0] = round64(acc[0], load64(p + done));
    acc[1] = round64(acc[1], load64(p + done + 8));
    acc[2] = round64(acc[2], load64(p + done + 16));
    acc[3] = round64(acc[3], load64(p + done + 24));
  }
  return done;
}

}  // namespace

Xxh64::Xxh64(uint64_t seed) : seed_(seed) {
  acc_[0] = seed + kP1 + kP2;
  acc_[1] = seed + kP2;
  acc_[2] = seed;
  acc_[3] = seed - kP1;
}

void Xxh64::update(const void* data, size_t bytes) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  total_ += bytes;
  if (buffered_ > 0) {  // top up a partial stripe first
    const size_t take = bytes < 32 - buffered_ ? bytes : 32 - buffered_;
    std::memcpy(buf_ + buffered_, p, take);
    buffered_ += take;
    p += take;
    bytes -= take;
    if (buffered_ < 32) return;
    consume_stripes(acc_, buf_, 32);
    buffered_ = 0;
  }
  const size_t used = consume_stripes(acc_, p, bytes);
  std::memcpy(buf_, p + used, bytes - used);
  buffered_ = bytes - used;
}

uint64_t Xxh64::digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = rotl(acc_[0], 1) + rotl(acc_[1], 7) + rotl(acc_[2], 12) + rotl(acc_[3], 18);
    for (uint64_t a : acc_) h = merge_round(h, a);
  } else {
    h = seed_ + kP5;
  }
  h += total_;
  const unsigned char* p = buf_;
  size_t left = buffered_;
  for (; left >= 8; left -= 8, p += 8) h = rotl(h ^ round64(0, load64(p)), 27) * kP1 + kP4;
  if (left >= 4) {
    h = rotl(h ^ (static_cast<uint64_t>(load32(p)) * kP1), 23) * kP2 + kP3;
    left -= 4;
    p += 4;
  }
  for (; left > 0; left--, p++) h = rotl(h ^ (*p * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

uint64_t xxh64(const void* data, size_t bytes, uint64_t seed) {
  Xxh64 h(seed);
  h.update(data, bytes);
  return h.digest();
}

uint64_t xxh64_file(const std::string& path, uint64_t* size) {
  InputFile in(path);
  std::vector<unsigned char> chunk(4 << 20);
  Xxh64 h;
  while (in.position() < in.size()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), in.size() - in.position()));
    in.read(chunk.data(), n, "contents");
    h.update(chunk.data(), n);
  }
  if (size) *size = in.size();
  return h.digest();
}

std::string hex64(uint64_t x) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

bool parse_hex64(const std::string& s, uint64_t* x) {
  if (s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return false;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *x = v;
  return true;
}

}  // namespace gpt2
