#include "train/memory_plan.h"

#include <cstdio>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include "backend/sizing_backend.h"
#include "distributed/comm.h"
#include "train/logger.h"
#include "train/run_plan.h"

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

// The parts a training run of `plan` constructs (rank 0's view), on a backend
// that allocates nothing but counts.
struct PlannedRun {
  explicit PlannedRun(const RunPlan& plan)
      : be(make_sizing_backend(plan.opts)),
        buffers(plan.world, !be->is_host_memory()),
        host(plan.world, false),
        parts(*be, plan.buffers_travel() ? static_cast<Communicator&>(buffers) : host, plan) {}
  std::unique_ptr<SizingBackend> be;
  PlanComm buffers, host;
  RunAssembly parts;
};

}  // namespace

std::string memory_plan_table(const TrainOptions& o) {
  TrainLogger quiet(false, "");
  std::ostringstream out;
  char line[256];
  if (o.dry_run_worlds.empty()) return "";
  const RunPlan resolved = plan_training_run(o, o.dry_run_worlds.front(), quiet);  // --init-from read once
  for (int world : o.dry_run_worlds) {
    const RunPlan plan = resolved.at_world(world, quiet);
    const PlannedRun run(plan);
    const SizingBackend& be = *run.be;
    const GPT2& model = run.parts.model;
    if (out.tellp() == 0) {
      out << "memory plan: " << (plan.cfg_from_file ? plan.opts.model : plan.opts.model + " " + plan.cfg.describe())
          << ", " << plan.layout.total << " parameters; " << be.name() << " " << precision_name(o.dtype) << ", B=" << plan.shape.B
          << " T=" << plan.shape.T << ", ZeRO-" << o.zero_stage << ", recompute " << o.recompute << "\n"
          << "per rank, from the allocations training makes (nothing allocated); plus the backend's workspace,\n"
          << "grown on demand (cuBLASLt's 32 MiB, per-op partial sums)\n";
      std::snprintf(line, sizeof line, "%7s %12s %12s %9s %12s %12s %12s %14s\n", "world", "params", "grads",
                    "grads/P", "optimizer", "activations", "total", "total bytes");
      out << line;
    }
    const double grads = static_cast<double>(run.parts.dp.gradient_bytes(model));
    const double full = static_cast<double>(plan.layout.total) * model.params().elem_bytes;  // one dense gradient
    const double total = static_cast<double>(be.allocated_bytes());
    std::snprintf(line, sizeof line, "%7d %12s %12s %9.3f %12s %12s %12s %14zu\n", world,
                  format_bytes(static_cast<double>(model.params().bytes())).c_str(), format_bytes(grads).c_str(),
                  grads / full, format_bytes(static_cast<double>(run.parts.optimizer.state_bytes())).c_str(),
                  format_bytes(static_cast<double>(model.activation_bytes())).c_str(), format_bytes(total).c_str(),
                  be.allocated_bytes());
    out << line;
  }
  return out.str();
}

size_t planned_rank_bytes(const RunPlan& plan) { return PlannedRun(plan).be->allocated_bytes(); }

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
