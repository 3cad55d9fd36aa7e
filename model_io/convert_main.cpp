// gpt2_convert: llm.c model file <-> Hugging Face GPT-2 directory. The
// direction follows IN: a directory holding config.json is read as a Hugging
// Face checkpoint and OUT is written as an llm.c model file; anything else is
// read as an llm.c model file and OUT is written as a Hugging Face directory.
#include <sys/resource.h>

#include <cstdio>
#include <stdexcept>
#include <string>

#include "model/gpt2.h"
#include "model_io/hf_checkpoint.h"
#include "model_io/model_file.h"
#include "util/checked_io.h"

namespace {

const char* const kUsage =
    "usage: gpt2_convert [--dtype fp32|bf16] IN OUT\n"
    "       gpt2_convert --info IN\n"
    "Converts a GPT-2 between llm.c's model file and Hugging Face's directory form.\n"
    "  IN a directory with config.json (+ model.safetensors or model.safetensors.index.json):\n"
    "     OUT is written as an llm.c model file (v3 fp32, or v5 with --dtype bf16)\n"
    "  IN an llm.c model file (v3 / v5):\n"
    "     OUT is written as a Hugging Face directory (config.json + model.safetensors,\n"
    "     F32 or BF16) that GPT2LMHeadModel.from_pretrained loads\n"
    "  --dtype fp32|bf16   element type of OUT [fp32]\n"
    "  --info              load IN and print its config, parameter count, FNV-1a checksum of the\n"
    "                      fp32 parameters and the peak resident memory; write nothing\n"
    "  -h, --help          this text\n";

double peak_rss_mib() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;  // Linux reports KiB
}

struct Args {
  std::string in, out, dtype = "fp32";
  bool info = false;
};

// Returns false after printing help; throws std::invalid_argument on a usage error.
bool parse_args(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; i++) {
    const std::string s = argv[i];
    if (s == "-h" || s == "--help") {
      std::fputs(kUsage, stdout);
      return false;
    }
    if (s == "--info") {
      a->info = true;
    } else if (s == "--dtype") {
      if (i + 1 >= argc) throw std::invalid_argument("--dtype needs a value (fp32 or bf16)");
      a->dtype = argv[++i];
      if (a->dtype != "fp32" && a->dtype != "bf16")
        throw std::invalid_argument("--dtype: invalid value '" + a->dtype + "' (expected fp32 or bf16)");
    } else if (s.size() > 1 && s[0] == '-') {
      throw std::invalid_argument("unknown option '" + s + "'");
    } else if (a->in.empty()) {
      a->in = s;
    } else if (a->out.empty()) {
      a->out = s;
    } else {
      throw std::invalid_argument("unexpected argument '" + s + "'");
    }
  }
  if (a->in.empty()) throw std::invalid_argument("missing IN");
  if (a->info != a->out.empty()) throw std::invalid_argument(a->info ? "--info takes no OUT" : "missing OUT");
  return true;
}

int run(const Args& a) {
  const bool from_hf = gpt2::is_hf_checkpoint_dir(a.in);
  const gpt2::ModelFile mf = gpt2::read_model_file(a.in);  // dispatches on the same rule
  std::printf("read %s (%s): %s, %zu parameters; peak RSS %.1f MiB\n", a.in.c_str(),
              from_hf ? "Hugging Face" : "llm.c", mf.config.describe().c_str(), mf.params.size(), peak_rss_mib());
  if (a.info) {
    std::printf("fnv1a64 of the fp32 parameters: %016llx\n",
                static_cast<unsigned long long>(gpt2::fnv1a64(mf.params.data(), mf.params.size() * sizeof(float))));
    return 0;
  }
  const bool bf16 = a.dtype == "bf16";
  if (from_hf) {
    gpt2::write_model_file(a.out, mf.config, mf.params, bf16 ? gpt2::kModelVersionBf16 : gpt2::kModelVersionFp32);
    std::printf("wrote llm.c model file %s (%s)\n", a.out.c_str(), bf16 ? "v5 bf16" : "v3 fp32");
  } else {
    gpt2::write_hf_checkpoint(a.out, mf.config, mf.params, bf16 ? gpt2::HfDtype::kBF16 : gpt2::HfDtype::kF32);
    std::printf("wrote Hugging Face directory %s (config.json + model.safetensors, %s)\n", a.out.c_str(),
                bf16 ? "BF16" : "F32");
  }
  std::printf("peak RSS %.1f MiB\n", peak_rss_mib());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  try {
    if (!parse_args(argc, argv, &a)) return 0;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "gpt2_convert: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt2_convert: error: %s\n", e.what());
    return 1;
  }
}
