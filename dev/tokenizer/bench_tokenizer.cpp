// Single-thread encode throughput of gpt2::Tokenizer on a file (default tinyshakespeare).
// usage: bench_tokenizer [FILE] [MIN_SECONDS]
// Prints "MB/s tokens reps wall-MB/s". The first figure uses this thread's CPU time, so other
// processes on a shared machine do not distort it; the last one is wall-clock.
#include "tokenizer/tokenizer.h"

#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

int main(int argc, char** argv) {
  try {
    const std::string path = argc > 1 ? argv[1] : "data/tinyshakespeare/input.txt";
    const double min_seconds = argc > 2 ? std::atof(argv[2]) : 2.0;
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(path + ": cannot open");
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    const gpt2::Tokenizer tok = gpt2::Tokenizer::from_default_location();
    size_t tokens = tok.encode(text).size();  // warm-up (page faults, JIT)
    using Clock = std::chrono::steady_clock;
    const auto cpu_now = [] {
      timespec ts;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return ts.tv_sec + ts.tv_nsec * 1e-9;
    };
    const double cpu_start = cpu_now();
    const auto start = Clock::now();
    int reps = 0;
    double seconds = 0;
    do {
      tokens = tok.encode(text).size();
      ++reps;
      seconds = cpu_now() - cpu_start;
    } while (seconds < min_seconds);
    const double wall = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("%.2f MB/s  %zu tokens  %d reps  %.2f wall-MB/s\n", reps * text.size() / seconds / 1e6, tokens,
                reps, reps * text.size() / wall / 1e6);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
