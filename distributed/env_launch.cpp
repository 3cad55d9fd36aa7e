#include "distributed/env_launch.h"

#include <cstdlib>
#include <stdexcept>

namespace gpt2 {
namespace {

const char* const kVariables[] = {
    "OMPI_COMM_WORLD_SIZE", "PMIX_RANK",      "RANK",          "WORLD_SIZE",   "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",     "GROUP_RANK",     "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",  "SLURM_STEP_ID",  "SLURM_PROCID",  "SLURM_NTASKS", "SLURM_LOCALID",
    "SLURM_NODEID",         "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_STEP_NUM_NODES",
    "SLURM_NNODES",         "SLURM_JOB_NODELIST", "SLURM_JOB_ID"};

const std::string* find(const std::map<std::string, std::string>& env, const char* key) {
  auto it = env.find(key);
  return it == env.end() ? nullptr : &it->second;
}

// A whole non-negative decimal integer, else an error naming the variable.
int parse_count(const std::string& key, const std::string& value, long max = 1L << 30) {
  char* end = nullptr;
  const long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || v < 0 || v > max)
    throw std::runtime_error("environment: " + key + "='" + value + "' is not a valid non-negative integer");
  return static_cast<int>(v);
}

unsigned long long job_number(const std::string& id) {
  if (id.empty()) return 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(id.c_str(), &end, 10);
  if (*end != '\0') throw std::runtime_error("environment: SLURM_JOB_ID='" + id + "' is not a number");
  return v;
}

int required(const std::map<std::string, std::string>& env, const char* key, const char* launcher) {
  const std::string* v = find(env, key);
  if (v == nullptr)
    throw std::runtime_error(std::string("environment: ") + launcher + " launch without " + key +
                             " (every rank needs it)");
  return parse_count(key, *v);
}

int optional(const std::map<std::string, std::string>& env, const char* key, int fallback) {
  const std::string* v = find(env, key);
  return v ? parse_count(key, *v) : fallback;
}

// rank < world, local_rank < local_world <= world, node < num_nodes.
void check_layout(const EnvLaunch& l, const char* rank_var, const char* world_var) {
  auto fail = [&](const std::string& what) {
    throw std::runtime_error(std::string("environment (") + rank_source_name(l.source) + "): " + what);
  };
  if (l.world < 1) fail(std::string(world_var) + "=" + std::to_string(l.world) + " must be at least 1");
  if (l.rank >= l.world)
    fail(std::string(rank_var) + "=" + std::to_string(l.rank) + " is not below " + world_var + "=" +
         std::to_string(l.world));
  if (l.local_world < 1 || l.local_world > l.world || l.local_rank >= l.local_world)
    fail("local rank " + std::to_string(l.local_rank) + " of " + std::to_string(l.local_world) +
         " does not fit a world of " + std::to_string(l.world));
  if (l.node >= l.num_nodes)
    fail("node " + std::to_string(l.node) + " is not below the node count " + std::to_string(l.num_nodes));
  if (l.master_port < 1 || l.master_port > 65535)
    fail("master port " + std::to_string(l.master_port) + " is not a TCP port (1-65535)");
}

EnvLaunch from_torchrun(const std::map<std::string, std::string>& env) {
  EnvLaunch l;
  l.source = RankSource::kTorchrun;
  const char* who = "torchrun-style";
  l.rank = required(env, "RANK", who);
  l.world = required(env, "WORLD_SIZE", who);
  l.local_rank = optional(env, "LOCAL_RANK", l.world == 1 ? 0 : -1);
  if (l.local_rank < 0) throw std::runtime_error("environment: torchrun-style launch without LOCAL_RANK");
  l.local_world = optional(env, "LOCAL_WORLD_SIZE", l.world);
  if (l.local_world < 1)  // the node count below divides by it
    throw std::runtime_error("environment: LOCAL_WORLD_SIZE=" + std::to_string(l.local_world) +
                             " must be at least 1");
  l.node = optional(env, "GROUP_RANK", l.rank / l.local_world);
  l.num_nodes = optional(env, "GROUP_WORLD_SIZE", (l.world + l.local_world - 1) / l.local_world);
  const std::string* addr = find(env, "MASTER_ADDR");
  l.master_addr = addr && !addr->empty() ? *addr : "127.0.0.1";
  l.master_port = optional(env, "MASTER_PORT", 29500);  // torchrun's default
  if (const std::string* id = find(env, "TORCHELASTIC_RUN_ID")) {
    l.job_id = *id;
    // torchrun's agent serves its own store on MASTER_PORT: ours is the next one.
    l.master_port += 1;
  } else if (const std::string* job = find(env, "SLURM_JOB_ID")) {
    l.job_id = *job;
  }
  check_layout(l, "RANK", "WORLD_SIZE");
  return l;
}

EnvLaunch from_slurm(const std::map<std::string, std::string>& env) {
  EnvLaunch l;
  l.source = RankSource::kSlurm;
  const char* who = "srun --mpi=none";
  l.rank = required(env, "SLURM_PROCID", who);
  l.world = required(env, "SLURM_NTASKS", who);
  l.local_rank = required(env, "SLURM_LOCALID", who);
  l.node = required(env, "SLURM_NODEID", who);
  l.num_nodes = optional(env, "SLURM_STEP_NUM_NODES", optional(env, "SLURM_NNODES", 1));
  const std::string* per_node = find(env, "SLURM_STEP_TASKS_PER_NODE");
  if (per_node == nullptr) per_node = find(env, "SLURM_TASKS_PER_NODE");
  l.local_world = per_node ? slurm_tasks_on_node(*per_node, l.node) : l.world;
  const std::string* addr = find(env, "MASTER_ADDR");
  const std::string* nodes = find(env, "SLURM_JOB_NODELIST");
  if (addr && !addr->empty()) l.master_addr = *addr;
  else if (nodes && !nodes->empty()) l.master_addr = first_slurm_host(*nodes);
  else throw std::runtime_error("environment: srun --mpi=none launch without MASTER_ADDR or SLURM_JOB_NODELIST");
  if (const std::string* job = find(env, "SLURM_JOB_ID")) l.job_id = *job;
  l.master_port = optional(env, "MASTER_PORT", 20000 + static_cast<int>(job_number(l.job_id) % 20000));
  check_layout(l, "SLURM_PROCID", "SLURM_NTASKS");
  return l;
}

}  // namespace

const char* rank_source_name(RankSource source) {
  switch (source) {
    case RankSource::kNone: return "none";
    case RankSource::kTorchrun: return "torchrun (RANK/WORLD_SIZE)";
    case RankSource::kSlurm: return "slurm (SLURM_PROCID/SLURM_NTASKS)";
  }
  return "unknown";
}

bool launched_by_mpi(const std::map<std::string, std::string>& env) {
  return find(env, "OMPI_COMM_WORLD_SIZE") != nullptr || find(env, "PMIX_RANK") != nullptr;
}

EnvLaunch discover_env_launch(const std::map<std::string, std::string>& env) {
  if (launched_by_mpi(env)) return {};
  if (find(env, "RANK") || find(env, "WORLD_SIZE")) return from_torchrun(env);
  // A task of an srun step (the batch script itself has SLURM_PROCID but no step).
  if (find(env, "SLURM_STEP_ID") && find(env, "SLURM_PROCID")) return from_slurm(env);
  return {};
}

std::string first_slurm_host(const std::string& nodelist) {
  // Up to the first comma outside brackets; a bracket range keeps its first value.
  std::string host;
  for (size_t i = 0; i < nodelist.size(); ++i) {
    const char c = nodelist[i];
    if (c == ',') break;
    if (c != '[') {
      host += c;
      continue;
    }
    const size_t close = nodelist.find(']', i);
    if (close == std::string::npos) throw std::runtime_error("SLURM_JOB_NODELIST='" + nodelist + "': unclosed '['");
    const std::string range = nodelist.substr(i + 1, close - i - 1);
    host += range.substr(0, range.find_first_of("-,"));
    i = close;
  }
  if (host.empty()) throw std::runtime_error("SLURM_JOB_NODELIST='" + nodelist + "' names no host");
  return host;
}

int slurm_tasks_on_node(const std::string& tasks_per_node, int node) {
  // Comma-separated "N" or "N(xK)" groups, K nodes of N tasks each.
  int first = 0;
  size_t pos = 0;
  while (pos <= tasks_per_node.size()) {
    const size_t comma = tasks_per_node.find(',', pos);
    const std::string item = tasks_per_node.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const size_t paren = item.find("(x");
    const int tasks = parse_count("SLURM_STEP_TASKS_PER_NODE", item.substr(0, paren));
    int repeat = 1;
    if (paren != std::string::npos) {
      if (item.back() != ')')
        throw std::runtime_error("SLURM_STEP_TASKS_PER_NODE='" + tasks_per_node + "': bad group '" + item + "'");
      repeat = parse_count("SLURM_STEP_TASKS_PER_NODE", item.substr(paren + 2, item.size() - paren - 3));
    }
    if (node < first + repeat) return tasks;
    first += repeat;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  throw std::runtime_error("SLURM_STEP_TASKS_PER_NODE='" + tasks_per_node + "' lists no node " + std::to_string(node));
}

std::map<std::string, std::string> env_launch_variables() {
  std::map<std::string, std::string> env;
  for (const char* key : kVariables)
    if (const char* v = std::getenv(key)) env[key] = v;
  return env;
}

}  // namespace gpt2
