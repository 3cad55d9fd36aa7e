#include "train/path_guard.h"

#include <sys/stat.h>

#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "dataloader/dataloader.h"
#include "model_io/hf_checkpoint.h"
#include "tokenizer/tokenizer.h"
#include "train/checkpoint.h"
#include "train/run_plan.h"
#include "util/checked_io.h"

namespace gpt2 {

namespace {

namespace fs = std::filesystem;

struct FileId {
  dev_t dev;
  ino_t ino;
  bool operator==(const FileId& o) const { return dev == o.dev && ino == o.ino; }
};

// What the path names after following links; none when it does not exist.
std::optional<FileId> file_id(const std::string& path) {
  struct stat st;
  if (path.empty() || stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{st.st_dev, st.st_ino};
}

struct Input {
  std::string flag, path;
  FileId id;
};

// A directory stands for the regular files in it (an HF checkpoint, a
// checkpoint directory); anything else for itself, and it must be a regular
// file: reading a FIFO or a device would wait on whatever writes it, with no
// signal noticed (the one stream a run reads is --prompt-file -).
void add_input(std::vector<Input>* in, const std::string& flag, const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const fs::directory_entry& e : fs::directory_iterator(path, ec))
      if (fs::is_regular_file(e.path(), ec))
        if (const auto id = file_id(e.path().string())) in->push_back({flag, e.path().string(), *id});
    return;
  }
  const auto id = file_id(path);
  if (!id) return;  // a missing input is the reader's error to report
  if (!fs::is_regular_file(path, ec))
    throw UsageError(flag + " " + path + " is not a regular file (a FIFO, a device or a socket): give a file");
  in->push_back({flag, path, *id});
}

// Shards the pattern names; one that names nothing is the loader's error to report.
void add_shards(std::vector<Input>* in, const std::string& flag, const std::string& pattern) {
  std::vector<std::string> shards;
  try {
    shards = expand_shard_pattern(pattern);
  } catch (const std::exception&) {
    return;
  }
  for (const std::string& s : shards) add_input(in, flag, s);
}

std::vector<Input> inputs_of(const TrainOptions& o) {
  std::vector<Input> in;
  if (!names_preset(o.model)) add_input(&in, "--model", o.model);
  if (!o.init_from.empty()) add_input(&in, "--init-from", o.init_from);
  const bool training = !o.eval_only && !o.generate;
  if (training) add_shards(&in, "--train-data", o.train_data);
  if (o.eval_only || (training && o.val_every > 0)) add_shards(&in, "--val-data", o.val_data);
  if (!o.eval_hellaswag.empty()) add_input(&in, "--eval-hellaswag", o.eval_hellaswag);
  if (!o.prompt_file.empty() && o.prompt_file != "-") add_input(&in, "--prompt-file", o.prompt_file);
  const std::string vocab = Tokenizer::default_dir();
  for (const char* name : {"/encoder.json", "/vocab.bpe"}) add_input(&in, "the GPT-2 vocabulary", vocab + name);
  return in;
}

// A directory the run writes into, and whether a file name there is one it writes.
struct OutputDir {
  std::string flag, path;
  bool (*writes)(const std::string& name);
};

std::vector<OutputDir> output_dirs_of(const TrainOptions& o) {
  std::vector<OutputDir> out;
  if (o.eval_only || o.generate) return out;
  if (!o.output_dir.empty()) out.push_back({"--output-dir", o.output_dir, CheckpointDir::writes});
  if (!o.save_hf.empty()) out.push_back({"--save-hf", o.save_hf, is_hf_checkpoint_file});
  return out;
}

struct OutputFile {
  std::string flag, path;
};

std::vector<OutputFile> output_files_of(const TrainOptions& o) {
  std::vector<OutputFile> out;
  if (o.eval_only && !o.eval_json.empty() && o.eval_json != "-") out.push_back({"--eval-json", o.eval_json});
  if (!o.log_jsonl.empty()) out.push_back({"--log-jsonl", o.log_jsonl});
  return out;
}

// The output directory that `path` would be written in and whose files that name is.
const OutputDir* written_by(const std::vector<OutputDir>& dirs, const std::string& path) {
  const std::string dir = fs::path(path).parent_path().string();
  const auto parent = file_id(dir.empty() ? "." : dir);
  if (!parent) return nullptr;
  const std::string name = fs::path(path).filename().string();
  for (const OutputDir& d : dirs)
    if (file_id(d.path) == parent && d.writes(name)) return &d;
  return nullptr;
}

[[noreturn]] void collision(const std::string& what) {
  throw UsageError(what + ": a run never writes over what it reads or manages; choose another path");
}

}  // namespace

void check_outputs_spare_inputs(const TrainOptions& o) {
  const std::vector<Input> inputs = inputs_of(o);
  const std::vector<OutputDir> dirs = output_dirs_of(o);
  const std::vector<OutputFile> files = output_files_of(o);
  for (const OutputDir& d : dirs) check_name_fits(d.flag, d.path);
  // At most one output file (--eval-json needs --eval-only, which refuses
  // --log-jsonl), so no two of them can name one file.
  for (const OutputFile& f : files) {
    check_name_fits(f.flag, f.path);
    const auto id = file_id(f.path);
    for (const Input& in : inputs)
      if (id == in.id)
        collision(f.flag + " " + f.path + " is " + (in.path == f.path ? "" : in.path + ", ") + "a file " + in.flag +
                  " reads");
    if (const OutputDir* d = written_by(dirs, f.path))
      collision(f.flag + " " + f.path + " is a file " + d->flag + " " + d->path + " writes");
  }
  for (const Input& in : inputs)
    if (const OutputDir* d = written_by(dirs, in.path))
      collision(in.flag + "'s " + in.path + " lies in " + d->flag + " " + d->path + ", which writes a file of that name");
}

}  // namespace gpt2
