// The emulator as a memory profiler (docs/emulator.md, "Profile build").
//
// A kernel source compiled with $(EMU_PROFILE_CXX) $(EMU_PROFILE_FLAGS) (clang at
// -O0 with AddressSanitizer's instrumentation in callback mode, no ASan runtime)
// calls __asan_load/store/memcpy for every memory access it makes; the profile
// library ($(EMU_PROFILE_LIB), the emulator built with GPT2_EMU_PROFILE=1)
// implements those callbacks and counts, per kernel, what a GPU's load/store
// unit would issue, by Nsight Compute's definitions:
//   request    one warp-level execution of one access site: the lanes of a warp
//              that execute the same site for the same time (k-th execution of
//              the site by each lane) between the same two __syncthreads;
//   shared     32 banks of 4-byte words; a request takes as many wavefronts as
//   wavefronts the largest number of distinct words it addresses in one bank
//              (lanes reading one word share it), per warp for accesses of up
//              to 4 bytes, per half-warp for 8 and per quarter-warp for 16
//              bytes: a conflict-free 16-byte request is 4 wavefronts;
//   global     the distinct 32-byte segments a request touches.
// -O0 keeps every access as the source writes it: a float4 copy is one 16-byte
// memcpy (nvcc's ld/st.v4), where clang -O2 would split it into scalars. Only
// addresses in shared memory (dynamic, and static __shared__ arrays, which the
// profile build places in one section) and in cudaMalloc allocations count;
// registers, kernel arguments and the emulator's own state do not.
//
// GPT2_EMU_PROFILE=PATH writes, at exit, one JSON object per line per kernel
// (summed over its launches): "kernel", "launches", "shared_requests",
// "shared_wavefronts", "shared_ideal_wavefronts" (the conflict-free minimum of
// the same requests), "shared_store_requests", "global_requests",
// "global_sectors", "global_ideal_sectors" (the request's distinct bytes / 32,
// rounded up), "global_store_requests". The profile build runs one block at a
// time (one worker thread).
#ifndef EMU_PROFILE_H
#define EMU_PROFILE_H

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace gpt2 {
namespace emu {
namespace profile {

struct KernelCounts {
  uint64_t launches = 0;
  uint64_t shared_requests = 0, shared_wavefronts = 0, shared_ideal_wavefronts = 0, shared_store_requests = 0;
  uint64_t global_requests = 0, global_sectors = 0, global_ideal_sectors = 0, global_store_requests = 0;
};

#if GPT2_EMU_PROFILE
// Called by the execution engine (emu/exec.cpp) on its one worker thread.
void launch_begin(const char* kernel, const void* dynamic_smem, size_t smem_bytes);
void barrier_passed();  // a __syncthreads of the running block completed
void block_end();
void launch_end();
// Tensor-core and async-copy wrappers (emu/wmma.h) report the accesses their
// instruction makes: `bytes` at `address` by the calling lane, at `site`.
void record(const void* site, const void* address, size_t bytes, bool store);
// What has been counted so far, by kernel name (tests; the file is written at exit).
std::map<std::string, KernelCounts> snapshot();
// Whether launches are counted (default true): a driver leaves set-up kernels out.
void set_recording(bool on);
#else
inline void launch_begin(const char*, const void*, size_t) {}
inline void barrier_passed() {}
inline void block_end() {}
inline void launch_end() {}
#endif

}  // namespace profile
}  // namespace emu
}  // namespace gpt2

#endif  // EMU_PROFILE_H
