// The memory bandwidth the profile's memory-bound ops are held against: a
// STREAM-style triad a[i] = b[i] + s * c[i] on OpenMP threads over three arrays
// far larger than any cache, counted as STREAM counts it (12 bytes per element:
// two reads and a write; the write-allocate read is not counted).
#ifndef DEV_CPU_MEMORY_BANDWIDTH_H
#define DEV_CPU_MEMORY_BANDWIDTH_H

#include <cstddef>
#include <string>

namespace gpt2 {
namespace cpuprof {

struct Bandwidth {
  double gbps = 0;     // GB/s (1e9 bytes), the best repetition
  std::string source;  // for the report: "triad a = b + s*c, 3 x 64 MiB, 2 threads, best of 8"
};

// `threads` <= 0: the OpenMP default. Each array has `mib` MiB.
Bandwidth measure_triad_bandwidth(int threads, size_t mib = 64, int reps = 8);

}  // namespace cpuprof
}  // namespace gpt2

#endif  // DEV_CPU_MEMORY_BANDWIDTH_H
