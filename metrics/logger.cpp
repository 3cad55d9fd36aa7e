#include "metrics/logger.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "util/checked_io.h"

namespace gpt2 {

TrainLogger::TrainLogger(bool enabled, const std::string& jsonl_path) : enabled_(enabled), jsonl_path_(jsonl_path) {
  if (!enabled_ || jsonl_path.empty()) return;
  // The log usually sits in --output-dir, which a first run has not created yet.
  const size_t slash = jsonl_path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) make_directories(jsonl_path.substr(0, slash));
  jsonl_ = std::fopen(jsonl_path.c_str(), "a");
  if (!jsonl_) throw std::runtime_error(jsonl_path + ": cannot open log for appending: " + std::strerror(errno));
}

TrainLogger::~TrainLogger() {
  if (jsonl_) std::fclose(jsonl_);
}

void TrainLogger::jsonl(const std::string& obj) {
  if (!jsonl_) return;
  if (std::fprintf(jsonl_, "%s\n", obj.c_str()) < 0 || std::fflush(jsonl_) != 0)
    throw std::runtime_error(jsonl_path_ + ": write failed: " + std::strerror(errno));
}

namespace {
// JSON has no NaN/Inf: write null for them.
std::string num(double x, const char* f = "%.6g") {
  if (!std::isfinite(x)) return "null";
  char b[64];
  std::snprintf(b, sizeof(b), f, x);
  return b;
}
}  // namespace

void TrainLogger::step(const StepRecord& r) {
  if (!enabled_) return;
  const std::string sup = r.supervised_tokens >= 0 ? " | sup " + std::to_string(r.supervised_tokens) : "";
  const std::string mfu = r.mfu >= 0 ? " | mfu " + num(100.0 * r.mfu, "%.1f") + "%" : "";
  std::printf("step %5d/%d | loss %.6f | norm %.4f | lr %.2e | %.1f ms | %.0f tok/s%s%s | eta %s%s\n", r.step,
              r.total_steps, r.loss, r.grad_norm, r.lr, r.ms, r.tok_per_s, mfu.c_str(), sup.c_str(),
              format_duration(r.eta_s).c_str(), r.skipped ? r.skip_note.c_str() : "");
  std::fflush(stdout);
  jsonl("{\"type\":\"train\",\"step\":" + std::to_string(r.step) + ",\"loss\":" + num(r.loss, "%.17g") +
        ",\"grad_norm\":" + num(r.grad_norm) + ",\"lr\":" + num(r.lr) + ",\"ms\":" + num(r.ms, "%.3f") +
        ",\"tok_per_s\":" + num(r.tok_per_s, "%.1f") +
        (r.mfu >= 0 ? ",\"mfu\":" + num(r.mfu, "%.4g") : "") +
        ",\"comm_bytes\":" + std::to_string(r.comm_bytes) +
        (r.supervised_tokens >= 0 ? ",\"supervised_tokens\":" + std::to_string(r.supervised_tokens) : "") +
        (r.spike_skips >= 0 ? ",\"loss_z\":" + num(r.loss_z) + ",\"grad_z\":" + num(r.grad_z) +
                                  ",\"spike_skips\":" + std::to_string(r.spike_skips)
                            : "") +
        (r.skipped ? ",\"skipped\":true,\"skip_reason\":\"" + r.skip_reason + "\"" : "") + "}");
}

void TrainLogger::val(int step, double val_loss) {
  if (!enabled_) return;
  std::printf("val   %5d | loss %.6f | ppl %.3f\n", step, val_loss, std::exp(val_loss));
  std::fflush(stdout);
  jsonl("{\"type\":\"val\",\"step\":" + std::to_string(step) + ",\"val_loss\":" + num(val_loss, "%.17g") +
        ",\"val_ppl\":" + num(std::exp(val_loss)) + "}");
}

void TrainLogger::hellaswag(int step, uint64_t n, double acc, double acc_norm) {
  if (!enabled_) return;
  std::printf("hellaswag %5d | acc %.4f | acc_norm %.4f | n %llu\n", step, acc, acc_norm,
              static_cast<unsigned long long>(n));
  std::fflush(stdout);
  jsonl("{\"type\":\"hellaswag\",\"step\":" + std::to_string(step) + ",\"n\":" + std::to_string(n) +
        ",\"acc\":" + num(acc, "%.17g") + ",\"acc_norm\":" + num(acc_norm, "%.17g") + "}");
}

void TrainLogger::sample(int step, const std::string& text) {
  if (!enabled_) return;
  // every byte of the text: a decoded token may be a NUL, which %s would end at
  const std::string block = "sample at step " + std::to_string(step) + ":\n---\n" + text + "\n---\n";
  std::fwrite(block.data(), 1, block.size(), stdout);
  std::fflush(stdout);
  // JSON text is UTF-8: a sample that ends mid-character gets U+FFFD for the invalid bytes
  const std::string quoted = nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  jsonl("{\"type\":\"sample\",\"step\":" + std::to_string(step) + ",\"text\":" + quoted + "}");
}

void TrainLogger::info(const std::string& line) {
  if (!enabled_) return;
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char b[32];
  long t = std::lround(s);
  if (t >= 3600) std::snprintf(b, sizeof(b), "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60) std::snprintf(b, sizeof(b), "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(b, sizeof(b), "%lds", t);
  return b;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    u++;
  }
  char b[32];
  std::snprintf(b, sizeof(b), u ? "%.2f %s" : "%.0f %s", bytes, units[u]);
  return b;
}

}  // namespace gpt2
