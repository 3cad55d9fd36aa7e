// Test helper of test/e2e/hf_import_test.sh: loads a model through the
// trainer's loader entry point (read_model_file: an llm.c file or a Hugging
// Face directory), runs the CPU backend's forward on B x T tokens and writes
// what PyTorch is compared against.
//   hf_logits MODEL TOKENS B T OUT
// TOKENS: B*T+1 int32 (inputs are the first B*T, targets the last B*T).
// OUT: float32 logits [B, T, vocab_size], then the float32 mean loss.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "backend/backend.h"
#include "model/gpt2.h"
#include "model_io/model_file.h"
#include "util/checked_io.h"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: hf_logits MODEL TOKENS B T OUT\n");
    return 2;
  }
  try {
    const int B = std::atoi(argv[3]), T = std::atoi(argv[4]);
    const gpt2::ModelFile mf = gpt2::read_model_file(argv[1]);
    std::vector<int32_t> toks(static_cast<size_t>(B) * T + 1);
    gpt2::InputFile in(argv[2]);
    in.read(toks.data(), toks.size() * sizeof(int32_t), "tokens");
    auto be = gpt2::make_cpu_backend(0);
    gpt2::GPT2 model(*be, mf.config, B, T);
    model.set_parameters(mf.params);
    const float loss = model.forward(toks.data(), toks.data() + 1, B, T);
    gpt2::AtomicOutputFile out(argv[5]);
    for (int b = 0; b < B; b++)
      for (int t = 0; t < T; t++) {
        const std::vector<float> row = model.logits_at(b, t);
        out.write(row.data(), row.size() * sizeof(float));
      }
    out.write(&loss, sizeof(loss));
    out.commit();
    std::printf("%s: %s, loss %.9f\n", argv[1], mf.config.describe().c_str(), loss);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hf_logits: error: %s\n", e.what());
    return 1;
  }
}
