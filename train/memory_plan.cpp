#include "train/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include "backend/sizing_backend.h"
#include "distributed/comm.h"
#include "train/device_link.h"
#include "metrics/logger.h"
#include "train/run_plan.h"
#include "util/test_hook.h"

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
  bool overlaps() const override { return world_ > 1; }  // as training's buffers communicators do

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
// that allocates nothing but counts. The buffers' communicator is a device one
// where they travel between devices, as training's would be.
struct PlannedRun {
  PlannedRun(const RunPlan& plan, bool on_host)
      : be(make_sizing_backend(plan.opts, on_host)),
        buffers(plan.world, !be->is_host_memory() && plan.buffers_travel()),
        parts(*be, buffers, plan,
              plan.opts.offload_optimizer && !be->is_host_memory()
                  ? std::make_unique<SizingBackend>(cpu_backend_sizes(plan.opts.threads))
                  : nullptr) {}
  std::unique_ptr<SizingBackend> be;
  PlanComm buffers;
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
    const PlannedRun run(plan, false);
    const SizingBackend& be = *run.be;
    const GPT2& model = run.parts.model;
    if (out.tellp() == 0) {
      out << "memory plan: " << (plan.cfg_from_file ? plan.model : plan.model + " " + plan.cfg.describe())
          << ", " << plan.layout.total << " parameters; " << be.name() << " " << precision_name(o.dtype) << ", B=" << plan.shape.B
          << " T=" << plan.shape.T << ", ZeRO-" << o.zero_stage << ", recompute " << o.recompute << "\n"
          << "per rank, from the allocations training makes (nothing allocated); plus the backend's workspace,\n"
          << "grown on demand (cuBLASLt's 32 MiB, per-op partial sums)\n";
      const std::string note = be.is_host_memory() ? "" : gpu_attention_workspace_note(o, plan.shape.B, plan.shape.T,
                                                                                        plan.cfg.num_heads);
      if (!note.empty()) out << "and " << note << "\n";
      std::snprintf(line, sizeof line, "%7s %12s %12s %9s %12s %12s %12s %14s", "world", "params", "grads",
                    "grads/P", "optimizer", "activations", "total", "total bytes");
      out << line << (o.offload_optimizer ? "  host (offloaded optimizer)\n" : "\n");
    }
    const double grads = static_cast<double>(run.parts.dp.gradient_bytes());
    const double full = static_cast<double>(plan.layout.total) * run.parts.dp.shard_params(model).elem_bytes;  // one dense gradient
    const double total = static_cast<double>(be.allocated_bytes());
    std::snprintf(line, sizeof line, "%7d %12s %12s %9.3f %12s %12s %12s %14zu", world,
                  format_bytes(static_cast<double>(run.parts.dp.parameter_bytes(model))).c_str(), format_bytes(grads).c_str(),
                  grads / full, format_bytes(static_cast<double>(run.parts.optimizer.state_bytes())).c_str(),
                  format_bytes(static_cast<double>(model.activation_bytes())).c_str(), format_bytes(total).c_str(),
                  be.allocated_bytes());
    out << line;
    if (run.parts.offload_host)
      out << "  " << format_bytes(static_cast<double>(run.parts.optimizer.host_bytes())) << " ("
          << static_cast<const SizingBackend&>(*run.parts.offload_host).allocated_bytes() << " bytes)";
    out << "\n";
  }
  return out.str();
}

size_t planned_rank_bytes(const RunPlan& plan, bool on_host) {
  return PlannedRun(plan, on_host).be->allocated_bytes();
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

// ---------------------------------------------------------------- --memory-check

namespace {

constexpr uint64_t kNoLimit = uint64_t{1} << 60;  // v1 writes "unlimited" as ~2^63

// A small kernel file's text ("" when it cannot be read: no such cgroup file).
std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A decimal count after optional blanks ("max", "-1", "" are not).
bool parse_u64(const std::string& text, uint64_t* v) {
  const size_t at = text.find_first_not_of(" \t");
  if (at == std::string::npos || text[at] < '0' || text[at] > '9') return false;
  *v = std::strtoull(text.c_str() + at, nullptr, 10);
  return true;
}

// The number of a "key N" line (memory.stat) or a "Key: N kB" line (meminfo).
bool field(const std::string& text, const std::string& key, uint64_t* v) {
  std::istringstream in(text);
  std::string name, rest;
  while (in >> name && std::getline(in, rest))
    if (name == key || name == key + ":") return parse_u64(rest, v);
  return false;
}

// This process's cgroup path for the memory controller: v2's "0::/path"
// (`v1` false) or the v1 line naming "memory"; "" when it has none.
std::string cgroup_path(const std::string& self_cgroup, bool v1) {
  std::istringstream in(self_cgroup);
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
    if (v1 ? controllers.find(",memory,") != std::string::npos : line.compare(0, 3, "0::") == 0)
      return line.substr(b + 1);
  }
  return "";
}

// Lowers `budget` to the least room of the cgroup at root + path and its
// ancestors up to root (a limit may be set at any level; in a container the
// path may not exist under the mount, whose root is then the container's).
void lower_to_cgroup(const std::string& root, std::string path, bool v1, MemoryBudget* budget) {
  const char* limit_file = v1 ? "/memory.limit_in_bytes" : "/memory.max";
  const char* usage_file = v1 ? "/memory.usage_in_bytes" : "/memory.current";
  for (;;) {
    const std::string dir = root + (path == "/" ? "" : path);
    uint64_t room = 0;
    if (cgroup_room(slurp(dir + limit_file), slurp(dir + usage_file), slurp(dir + "/memory.stat"),
                    v1 ? "total_inactive_file" : "inactive_file", &room) &&
        room < budget->bytes) {
      budget->bytes = room;
      budget->source = "the room under the cgroup limit in " + dir + limit_file;
    }
    if (path.empty() || path == "/") return;
    const size_t slash = path.find_last_of('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
}

// --memory-check on a shortfall ("" fits): warn prints on every rank for a GPU
// (each has its own), else once per node (its ranks share the memory).
void act_on_shortfall(const TrainOptions& o, const DistContext& dist, const std::string& shortfall, bool gpu) {
  if (shortfall.empty() || o.memory_check == "off") return;
  if (o.memory_check == "on")
    throw std::runtime_error(std::string(gpu ? "not enough GPU memory: " : "not enough memory: ") + shortfall +
                             "; lower -B or -T, add --recompute 1|2, shard over more ranks with --zero-stage 1|2|3, " +
                             (gpu && o.dtype != Precision::kBf16 ? "store in bf16 with --dtype bf16, " : "") +
                             "or pass --memory-check warn (or off) to run anyway");
  if (gpu || dist.local_rank == 0)
    std::fprintf(stderr, "%swarning: %s; going on (--memory-check warn)\n", dist.prefix().c_str(), shortfall.c_str());
}

// "1.23 GiB (1320702443 B)": the exact count too, as a tiny plan rounds alike.
std::string bytes_exactly(uint64_t bytes) {
  return format_bytes(static_cast<double>(bytes)) + " (" + std::to_string(bytes) + " B)";
}

}  // namespace

bool meminfo_available(const std::string& meminfo, uint64_t* bytes) {
  uint64_t kib = 0;
  if (!field(meminfo, "MemAvailable", &kib)) return false;
  *bytes = kib * 1024;
  return true;
}

bool cgroup_room(const std::string& limit, const std::string& usage, const std::string& stat,
                 const std::string& inactive_key, uint64_t* bytes) {
  uint64_t max = 0, used = 0, inactive = 0;
  if (!parse_u64(limit, &max) || max >= kNoLimit || !parse_u64(usage, &used)) return false;
  field(stat, inactive_key, &inactive);  // absent: 0, the cautious reading
  const uint64_t charged = used - std::min(used, inactive);
  *bytes = max - std::min(max, charged);
  return true;
}

MemoryBudget host_memory_budget() {
  if (const char* fake = test_hook("GPT2_TEST_AVAILABLE_MEMORY")) {
    MemoryBudget b{0, "GPT2_TEST_AVAILABLE_MEMORY, the tests' stand-in"};
    if (!parse_u64(fake, &b.bytes))
      throw std::runtime_error(std::string("GPT2_TEST_AVAILABLE_MEMORY='") + fake + "': expected a byte count");
    return b;
  }
  MemoryBudget b{std::numeric_limits<uint64_t>::max(), "no measurement (no MemAvailable, no cgroup limit)"};
  if (meminfo_available(slurp("/proc/meminfo"), &b.bytes)) b.source = "MemAvailable in /proc/meminfo";
  const std::string self = slurp("/proc/self/cgroup");
  if (const std::string v2 = cgroup_path(self, false); !v2.empty()) lower_to_cgroup("/sys/fs/cgroup", v2, false, &b);
  if (const std::string v1 = cgroup_path(self, true); !v1.empty())
    lower_to_cgroup("/sys/fs/cgroup/memory", v1, true, &b);
  return b;
}

std::string memory_shortfall(uint64_t per_rank, int ranks_on_node, const MemoryBudget& have) {
  const double need = static_cast<double>(per_rank) * ranks_on_node;
  if (need <= static_cast<double>(have.bytes)) return "";
  std::string s = "this run needs " + format_bytes(static_cast<double>(per_rank)) +
                  " per rank (the --dry-run total: parameters, gradients, optimizer state, activations)";
  if (ranks_on_node > 1)
    s += " x " + std::to_string(ranks_on_node) + " ranks on this node = " + format_bytes(need);
  return s + ", more than the " + format_bytes(static_cast<double>(have.bytes)) + " available (" + have.source + ")";
}

void check_host_memory(const RunPlan& plan, const DistContext& dist) {
  if (plan.opts.memory_check == "off") return;
  const std::string shortfall =
      memory_shortfall(planned_rank_bytes(plan, true), dist.local_world, host_memory_budget());
  act_on_shortfall(plan.opts, dist, shortfall, false);
}

std::string device_memory_shortfall(uint64_t per_rank, const DeviceMemory& gpu) {
  if (per_rank <= gpu.free_bytes) return "";
  return "this run needs " + bytes_exactly(per_rank) +
         " per rank on its GPU (the --dry-run total: parameters, gradients, optimizer state, activations), more "
         "than the " + bytes_exactly(gpu.free_bytes) + " free of " +
         format_bytes(static_cast<double>(gpu.total_bytes)) + " on " + gpu.device + " (cudaMemGetInfo)";
}

void check_device_memory(const TrainOptions& o, const DistContext& dist, uint64_t per_rank, const DeviceMemory& gpu) {
  act_on_shortfall(o, dist, device_memory_shortfall(per_rank, gpu), true);
}

void check_run_memory(const RunPlan& plan, const DistContext& dist, const Backend& backend) {
  if (plan.opts.memory_check == "off") return;
  if (backend.is_host_memory()) return check_host_memory(plan, dist);
  const DeviceMemory gpu = backend.device_memory();
  if (!gpu.present) return;  // a backend that cannot say: its allocations report their own failures
  check_device_memory(plan.opts, dist, planned_rank_bytes(plan), gpu);
}

}  // namespace gpt2
