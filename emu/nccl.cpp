// NCCL for the emulator, over MPI between real processes: `mpirun -np N` emulates
// N GPUs, one per process; processes MPI did not start use the socket transport
// of emu/nccl_socket.h instead (same arithmetic, same bits). Implemented against the toolkit's nccl.h so host code
// runs unchanged. It refuses what NCCL (or a GPU running it) refuses, so code that
// passes here does not first fail on a GPU cluster:
//  * in-place calls need NCCL's exact offsets (reduce-scatter: recvbuff ==
//    sendbuff + rank*recvcount; all-gather: sendbuff == recvbuff + rank*sendcount;
//    the others: equal pointers); any other overlap is ncclInvalidArgument (NCCL
//    itself would silently compute garbage);
//  * two ranks of one communicator on one device (same host, same cudaGetDevice)
//    are ncclInvalidUsage, "Duplicate GPU detected", as in NCCL's init;
//  * failures while a collective runs (MPI errors, ranks calling different
//    collectives, injected faults) are asynchronous: the call returns
//    ncclSuccess, its receive buffer is poisoned (0xFF), ncclCommGetAsyncError
//    reports the error and every later call on the communicator returns it;
//  * calls between ncclGroupStart/End are checked at once and run at the
//    outermost ncclGroupEnd, grouped per communicator;
//  * reductions follow NCCL's ring: each chunk is reduced rank after rank in the
//    data type's own arithmetic (bf16/fp16 rounded at every hop), and ncclAvg is
//    NCCL's pre-multiplied sum for floating types, sum-then-divide for integers.
// By default every collective has completed when its call (or ncclGroupEnd)
// returns, and the emulated cudart is synchronous, so stream order holds
// trivially. In the deferred stream mode (emu/streams.cpp) a collective on a
// created stream is checked when called and queued on that stream; all queued
// collectives of the process run in issue order (each waits for the previous
// one), on every rank the same order, since each blocks its host thread in MPI.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "emu/control.h"
#include "emu/nccl_internal.h"
#include "emu/runtime_internal.h"


namespace gpt2 {
namespace emu {
namespace {

// ---- errors: NCCL's WARN lines become ncclGetLastError ---------------------------------------
std::string& last_error() {
  static thread_local std::string message;
  return message;
}

bool debug_warn() {
  const char* d = std::getenv("NCCL_DEBUG");
  return d != nullptr && (!strcasecmp(d, "WARN") || !strcasecmp(d, "INFO") || !strcasecmp(d, "TRACE"));
}

ncclResult_t warn(ncclResult_t result, const std::string& message) {
  last_error() = message;
  if (debug_warn()) std::fprintf(stderr, "NCCL WARN (emulated) %s\n", message.c_str());
  return result;
}

// ---- data types and operations -----------------------------------------------------------------
size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

const char* type_name(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return "int8";
    case ncclUint8: return "uint8";
    case ncclInt32: return "int32";
    case ncclUint32: return "uint32";
    case ncclInt64: return "int64";
    case ncclUint64: return "uint64";
    case ncclFloat16: return "float16";
    case ncclBfloat16: return "bfloat16";
    case ncclFloat32: return "float32";
    case ncclFloat64: return "float64";
    default: return "unknown type";
  }
}

const char* op_name(int op) {
  switch (op) {
    case ncclSum: return "sum";
    case ncclProd: return "prod";
    case ncclMax: return "max";
    case ncclMin: return "min";
    case ncclAvg: return "avg";
    default: return "-";
  }
}

bool valid_op(ncclRedOp_t op) {
  return op == ncclSum || op == ncclProd || op == ncclMax || op == ncclMin || op == ncclAvg;
}

// ---- device arithmetic of one data type -----------------------------------------------------
// bf16/fp16 compute one operation in fp32 and round to the type, which is what
// __hadd/__hmul give: sum and product of two such values round correctly via fp32.
template <class T>
constexpr bool kHalfType = std::is_same<T, __nv_bfloat16>::value || std::is_same<T, __half>::value;

template <class T> T from_float(float v);
template <> __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16(v); }
template <> __half from_float<__half>(float v) { return __float2half(v); }
float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
float to_float(__half v) { return __half2float(v); }

template <class T>
T combine(ncclRedOp_t op, T a, T b) {
  if constexpr (kHalfType<T>) {
    return from_float<T>(combine<float>(op, to_float(a), to_float(b)));
  } else if constexpr (std::is_integral<T>::value) {
    using U = typename std::make_unsigned<T>::type;  // sums and products wrap, as on the GPU
    switch (op) {
      case ncclProd: return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
      case ncclMax: return std::max(a, b);
      case ncclMin: return std::min(a, b);
      default: return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    }
  } else {
    switch (op) {
      case ncclProd: return a * b;
      case ncclMax: return std::fmax(a, b);
      case ncclMin: return std::fmin(a, b);
      default: return a + b;
    }
  }
}

// ncclAvg on floating types is NCCL's PreMulSum: every input is first multiplied
// by 1/nranks rounded to the data type; integers sum and divide at the end.
template <class T>
T pre_op(ncclRedOp_t op, T x, int nranks) {
  if constexpr (std::is_integral<T>::value) {
    return x;
  } else if constexpr (kHalfType<T>) {
    if (op != ncclAvg) return x;
    const T scale = from_float<T>(static_cast<float>(1.0 / nranks));
    return from_float<T>(to_float(x) * to_float(scale));
  } else {
    return op == ncclAvg ? static_cast<T>(x * static_cast<T>(1.0 / nranks)) : x;
  }
}

// `gathered` holds m elements from each rank (rank r's at [r*m, (r+1)*m)). Element
// j's chunk ends at rank owner(j): NCCL's ring starts it at owner+1, and each
// following rank combines its value into the partial result in the data type
// until owner adds the last one. The ring is the rank order.
template <class T, class Owner>
void ring_reduce(const unsigned char* gathered, size_t m, int n, ncclRedOp_t op, Owner owner, unsigned char* out) {
  auto value = [&](int r, size_t j) {
    T v;
    std::memcpy(&v, gathered + (static_cast<size_t>(r) * m + j) * sizeof(T), sizeof(T));
    return pre_op<T>(op, v, n);
  };
  for (size_t j = 0; j < m; ++j) {
    const int o = owner(j);
    T acc = value((o + 1) % n, j);
    for (int k = 2; k <= n; ++k) acc = combine<T>(op, acc, value((o + k) % n, j));
    if constexpr (std::is_integral<T>::value) {
      if (op == ncclAvg) acc = static_cast<T>(acc / static_cast<T>(n));
    }
    std::memcpy(out + j * sizeof(T), &acc, sizeof(T));
  }
}

template <class Owner>
void reduce_any(ncclDataType_t t, const unsigned char* gathered, size_t m, int n, ncclRedOp_t op, Owner owner,
                unsigned char* out) {
  switch (t) {
    case ncclInt8: ring_reduce<int8_t>(gathered, m, n, op, owner, out); break;
    case ncclUint8: ring_reduce<uint8_t>(gathered, m, n, op, owner, out); break;
    case ncclInt32: ring_reduce<int32_t>(gathered, m, n, op, owner, out); break;
    case ncclUint32: ring_reduce<uint32_t>(gathered, m, n, op, owner, out); break;
    case ncclInt64: ring_reduce<int64_t>(gathered, m, n, op, owner, out); break;
    case ncclUint64: ring_reduce<uint64_t>(gathered, m, n, op, owner, out); break;
    case ncclFloat16: ring_reduce<__half>(gathered, m, n, op, owner, out); break;
    case ncclBfloat16: ring_reduce<__nv_bfloat16>(gathered, m, n, op, owner, out); break;
    case ncclFloat32: ring_reduce<float>(gathered, m, n, op, owner, out); break;
    case ncclFloat64: ring_reduce<double>(gathered, m, n, op, owner, out); break;
    default: break;
  }
}

// ---- one collective call ------------------------------------------------------------------------
enum class Kind { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kAllReduce: return "AllReduce";
    case Kind::kReduceScatter: return "ReduceScatter";
    case Kind::kAllGather: return "AllGather";
    case Kind::kBroadcast: return "Broadcast";
    case Kind::kReduce: return "Reduce";
  }
  return "?";
}

struct Op {
  Kind kind;
  const void* send;
  void* recv;
  size_t count;  // NCCL's count argument (recvcount for reduce-scatter, sendcount for all-gather)
  ncclDataType_t type;
  ncclRedOp_t op;  // reductions only
  int root;        // broadcast and reduce only, else -1
  ncclComm_t comm;
  cudaStream_t stream = nullptr;
};

bool is_reduction(Kind k) { return k == Kind::kAllReduce || k == Kind::kReduceScatter || k == Kind::kReduce; }

// Bytes this rank's call reads from sendbuff / writes to recvbuff (0: ignored by NCCL).
size_t send_bytes(const Op& o) {
  const size_t b = o.count * type_bytes(o.type);
  if (o.kind == Kind::kReduceScatter) return b * o.comm->nranks;
  if (o.kind == Kind::kBroadcast && o.comm->rank != o.root) return 0;
  return b;
}

size_t recv_bytes(const Op& o) {
  const size_t b = o.count * type_bytes(o.type);
  if (o.kind == Kind::kAllGather) return b * o.comm->nranks;
  if (o.kind == Kind::kReduce && o.comm->rank != o.root) return 0;
  return b;
}

const unsigned char* bytes_of(const void* p) { return static_cast<const unsigned char*>(p); }
unsigned char* bytes_of(void* p) { return static_cast<unsigned char*>(p); }

// The in-place rule of NCCL's documentation. Overlap other than the exact in-place
// position has no defined result on a GPU; it is refused here.
ncclResult_t check_in_place(const Op& o) {
  const size_t sb = send_bytes(o), rb = recv_bytes(o);
  const auto s = reinterpret_cast<uintptr_t>(o.send), r = reinterpret_cast<uintptr_t>(o.recv);
  if (sb == 0 || rb == 0 || !(s < r + rb && r < s + sb)) return ncclSuccess;
  const size_t block = o.count * type_bytes(o.type) * static_cast<size_t>(o.comm->rank);
  const long long offset = static_cast<long long>(r - s);  // recvbuff - sendbuff, bytes
  long long in_place = 0;
  std::string rule = "recvbuff == sendbuff";
  if (o.kind == Kind::kReduceScatter) {
    in_place = static_cast<long long>(block);
    rule = "recvbuff == sendbuff + rank*recvcount";
  } else if (o.kind == Kind::kAllGather) {
    in_place = -static_cast<long long>(block);
    rule = "sendbuff == recvbuff + rank*sendcount";
  }
  if (offset == in_place) return ncclSuccess;
  const std::string name = kind_name(o.kind);
  return warn(ncclInvalidArgument,
              name + ": sendbuff and recvbuff overlap but the call is not in place: NCCL's in-place " + name +
                  " needs " + rule + " (rank " + std::to_string(o.comm->rank) + ", count " + std::to_string(o.count) +
                  " " + type_name(o.type) + ": recvbuff - sendbuff must be " + std::to_string(in_place) +
                  " bytes, is " + std::to_string(offset) + ")");
}

// What NCCL checks when a call is made (ArgsCheck, CommCheck, ncclCommEnsureReady).
ncclResult_t validate(const Op& o, cudaStream_t stream) {
  const std::string name = kind_name(o.kind);
  if (o.comm == nullptr) return warn(ncclInvalidArgument, name + ": comm is NULL");
  if (o.comm->async_error != ncclSuccess)
    return warn(o.comm->async_error, name + ": the communicator failed in an earlier collective (" +
                                         o.comm->async_reason + "); abort it with ncclCommAbort");
  if (type_bytes(o.type) == 0) return warn(ncclInvalidArgument, name + ": invalid datatype " + std::to_string(o.type));
  if (is_reduction(o.kind) && !valid_op(o.op))
    return warn(ncclInvalidArgument, name + ": invalid reduction operation " + std::to_string(o.op));
  if ((o.kind == Kind::kBroadcast || o.kind == Kind::kReduce) && (o.root < 0 || o.root >= o.comm->nranks))
    return warn(ncclInvalidArgument, name + ": invalid root " + std::to_string(o.root) + " (nranks " +
                                         std::to_string(o.comm->nranks) + ")");
  if (o.send == nullptr && send_bytes(o) > 0) return warn(ncclInvalidArgument, name + ": sendbuff is NULL");
  if (o.recv == nullptr && recv_bytes(o) > 0) return warn(ncclInvalidArgument, name + ": recvbuff is NULL");
  // A host pointer faults a GPU's NCCL kernel (NCCL_CHECK_POINTERS=1 refuses it up front): refuse it.
  if (send_bytes(o) > 0 && !::gpt2::emu::device_memory_range(o.send, send_bytes(o)))
    return warn(ncclInvalidArgument, name + ": sendbuff is not device memory (cudaMalloc)");
  if (recv_bytes(o) > 0 && o.recv != nullptr && !::gpt2::emu::device_memory_range(o.recv, recv_bytes(o)))
    return warn(ncclInvalidArgument, name + ": recvbuff is not device memory (cudaMalloc)");
  // (cudaStreamQuery would run a deferred stream's queue: only the handle is checked then.)
  if (defers(stream) ? !stream_handle_valid(stream) && (record_error(cudaErrorInvalidResourceHandle), true)
                     : cudaStreamQuery(stream) != cudaSuccess)
    return warn(ncclUnhandledCudaError, name + ": stream is not a valid CUDA stream");
  return check_in_place(o);
}

// ---- execution --------------------------------------------------------------------------------
// Exchanges are cut into slices so that MPI's int counts and the staging buffers
// stay small whatever the size of the call.
constexpr size_t kSliceBytes = size_t(16) << 20;

size_t slice_elems(const Op& o) { return std::max<size_t>(1, kSliceBytes / type_bytes(o.type)); }

int run_all_reduce(const Op& o) {
  ncclComm& c = *o.comm;
  const size_t b = type_bytes(o.type), step = slice_elems(o);
  const size_t chunk = std::max<size_t>(1, (o.count + c.nranks - 1) / c.nranks);  // ring chunk c ends at rank c
  for (size_t k = 0; k < o.count; k += step) {
    const size_t m = std::min(step, o.count - k);
    std::vector<unsigned char> mine(bytes_of(o.send) + k * b, bytes_of(o.send) + (k + m) * b), all(c.nranks * m * b);
    int rc = transport_all_gather(c, mine.data(), m * b, all.data());
    if (rc != MPI_SUCCESS) return rc;
    reduce_any(o.type, all.data(), m, c.nranks, o.op, [&](size_t j) { return static_cast<int>((k + j) / chunk); },
               bytes_of(o.recv) + k * b);
  }
  return MPI_SUCCESS;
}

int run_reduce_scatter(const Op& o) {
  ncclComm& c = *o.comm;
  const size_t b = type_bytes(o.type), step = slice_elems(o);
  for (size_t k = 0; k < o.count; k += step) {
    const size_t m = std::min(step, o.count - k);
    std::vector<unsigned char> packed(c.nranks * m * b), all(c.nranks * m * b);
    for (int d = 0; d < c.nranks; ++d)
      std::memcpy(packed.data() + d * m * b, bytes_of(o.send) + (d * o.count + k) * b, m * b);
    int rc = transport_all_to_all(c, packed.data(), m * b, all.data());
    if (rc != MPI_SUCCESS) return rc;
    reduce_any(o.type, all.data(), m, c.nranks, o.op, [&](size_t) { return c.rank; }, bytes_of(o.recv) + k * b);
  }
  return MPI_SUCCESS;
}

int run_reduce(const Op& o) {
  ncclComm& c = *o.comm;
  const size_t b = type_bytes(o.type), step = slice_elems(o);
  for (size_t k = 0; k < o.count; k += step) {
    const size_t m = std::min(step, o.count - k);
    std::vector<unsigned char> mine(bytes_of(o.send) + k * b, bytes_of(o.send) + (k + m) * b);
    std::vector<unsigned char> all(c.rank == o.root ? c.nranks * m * b : 0);
    int rc = transport_gather(c, mine.data(), m * b, all.data(), o.root);
    if (rc != MPI_SUCCESS) return rc;
    if (c.rank == o.root)
      reduce_any(o.type, all.data(), m, c.nranks, o.op, [&](size_t) { return o.root; }, bytes_of(o.recv) + k * b);
  }
  return MPI_SUCCESS;
}

int run_all_gather(const Op& o) {
  ncclComm& c = *o.comm;
  const size_t b = type_bytes(o.type), step = slice_elems(o);
  for (size_t k = 0; k < o.count; k += step) {
    const size_t m = std::min(step, o.count - k);
    std::vector<unsigned char> mine(bytes_of(o.send) + k * b, bytes_of(o.send) + (k + m) * b), all(c.nranks * m * b);
    int rc = transport_all_gather(c, mine.data(), m * b, all.data());
    if (rc != MPI_SUCCESS) return rc;
    for (int src = 0; src < c.nranks; ++src)
      std::memcpy(bytes_of(o.recv) + (src * o.count + k) * b, all.data() + src * m * b, m * b);
  }
  return MPI_SUCCESS;
}

int run_broadcast(const Op& o) {
  ncclComm& c = *o.comm;
  const size_t b = type_bytes(o.type), step = slice_elems(o);
  if (c.rank == o.root && o.send != o.recv) std::memmove(o.recv, o.send, o.count * b);
  for (size_t k = 0; k < o.count; k += step) {
    const size_t m = std::min(step, o.count - k);
    int rc = transport_broadcast(c, bytes_of(o.recv) + k * b, m * b, o.root);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

int run(const Op& o) {
  switch (o.kind) {
    case Kind::kAllReduce: return run_all_reduce(o);
    case Kind::kReduceScatter: return run_reduce_scatter(o);
    case Kind::kAllGather: return run_all_gather(o);
    case Kind::kBroadcast: return run_broadcast(o);
    case Kind::kReduce: return run_reduce(o);
  }
  return MPI_ERR_OTHER;
}

// What each rank called. On a GPU, ranks that issue different collectives (kind,
// count, type, op, root) hang or corrupt memory; here every rank sees the mismatch.
struct Signature {
  int32_t kind, type, op, root;
  uint64_t count;
};

std::string describe(const Signature& s) {
  std::string d = std::string(kind_name(static_cast<Kind>(s.kind))) + "(count " + std::to_string(s.count) + ", " +
                  type_name(static_cast<ncclDataType_t>(s.type));
  if (s.op >= 0) d += std::string(", ") + op_name(s.op);
  if (s.root >= 0) d += ", root " + std::to_string(s.root);
  return d + ")";
}

// Returns the MPI status; *mismatch names the disagreeing ranks, if any.
int exchange_signatures(const Op& o, std::string* mismatch) {
  Signature mine{static_cast<int32_t>(o.kind), static_cast<int32_t>(o.type),
                 is_reduction(o.kind) ? static_cast<int32_t>(o.op) : -1, o.root, o.count};
  std::vector<Signature> all(o.comm->nranks);
  int rc = transport_all_gather(*o.comm, &mine, sizeof mine, all.data());
  if (rc != MPI_SUCCESS) return rc;
  for (int r = 1; r < o.comm->nranks; ++r)
    if (std::memcmp(&all[r], &all[0], sizeof mine) != 0) {
      *mismatch = "ranks called different collectives: rank 0 " + describe(all[0]) + ", rank " + std::to_string(r) +
                  " " + describe(all[r]);
      break;
    }
  return MPI_SUCCESS;
}

// Runs one validated call. Failures are recorded on the communicator, as NCCL's
// proxy thread and kernels do, not returned: the call already "succeeded".
void execute(const Op& o) {
  ncclComm* c = o.comm;
  std::string why;
  ncclResult_t failure = ncclSuccess;
  if (c->async_error == ncclSuccess) {
    ++c->executed;
    maybe_freeze(*c);
    int rc = exchange_signatures(o, &why);
    if (rc == MPI_SUCCESS && why.empty()) rc = run(o);
    if (rc != MPI_SUCCESS) failure = c->sockets ? ncclRemoteError : ncclSystemError, why = transport_error_text(*c, rc);
    else if (!why.empty()) failure = ncclInvalidUsage;
    if (failure == ncclSuccess) failure = take_injected(c, &why);
  } else {
    failure = c->async_error;  // queued in a group before the communicator failed
  }
  if (failure == ncclSuccess) return;
  if (recv_bytes(o) > 0) std::memset(o.recv, 0xFF, recv_bytes(o));  // the result is undefined
  if (c->async_error == ncclSuccess) {
    c->async_error = failure;
    c->async_reason = std::string(kind_name(o.kind)) + ": " + why;
    warn(failure, c->async_reason);
  }
}

// ---- deferred stream mode -----------------------------------------------------------------------
// The process's latest queued collective: the next one is queued behind it.
uint64_t& last_collective() {
  static uint64_t id = 0;
  return id;
}

// Runs a validated call now, or queues it on its stream (deferred mode).
void dispatch(Op o) {
  if (!defers(o.stream)) {
    drain_item(last_collective());  // issue order, also for a legacy-stream call
    drain_legacy();
    execute(o);
    return;
  }
  ++o.comm->queued;
  last_collective() = enqueue(o.stream, [o] {
    --o.comm->queued;
    if (!o.comm->aborted) return execute(o);
    if (recv_bytes(o) > 0) std::memset(o.recv, 0xFF, recv_bytes(o));
  }, kCollectiveItem, last_collective());
}

// ---- groups -----------------------------------------------------------------------------------
// Per host thread, like NCCL's: calls are checked when made and run at the
// outermost ncclGroupEnd; one failed call drops the whole group.
struct GroupState {
  int depth = 0;
  ncclResult_t error = ncclSuccess;
  std::vector<Op> ops;
};

GroupState& group() {
  static thread_local GroupState state;
  return state;
}

bool group_uses(ncclComm_t comm) {
  for (const Op& o : group().ops)
    if (o.comm == comm) return true;
  return false;
}

ncclResult_t submit(const Op& o, cudaStream_t stream) {
  GroupState& g = group();
  ncclResult_t r = validate(o, stream);
  if (r != ncclSuccess) {
    if (g.depth > 0 && g.error == ncclSuccess) g.error = r;
    return r;
  }
  Op queued = o;
  queued.stream = stream;
  if (g.depth > 0) g.ops.push_back(queued);
  else dispatch(queued);
  return ncclSuccess;
}

uint64_t hash_id(const ncclUniqueId& id) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (char ch : id.internal) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ULL;
  return h;
}

// ---- communicator creation ----------------------------------------------------------------------
struct PeerInfo {
  char host[256];
  int32_t device;
};

// NCCL tells hosts apart by host name (NCCL_HOSTID overrides it) and devices by
// bus id; two ranks with the same pair would share one GPU.
PeerInfo my_peer_info(int device) {
  PeerInfo p{};
  const char* hostid = std::getenv("NCCL_HOSTID");
  if (hostid != nullptr && *hostid) std::snprintf(p.host, sizeof p.host, "%s", hostid);
  else if (gethostname(p.host, sizeof p.host - 1) != 0) std::snprintf(p.host, sizeof p.host, "unknown-host");
  p.device = device;
  return p;
}

// Every rank checks every pair, so all of them fail (NCCL fails the two ranks
// involved, and the others then hang in the next bootstrap step).
template <class AllGather>
ncclResult_t check_devices(AllGather all_gather, int nranks, int device) {
  PeerInfo mine = my_peer_info(device);
  std::vector<PeerInfo> all(nranks);
  if (!all_gather(&mine, sizeof mine, all.data()))
    return warn(ncclSystemError, "ncclCommInitRank: exchanging device identities failed");
  for (int i = 0; i < nranks; ++i)
    for (int j = i + 1; j < nranks; ++j)
      if (all[i].device == all[j].device && std::strcmp(all[i].host, all[j].host) == 0)
        return warn(ncclInvalidUsage, "Duplicate GPU detected : rank " + std::to_string(i) + " and rank " +
                                          std::to_string(j) + " both on CUDA device " + std::to_string(all[i].device) +
                                          " of host " + all[i].host + " (select one device per rank with cudaSetDevice)");
  return ncclSuccess;
}

ncclComm* new_comm(MPI_Comm mpi, int rank, int nranks, int device, uint64_t h) {
  ncclComm* c = new ncclComm();
  c->mpi = mpi;
  c->rank = rank;
  c->nranks = nranks;
  c->device = device;
  c->id_hash = h;
  c->async_error = c->injected = ncclSuccess;
  c->executed = 0;
  return c;
}

// ncclCommInitRank over the socket transport: the ranks meet at rank 0's
// abstract socket (GPT2_EMU_NCCL_CONNECT_TIMEOUT seconds, default 120).
ncclResult_t init_over_sockets(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank, uint64_t h) {
  const char* t = std::getenv("GPT2_EMU_NCCL_CONNECT_TIMEOUT");
  const double timeout = t != nullptr && *t != '\0' ? std::atof(t) : 120.0;
  std::string error;
  std::unique_ptr<SocketGroup> group = SocketGroup::connect(id, rank, nranks, timeout, &error);
  if (!group) return warn(ncclInvalidUsage, error);
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) device = 0;
  const auto socket_all_gather = [&](const void* mine, size_t bytes, void* all) {
    return group->all_gather(mine, bytes, all, &error);
  };
  const ncclResult_t r = check_devices(socket_all_gather, nranks, device);
  if (r != ncclSuccess) return r;
  *comm = new_comm(MPI_COMM_NULL, rank, nranks, device, h);
  (*comm)->sockets = std::move(group);
  return ncclSuccess;
}

}  // namespace

void nccl_inject_async_error(ncclComm* comm, int result, const std::string& reason) {
  comm->injected = static_cast<ncclResult_t>(result);
  comm->injected_reason = reason;
}

}  // namespace emu
}  // namespace gpt2

using namespace gpt2::emu;

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (see ncclGetLastError)";
    case ncclSystemError: return "unhandled system error (MPI failure in the emulator; see ncclGetLastError)";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument (see ncclGetLastError)";
    case ncclInvalidUsage: return "invalid usage (see ncclGetLastError)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

// NCCL ignores comm: the last WARN of this thread.
const char* ncclGetLastError(ncclComm_t comm) {
  (void)comm;
  return last_error().c_str();
}

// Processes of an MPI job (world > 1) communicate over MPI; any other process
// (torchrun, srun --mpi=none, a shell loop, or alone) gets an id of the socket
// transport (emu/nccl_socket.h), which every rank's ncclCommInitRank recognises.
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  int initialized = 0, finalized = 0, world = 1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world == 1) {
    make_socket_unique_id(id);
    return ncclSuccess;
  }
  std::random_device rd;
  for (size_t i = 0; i < sizeof(id->internal); ++i) id->internal[i] = static_cast<char>(rd() & 0xFF);
  id->internal[0] = 0;  // never the socket transport's mark
  return ncclSuccess;
}

// Collective over MPI_COMM_WORLD: every process of the job must call it (as every
// GPU of an NCCL communicator must). Ranks sharing one id form one communicator;
// the device is the calling thread's current CUDA device.
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (comm == nullptr) return warn(ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return warn(ncclInvalidArgument, "ncclCommInitRank: invalid rank " + std::to_string(rank) + " of nranks " +
                                         std::to_string(nranks));
  maybe_freeze_init(rank);
  const uint64_t h = hash_id(id);
  if (is_socket_unique_id(id)) return init_over_sockets(comm, nranks, id, rank, h);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized && MPI_Init(nullptr, nullptr) != MPI_SUCCESS) return warn(ncclSystemError, "MPI_Init failed");
  MPI_Comm split;
  if (MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(h & 0x7fffffff), rank, &split) != MPI_SUCCESS)
    return warn(ncclSystemError, "ncclCommInitRank: MPI_Comm_split failed");
  MPI_Comm_set_errhandler(split, MPI_ERRORS_RETURN);  // MPI failures become NCCL errors, not an abort
  int size = 0, my_rank = -1;
  MPI_Comm_size(split, &size);
  MPI_Comm_rank(split, &my_rank);
  int ok = size == nranks && my_rank == rank, all_ok = 0;  // decided together: no rank goes on alone
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, split);
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) device = 0;
  const auto mpi_all_gather = [&](const void* mine, size_t bytes, void* all) {
    return MPI_Allgather(mine, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes), MPI_BYTE, split) ==
           MPI_SUCCESS;
  };
  ncclResult_t r = all_ok ? check_devices(mpi_all_gather, size, device)
                          : warn(ncclInvalidArgument, "ncclCommInitRank: " + std::to_string(size) +
                                                          " processes share this unique id, but rank " +
                                                          std::to_string(rank) + " was told nranks " +
                                                          std::to_string(nranks) + " (or two passed the same rank)");
  if (r != ncclSuccess) {
    MPI_Comm_free(&split);
    return r;
  }
  *comm = new_comm(split, rank, nranks, device, h);
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return warn(ncclInvalidArgument, "ncclCommFinalize: comm is NULL");
  drain_item(last_collective());  // finalize completes the queued collectives
  return comm->async_error;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  if (group_uses(comm))
    return warn(ncclInvalidUsage, "ncclCommDestroy: the communicator has calls queued in an open group");
  if (comm->queued > 0 && !comm->aborted) drain_item(last_collective());
  if (comm->queued > 0) return ncclSuccess;  // aborted with queued items: they still name it (leaked)
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm->mpi != MPI_COMM_NULL) MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

// Drops the communicator's queued group calls, then destroys it. Called from
// a thread other than the creator's (a timeout watchdog, while the creator may
// be blocked in MPI), it leaves the communicator alone: a blocked MPI call
// cannot be interrupted, and freeing an MPI communicator beside it is undefined
// (MPI runs funneled); the caller is about to end the process anyway (on a
// GPU, NCCL's abort makes the kernels waiting for a dead peer return).
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  maybe_block_abort(*comm);
  if (std::this_thread::get_id() != comm->owner) return ncclSuccess;
  std::vector<Op>& ops = group().ops;
  ops.erase(std::remove_if(ops.begin(), ops.end(), [&](const Op& o) { return o.comm == comm; }), ops.end());
  comm->aborted = true;  // deferred mode: its queued collectives do nothing (a peer may be gone)
  return ncclCommDestroy(comm);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  if (comm == nullptr || error == nullptr) return warn(ncclInvalidArgument, "ncclCommGetAsyncError: NULL argument");
  *error = comm->async_error;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return ncclInvalidArgument;
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (comm == nullptr || device == nullptr) return ncclInvalidArgument;
  *device = comm->device;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++group().depth;
  return ncclSuccess;
}

// Runs the group's calls communicator by communicator (ordered by unique id, the
// same on every rank) and in call order within one: NCCL launches a group's calls
// on different communicators concurrently, so ranks may queue them in any order.
ncclResult_t ncclGroupEnd() {
  GroupState& g = group();
  if (g.depth == 0) return warn(ncclInvalidUsage, "ncclGroupEnd: not in a group call (no matching ncclGroupStart)");
  if (--g.depth > 0) return ncclSuccess;
  std::vector<Op> ops;
  ops.swap(g.ops);
  const ncclResult_t error = g.error;
  g.error = ncclSuccess;
  if (error != ncclSuccess) return error;
  std::stable_sort(ops.begin(), ops.end(), [](const Op& a, const Op& b) { return a.comm->id_hash < b.comm->id_hash; });
  for (const Op& o : ops) dispatch(o);
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return submit(Op{Kind::kAllReduce, sendbuff, recvbuff, count, datatype, op, -1, comm}, stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return submit(Op{Kind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, -1, comm}, stream);
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  return submit(Op{Kind::kReduce, sendbuff, recvbuff, count, datatype, op, root, comm}, stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return submit(Op{Kind::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, -1, comm}, stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return submit(Op{Kind::kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, comm}, stream);
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

}  // extern "C"
