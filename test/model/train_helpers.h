// A model's plain training step for tests: gradients into a flat buffer laid
// out like the parameters, as DataParallel keeps them at ZeRO stages 0 and 1.
#ifndef TEST_MODEL_TRAIN_HELPERS_H
#define TEST_MODEL_TRAIN_HELPERS_H

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/gpt2.h"

namespace gpt2 {

// A zeroed gradient buffer of the model's parameter capacity, freed with it.
class FlatGrads {
 public:
  FlatGrads(Backend& be, const GPT2& model) : be_(be), t_(be.alloc(model.param_capacity(), BufferRole::kGrads)) {
    be_.zero(t_);
  }
  ~FlatGrads() { be_.free(t_); }
  FlatGrads(const FlatGrads&) = delete;
  FlatGrads& operator=(const FlatGrads&) = delete;
  Tensor tensor() const { return t_; }
  std::vector<float> download(size_t n) const {
    std::vector<float> host(n);
    be_.download(host.data(), t_.slice(0, n));
    return host;
  }

 private:
  Backend& be_;
  Tensor t_;
};

// A training forward and its backward, adding into `grads`; the mean loss.
inline float train_forward_backward(GPT2& model, const int32_t* inputs, const int32_t* targets, int B, int T,
                                    float dloss_scale, const FlatGrads& grads) {
  model.train_forward_deferred_loss(inputs, targets, B, T, dloss_scale);
  const float loss = static_cast<float>(model.collect_train_losses().mean());
  model.backward(grads.tensor());
  return loss;
}

}  // namespace gpt2

#endif  // TEST_MODEL_TRAIN_HELPERS_H
