// Step and evaluation logging: one flushed human line per event on stdout (no
// carriage returns, so Slurm logs stay readable) and, optionally, one JSON
// object per event appended to a JSONL file.
#ifndef METRICS_LOGGER_H
#define METRICS_LOGGER_H

#include <cstdint>
#include <cstdio>
#include <string>

namespace gpt2 {

struct StepRecord {
  int step = 0, total_steps = 0;   // 1-based step
  double loss = 0, grad_norm = 0, lr = 0, ms = 0, tok_per_s = 0, eta_s = 0;
  uint64_t comm_bytes = 0;         // bytes this rank sent in collectives during the step
  int64_t supervised_tokens = -1;  // targets in the loss, all ranks (SFT masks); -1: plain data, all count
  bool skipped = false;            // update skipped: non-finite loss/norm, or a spike
  std::string skip_note;           // the step line's " | SKIPPED (...)"
  std::string skip_reason;         // JSONL: "non-finite", "loss_z", "grad_z"
  double loss_z = 0, grad_z = 0;   // spike guards' z-scores (NaN in their warm-up)
  int64_t spike_skips = -1;        // steps skipped as spikes so far; -1: guards off
  double mfu = -1;                 // model FLOPs utilisation (fraction); < 0: no peak known
};

class TrainLogger {
 public:
  // enabled=false (non-zero ranks) makes every call a no-op.
  TrainLogger(bool enabled, const std::string& jsonl_path);
  ~TrainLogger();
  TrainLogger(const TrainLogger&) = delete;
  TrainLogger& operator=(const TrainLogger&) = delete;

  void step(const StepRecord& r);
  void val(int step, double val_loss);
  void hellaswag(int step, uint64_t n, double acc, double acc_norm);
  void sample(int step, const std::string& text);
  void info(const std::string& line);  // a plain line, flushed

 private:
  void jsonl(const std::string& obj);
  bool enabled_;
  FILE* jsonl_ = nullptr;
  std::string jsonl_path_;
};

std::string format_duration(double seconds);  // "1h02m", "3m05s", "12s"
std::string format_bytes(double bytes);       // "1.23 GiB"

}  // namespace gpt2

#endif  // METRICS_LOGGER_H
