// Host-side controls of the CUDA emulator (g++ build only): the order in which the
// threads of a block run between synchronisation points, the fake device, and the
// message of the last kernel fault. Tests use these to make races visible.
#ifndef EMU_CONTROL_H
#define EMU_CONTROL_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace gpt2 {
namespace emu {

// Between two synchronisation points the threads of a block run one after the
// other; the order decides which writes a racing read sees.
//   kForward: thread 0, 1, 2, ...           kReverse: last thread first
//   kRandom:  warps and lanes within a warp shuffled anew at every sync point,
//             and each warp sits out a pass with probability 1/2 (warps drift apart)
// Under kReverse and kRandom a cp.async copy may also land before its wait, at
// a seeded fiber switch of its thread (emu/exec.h's land_early_copies).
// Default from env GPT2_EMU_ORDER=forward|reverse|random (and GPT2_EMU_SEED).
enum class RunOrder { kForward, kReverse, kRandom };
void set_run_order(RunOrder order, uint64_t seed = 1);
RunOrder run_order();

// Sets the run order for a scope and restores the previous one, e.g. to run a
// kernel test once per order:
//   for (auto order : {RunOrder::kForward, RunOrder::kReverse, RunOrder::kRandom}) {
//     ScopedRunOrder scoped(order);
//     ... launch and compare with the CPU reference ...
//   }
class ScopedRunOrder {
 public:
  explicit ScopedRunOrder(RunOrder order, uint64_t seed = 1) : previous_(run_order()) { set_run_order(order, seed); }
  ~ScopedRunOrder() { set_run_order(previous_); }
  ScopedRunOrder(const ScopedRunOrder&) = delete;
  ScopedRunOrder& operator=(const ScopedRunOrder&) = delete;

 private:
  RunOrder previous_;
};

// The fake device reported by cudaGetDeviceProperties and enforced at launch.
// Defaults model an A100 (sm_80); env GPT2_EMU_DEVICE="name=..,sms=..,smem_optin=.."
// overrides, as does set_device_config().
struct DeviceConfig {
  std::string name = "GPT2 emulated GPU (A100-like)";
  int sm_count = 108;
  int major = 8, minor = 0;
  size_t smem_per_block = 48 * 1024;          // usable without opt-in
  size_t smem_per_block_optin = 163 * 1024;   // cudaFuncAttributeMaxDynamicSharedMemorySize limit
  size_t smem_per_sm = 164 * 1024;
  size_t total_global_mem = size_t(40) << 30;
  int max_threads_per_block = 1024;
  int max_threads_per_sm = 2048;
  int regs_per_block = 65536;
  int l2_cache_bytes = 40 << 20;
};
void set_device_config(const DeviceConfig& config);
DeviceConfig device_config();

// Number of OS threads that run blocks (default: env GPT2_EMU_THREADS or all cores).
void set_worker_threads(int count);

// The order in which workers take blocks: ascending linear index (the default,
// what GPUs do in practice), or descending, so that a block which waits for a
// lower-numbered one (a cross-block protocol) starts first and really waits.
// With fewer workers than the blocks it waits across, such a protocol hangs.
enum class BlockDispatch { kAscending, kDescending };
void set_block_dispatch(BlockDispatch order);

// Description of the last kernel fault (barrier misuse, bad shuffle, device assert);
// empty when the last launch succeeded.
std::string last_kernel_fault();

// Device faults as a GPU has them (emu/faults.cpp). With sticky faults on (env
// GPT2_EMU_STICKY_FAULTS=1), the first fault inside a kernel makes every later
// launch, copy, memset and synchronisation fail with its code, until
// cudaDeviceReset; launch configuration errors stay non-sticky, as on a GPU.
// inject_fault("SUBSTRING[@N]") (env GPT2_EMU_INJECT_FAULT) turns them on and
// makes the N-th launch (default 1) of a kernel whose name contains SUBSTRING
// fault with cudaErrorIllegalAddress.
void set_sticky_faults(bool on);
void inject_fault(const std::string& spec);

// Counters for the throughput benchmark.
struct ExecStats {
  uint64_t threads_run = 0;    // emulated CUDA threads completed
  uint64_t barriers = 0;       // block-wide barrier releases
  uint64_t warp_syncs = 0;     // warp rendezvous completions
};
ExecStats exec_stats();

}  // namespace emu
}  // namespace gpt2

// ---- several emulated devices, and NCCL fault injection (appended) ----------------------------
struct ncclComm;  // nccl.h's communicator (ncclComm_t)

namespace gpt2 {
namespace emu {

// Number of emulated devices (default 1; env GPT2_EMU_DEVICE_COUNT=n). cudaGetDeviceCount
// reports it and cudaSetDevice accepts 0..n-1 (current device per host thread, as in
// CUDA), so the processes of one emulated node can each select their own device:
// NCCL refuses two ranks on one device. All devices share the one DeviceConfig and
// one host memory.
void set_device_count(int count);
int device_count();

// NCCL (build/libemu_nccl.a) test hook: the next collective run on `comm` fails
// while it runs, as a lost peer or network error does on a GPU cluster: the call
// returns ncclSuccess, its receive buffer is poisoned (0xFF), ncclCommGetAsyncError
// then reports `result` (an ncclResult_t, e.g. ncclRemoteError), later calls on the
// communicator return it and ncclGetLastError names `reason`. Env
// GPT2_EMU_NCCL_FAIL_AT=N does the same (ncclRemoteError) for the N-th collective
// of every communicator of a process.
void nccl_inject_async_error(ncclComm* comm, int result, const std::string& reason);

// The emulated cuBLASLt (emu/cublaslt.cpp). kStrict, the default, enforces
// cublasLt.h's rules (alignment promises of the MIN_ALIGNMENT preferences, 16-byte
// bias and aux vectors of D's type, ...) and offers one algorithm when they hold.
// The other modes model a cuBLASLt with no kernel at all, so that callers'
// fallbacks run: the heuristic returns CUBLAS_STATUS_SUCCESS with zero results
// (kNoAlgorithm), CUBLAS_STATUS_NOT_SUPPORTED (kNotSupported), or one result whose
// .state is CUBLAS_STATUS_NOT_SUPPORTED (kBadState); cublasLtMatmul then returns
// CUBLAS_STATUS_NOT_SUPPORTED. kMatmulNotSupported models a kernel that refuses at
// execution: the heuristic answers as in kStrict, cublasLtMatmul returns
// CUBLAS_STATUS_NOT_SUPPORTED. Unless set_cublaslt_mode gave one, the mode comes
// from env GPT2_EMU_CUBLASLT=strict|refuse|not_supported|bad_state|matmul_not_supported
// (read at every heuristic and matmul call). std::nullopt hands the choice back to the env.
enum class CublasLtMode { kStrict, kNoAlgorithm, kNotSupported, kBadState, kMatmulNotSupported };
void set_cublaslt_mode(std::optional<CublasLtMode> mode);
std::optional<CublasLtMode> cublaslt_mode_override();
CublasLtMode cublaslt_mode();

// Stream mode (emu/streams.cpp). kSync, the default: every launch, copy, event
// and collective runs when it is called, so streams are trivially ordered.
// kDeferred (env GPT2_EMU_STREAMS=deferred): work queued on a created stream
// waits in a per-stream queue and runs at the next synchronisation point that
// needs it, streams interleaved in a seeded random order that keeps only what
// CUDA guarantees (stream order, cudaStreamWaitEvent, synchronisation, the
// legacy default stream), so a missing event wait changes results.
// set_stream_mode first runs everything still queued.
enum class StreamMode { kSync, kDeferred };
void set_stream_mode(StreamMode mode, uint64_t seed = 1);
StreamMode stream_mode();
// Items queued and not yet run, and items run by the scheduler so far.
size_t pending_stream_items();
uint64_t deferred_items_run();

class ScopedCublasLtMode {
 public:
  explicit ScopedCublasLtMode(CublasLtMode mode) : previous_(cublaslt_mode_override()) { set_cublaslt_mode(mode); }
  ~ScopedCublasLtMode() { set_cublaslt_mode(previous_); }
  ScopedCublasLtMode(const ScopedCublasLtMode&) = delete;
  ScopedCublasLtMode& operator=(const ScopedCublasLtMode&) = delete;

 private:
  std::optional<CublasLtMode> previous_;
};

}  // namespace emu
}  // namespace gpt2

#endif  // EMU_CONTROL_H
