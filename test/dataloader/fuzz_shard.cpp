// libFuzzer target for everything the dataloader parses from untrusted bytes:
// shard headers and token ids (in memory and through the file reader and the
// DataLoader constructor), saved loader states and loss-mask sidecars (header and
// bytes, in memory and through the file reader). The first input byte picks
// the parser. Built and run by test/dataloader/fuzz_shard.sh, which sets
// FUZZ_SHARD_DIR to a scratch folder and FUZZ_SHARD_CORPUS to the seed folder.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "dataloader/dataloader.h"
#include "dataloader/loss_mask.h"
#include "dataloader/shard.h"

namespace {

constexpr uint32_t kVocab = 50257;

std::string scratch(const std::string& name) {
  const char* dir = std::getenv("FUZZ_SHARD_DIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/" + name;
}

void write_file(const std::string& path, const uint8_t* data, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n));
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

gpt2::DataLoaderOptions state_loader_options() {
  gpt2::DataLoaderOptions o;
  o.pattern = scratch("state_shard.bin");
  o.B = 2;
  o.T = 4;
  o.world = 2;
  o.rank = 1;
  o.grad_accum = 2;
  o.shuffle = true;
  o.seed = 17;
  o.vocab_size = kVocab;
  return o;
}

// The loader whose load_state is fuzzed: one shard of 10 windows.
gpt2::DataLoader& state_loader() {
  static std::unique_ptr<gpt2::DataLoader> loader;
  if (!loader) {
    std::vector<uint32_t> tokens(8 * 10 + 1);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i);
    gpt2::write_shard(scratch("state_shard.bin"), tokens, gpt2::TokenWidth::kU16);
    loader = std::make_unique<gpt2::DataLoader>(state_loader_options());
  }
  return *loader;
}

void add_seed(const std::string& name, uint8_t mode, const std::vector<uint8_t>& body) {
  const char* corpus = std::getenv("FUZZ_SHARD_CORPUS");
  if (!corpus || !*corpus) return;
  std::vector<uint8_t> bytes = {mode};
  bytes.insert(bytes.end(), body.begin(), body.end());
  write_file(std::string(corpus) + "/" + name, bytes.data(), bytes.size());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Seeds: valid shards of both widths and a valid mid-step loader state.
  gpt2::write_shard(scratch("seed16.bin"), {50256, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
                    gpt2::TokenWidth::kU16);
  gpt2::write_shard(scratch("seed32.bin"), {50256, 70000, 3, 4, 5, 6, 7, 8, 9}, gpt2::TokenWidth::kU32);
  add_seed("u16_memory", 0, file_bytes(scratch("seed16.bin")));
  add_seed("u32_memory", 0, file_bytes(scratch("seed32.bin")));
  add_seed("u16_file", 1, file_bytes(scratch("seed16.bin")));
  add_seed("u32_file", 1, file_bytes(scratch("seed32.bin")));
  gpt2::DataLoader& loader = state_loader();
  int32_t in[8], tg[8];
  for (int k = 0; k < 5; ++k) loader.next_batch(in, tg);
  add_seed("state", 2, loader.save_state());
  gpt2::write_loss_mask(scratch("seed.mask"), {0, 1, 1, 0, 1, 1, 1, 0}, 4, 2);
  add_seed("mask", 3, file_bytes(scratch("seed.mask")));
  loader.reset();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 4;
  ++data;
  --size;
  int32_t in[8], tg[8];
  try {
    if (mode == 0) {
      const gpt2::ShardInfo info = gpt2::parse_shard_header(data, size, size, "fuzz.bin");
      // Accepted headers must describe exactly the bytes present.
      if (gpt2::shard_token_offset(info.count, info.width) != size) std::abort();
      gpt2::check_token_ids(data + gpt2::kShardHeaderBytes, info.count, info.width, kVocab, 0, "fuzz.bin");
    } else if (mode == 1) {
      const std::string path = scratch("input.bin");
      write_file(path, data, size);
      const std::vector<uint32_t> tokens = gpt2::read_shard(path, kVocab);
      for (uint32_t t : tokens)
        if (t >= kVocab) std::abort();
      gpt2::DataLoaderOptions o;
      o.pattern = path;
      o.B = 1;
      o.T = 4;
      o.vocab_size = kVocab;
      gpt2::DataLoader loader(o);
      for (int k = 0; k < 3; ++k) loader.next_batch(in, tg);
    } else if (mode == 3) {
      const gpt2::LossMaskInfo info = gpt2::parse_loss_mask_header(data, size, size, "fuzz.mask");
      if (gpt2::kLossMaskHeaderBytes + info.count != size || info.T < 0) std::abort();
      gpt2::check_loss_mask_bytes(data + gpt2::kLossMaskHeaderBytes, info.count, 0, "fuzz.mask");
      const std::string path = scratch("input.mask");
      write_file(path, data, size);
      const std::vector<uint8_t> mask = gpt2::read_loss_mask(path);
      if (mask.size() != info.count) std::abort();
      for (uint8_t b : mask)
        if (b > 1) std::abort();
    } else {
      gpt2::DataLoader& loader = state_loader();
      const std::vector<uint8_t> before = loader.save_state();
      try {
        loader.load_state(std::vector<uint8_t>(data, data + size));
      } catch (const std::runtime_error&) {
        // A rejected state must leave the loader untouched.
        if (loader.save_state() != before) std::abort();
        throw;
      }
      // An accepted state must be usable and round-trip.
      const std::vector<uint8_t> after = loader.save_state();
      for (int k = 0; k < 3; ++k) loader.next_batch(in, tg);
      loader.load_state(after);
      if (loader.save_state() != after) std::abort();
      loader.reset();
    }
  } catch (const std::runtime_error&) {
    // Rejecting bad input with a message is the expected outcome.
  }
  return 0;
}
