#include "dataprep/prep_common.h"

#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "dataloader/loss_mask.h"

namespace gpt2 {

std::string with_commas(uint64_t v) {
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

void make_parent_dirs(const std::string& prefix) {
  for (size_t i = 1; i < prefix.size(); ++i) {
    if (prefix[i] != '/') continue;
    const std::string dir = prefix.substr(0, i);
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      throw std::runtime_error(dir + ": cannot create directory (" + std::strerror(errno) + ")");
    }
  }
}

std::string shard_output_path(const std::string& prefix, const std::string& split, uint64_t index, bool no_index) {
  if (no_index) return prefix + "_" + split + ".bin";
  char idx[32];
  std::snprintf(idx, sizeof idx, "%06" PRIu64, index);
  return prefix + "_" + split + "_" + idx + ".bin";
}

namespace {

void remove_file(const std::string& path, const char* what, bool verbose) {
  if (std::remove(path.c_str()) != 0)
    throw std::runtime_error(path + ": cannot remove stale " + what + " (" + std::strerror(errno) + ")");
  if (verbose) std::fprintf(stderr, "removed stale %s %s (not part of this run)\n", what, path.c_str());
}

}  // namespace

void remove_stale_outputs(const std::string& prefix, const std::vector<std::string>& written, bool verbose) {
  auto was_written = [&](const std::string& p) { return std::find(written.begin(), written.end(), p) != written.end(); };
  for (const char* split : {"_val_", "_train_"}) {
    for (const char* ext : {".bin", ".mask"}) {
      const std::string pattern = prefix + split + "[0-9][0-9][0-9][0-9][0-9][0-9]" + ext;
      glob_t g{};
      if (::glob(pattern.c_str(), 0, nullptr, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) {
          const std::string path = g.gl_pathv[i];
          if (!was_written(path)) remove_file(path, ext[1] == 'b' ? "shard" : "loss mask", verbose);
        }
      }
      globfree(&g);
    }
  }
  for (const std::string& path : written) {
    if (path.size() < 4 || path.compare(path.size() - 4, 4, ".bin") != 0) continue;
    const std::string mask = loss_mask_path(path);
    if (!was_written(mask) && ::access(mask.c_str(), F_OK) == 0) remove_file(mask, "loss mask", verbose);
  }
}

}  // namespace gpt2
