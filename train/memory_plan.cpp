#include "train/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include "backend/sizing_backend.h"
#include "distributed/comm.h"
#include "model/gpt2.h"
#include "train/data_parallel.h"
#include "train/logger.h"
#include "train/optimizer.h"
#include "train/run_setup.h"

namespace gpt2 {

namespace {

// Rank 0 of `world` ranks; constructing DataParallel needs only the shape,
// so every collective refuses.
class PlanComm final : public Communicator {
 public:
  PlanComm(int world, bool device) : world_(world), device_(device) {}
  int rank() const override { return 0; }
  int world() const override { return world_; }
  bool is_device_memory() const override { return device_; }
  std::string name() const override { return device_ ? "plan (device)" : "plan (host)"; }

 protected:
  void do_all_reduce(const void*, void*, size_t, DataType, ReduceOp) override { refuse(); }
  void do_reduce_scatter(const void*, void*, size_t, DataType, ReduceOp) override { refuse(); }
  void do_reduce_scatter_v(const void*, void*, const std::vector<size_t>&, DataType, ReduceOp) override { refuse(); }
  void do_all_gather(const void*, void*, size_t, DataType) override { refuse(); }
  void do_broadcast(void*, size_t, int) override { refuse(); }
  void do_barrier() override { refuse(); }
  std::string error_prefix() const override { return "dry run: "; }

 private:
  [[noreturn]] static void refuse() { throw std::runtime_error("dry run: no collective runs"); }
  int world_;
  bool device_;
};

// The objects a training run constructs at `world` ranks, on a backend that
// allocates nothing but counts (rank 0's view).
struct PlannedRun {
  PlannedRun(const TrainOptions& o, const GPT2Config& cfg, const ParamLayout& layout, int world)
      : be(make_sizing_backend(o)),
        buffers(world, !be->is_host_memory()),
        host(world, false),
        dp(*be, world > 1 || o.zero_stage == 2 ? static_cast<Communicator&>(buffers) : host, layout, o.zero_stage),
        model(*be, cfg, o.batch_size, std::min(o.seq_len, cfg.max_seq_len), dp.grad_mode(), dp.param_capacity(),
              o.recompute),
        opt(*be, layout, dp.opt_begin(), dp.opt_end()) {
    opt.reserve_master(model.params());
    // the step's deferred per-token losses: one slot per micro-batch
    const int64_t micro = static_cast<int64_t>(o.batch_size) * std::min(o.seq_len, cfg.max_seq_len) * world;
    model.reserve_deferred_losses(grad_accum_for(o.total_batch_tokens < 0 ? micro : o.total_batch_tokens, micro));
  }
  std::unique_ptr<SizingBackend> be;
  PlanComm buffers, host;
  DataParallel dp;
  GPT2 model;
  AdamW opt;
};

}  // namespace

std::string memory_plan_table(const TrainOptions& o) {
  bool from_file = false;
  const GPT2Config cfg = requested_config(o, &from_file);
  const ParamLayout layout = ParamLayout::for_config(cfg);
  const int B = o.batch_size, T = std::min(o.seq_len, cfg.max_seq_len);
  std::ostringstream out;
  char line[256];
  for (int world : o.dry_run_worlds) {
    const PlannedRun run(o, cfg, layout, world);
    const SizingBackend& be = *run.be;
    if (out.tellp() == 0) {
      out << "memory plan: " << (from_file ? o.model : o.model + " " + cfg.describe()) << ", " << layout.total
          << " parameters; " << be.name() << " " << o.dtype << ", B=" << B << " T=" << T << ", ZeRO-"
          << o.zero_stage << ", recompute " << o.recompute << "\n"
          << "per rank, from the allocations training makes (nothing allocated); plus the backend's workspace,\n"
          << "grown on demand (cuBLASLt's 32 MiB, per-op partial sums)\n";
      std::snprintf(line, sizeof line, "%7s %12s %12s %9s %12s %12s %12s %14s\n", "world", "params", "grads",
                    "grads/P", "optimizer", "activations", "total", "total bytes");
      out << line;
    }
    const double grads = static_cast<double>(run.dp.gradient_bytes(run.model));
    const double full = static_cast<double>(layout.total) * run.model.params().elem_bytes;  // one dense gradient
    const double total = static_cast<double>(be.allocated_bytes());
    std::snprintf(line, sizeof line, "%7d %12s %12s %9.3f %12s %12s %12s %14zu\n", world,
                  format_bytes(static_cast<double>(run.model.params().bytes())).c_str(), format_bytes(grads).c_str(),
                  grads / full, format_bytes(static_cast<double>(run.opt.state_bytes())).c_str(),
                  format_bytes(static_cast<double>(run.model.activation_bytes())).c_str(), format_bytes(total).c_str(),
                  be.allocated_bytes());
    out << line;
  }
  return out.str();
}

size_t planned_rank_bytes(const TrainOptions& o, int world) {
  bool from_file = false;
  const GPT2Config cfg = requested_config(o, &from_file);
  const PlannedRun run(o, cfg, ParamLayout::for_config(cfg), world);
  return run.be->allocated_bytes();
}

int run_memory_plan(const TrainOptions& o) {
  try {
    std::fputs(memory_plan_table(o).c_str(), stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: --dry-run: %s\n", e.what());
    return dynamic_cast<const UsageError*>(&e) ? 2 : 1;
  }
}

}  // namespace gpt2
