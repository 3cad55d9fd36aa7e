// emu/control.h's run-order, stream-mode and block-dispatch switches for the CUDA backend tests linked against a
// real GPU (build/gpu/backend_cuda_gpu_test). A GPU schedules threads itself, so
// the switch records nothing: each "run order" of a test is one more run, and
// the tests' same-bits checks then catch results that differ between runs.
#include "emu/control.h"

namespace gpt2 {
namespace emu {

void set_run_order(RunOrder, uint64_t) {}
RunOrder run_order() { return RunOrder::kForward; }
// A GPU's streams are asynchronous anyway: no deferred mode to switch on.
void set_stream_mode(StreamMode, uint64_t) {}
StreamMode stream_mode() { return StreamMode::kSync; }
// A GPU runs blocks on its SMs in its own order: the worker count and dispatch
// order of the emulator have no counterpart (a test's runs just repeat).
void set_worker_threads(int) {}
void set_block_dispatch(BlockDispatch) {}

}  // namespace emu
}  // namespace gpt2
