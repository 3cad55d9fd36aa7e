// NCCL for the emulator, over MPI between real processes: `mpirun -np 2` emulates
// two GPUs, one per rank. Implemented against the toolkit's nccl.h so host code
// runs unchanged. Every collective completes before it returns (device memory is
// host memory), and operations inside ncclGroupStart/End run in call order, which
// matches NCCL's requirement that all ranks issue collectives in the same order.
// bf16/fp16 reductions are done in fp32 with one rounding of the result.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

struct ncclComm {
  MPI_Comm mpi;
  int rank;
  int nranks;
};

namespace gpt2 {
namespace emu {
namespace {

bool is_half_type(ncclDataType_t t) { return t == ncclFloat16 || t == ncclBfloat16; }

size_t nccl_type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

bool mpi_type(ncclDataType_t t, MPI_Datatype* out) {
  switch (t) {
    case ncclInt8: *out = MPI_INT8_T; return true;
    case ncclUint8: *out = MPI_UINT8_T; return true;
    case ncclInt32: *out = MPI_INT32_T; return true;
    case ncclUint32: *out = MPI_UINT32_T; return true;
    case ncclInt64: *out = MPI_INT64_T; return true;
    case ncclUint64: *out = MPI_UINT64_T; return true;
    case ncclFloat32: *out = MPI_FLOAT; return true;
    case ncclFloat64: *out = MPI_DOUBLE; return true;
    case ncclFloat16: case ncclBfloat16: *out = MPI_FLOAT; return true;  // reduced in fp32
    default: return false;
  }
}

bool mpi_op(ncclRedOp_t op, MPI_Op* out) {
  switch (op) {
    case ncclSum: case ncclAvg: *out = MPI_SUM; return true;
    case ncclProd: *out = MPI_PROD; return true;
    case ncclMax: *out = MPI_MAX; return true;
    case ncclMin: *out = MPI_MIN; return true;
    default: return false;
  }
}

void widen(ncclDataType_t t, const void* src, float* dst, size_t count) {
  for (size_t i = 0; i < count; ++i)
    dst[i] = t == ncclBfloat16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(src)[i])
                               : __half2float(static_cast<const __half*>(src)[i]);
}

void narrow(ncclDataType_t t, const float* src, void* dst, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (t == ncclBfloat16) static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16(src[i]);
    else static_cast<__half*>(dst)[i] = __float2half(src[i]);
  }
}

// Divides by the number of ranks in place (ncclAvg).
void divide(ncclDataType_t t, void* buf, size_t count, int nranks) {
  for (size_t i = 0; i < count; ++i) {
    switch (t) {
      case ncclFloat32: static_cast<float*>(buf)[i] /= static_cast<float>(nranks); break;
      case ncclFloat64: static_cast<double*>(buf)[i] /= nranks; break;
      case ncclInt32: static_cast<int32_t*>(buf)[i] /= nranks; break;
      case ncclUint32: static_cast<uint32_t*>(buf)[i] /= static_cast<uint32_t>(nranks); break;
      case ncclInt64: static_cast<int64_t*>(buf)[i] /= nranks; break;
      case ncclUint64: static_cast<uint64_t*>(buf)[i] /= static_cast<uint64_t>(nranks); break;
      case ncclInt8: static_cast<int8_t*>(buf)[i] /= nranks; break;
      case ncclUint8: static_cast<uint8_t*>(buf)[i] /= nranks; break;
      default: break;
    }
  }
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

ncclResult_t mpi_result(int rc) { return rc == MPI_SUCCESS ? ncclSuccess : ncclSystemError; }

// Reduce-type collectives: `run` receives fp32 (or native) buffers and the MPI type.
ncclResult_t reduce_collective(const void* send, size_t send_count, void* recv, size_t recv_count,
                               ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                               const std::function<int(const void*, void*, MPI_Datatype, MPI_Op)>& run) {
  if (comm == nullptr) return ncclInvalidArgument;
  MPI_Datatype mt;
  MPI_Op mo;
  size_t bytes = nccl_type_bytes(type);
  if (!mpi_type(type, &mt) || bytes == 0 || !mpi_op(op, &mo)) return ncclInvalidArgument;
  if ((send == nullptr && send_count > 0) || (recv == nullptr && recv_count > 0)) return ncclInvalidArgument;
  int rc;
  if (is_half_type(type)) {
    std::vector<float> in(send_count), out(recv_count);
    widen(type, send, in.data(), send_count);
    rc = run(in.data(), out.data(), mt, mo);
    if (rc == MPI_SUCCESS && op == ncclAvg)
      for (float& v : out) v /= static_cast<float>(comm->nranks);
    if (rc == MPI_SUCCESS) narrow(type, out.data(), recv, recv_count);
  } else {
    std::vector<unsigned char> copy;
    const void* input = send;
    if (overlaps(send, send_count * bytes, recv, recv_count * bytes)) {  // in-place call
      copy.assign(static_cast<const unsigned char*>(send), static_cast<const unsigned char*>(send) + send_count * bytes);
      input = copy.data();
    }
    rc = run(input, recv, mt, mo);
    if (rc == MPI_SUCCESS && op == ncclAvg) divide(type, recv, recv_count, comm->nranks);
  }
  return mpi_result(rc);
}

}  // namespace
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
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error (MPI failure in the emulator)";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    default: return "unknown result code";
  }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  std::random_device rd;
  for (size_t i = 0; i < sizeof(id->internal); ++i) id->internal[i] = static_cast<char>(rd() & 0xFF);
  return ncclSuccess;
}

// Collective over MPI_COMM_WORLD: every process of the job must call it (as every
// GPU of an NCCL communicator must). Ranks sharing one id form one communicator.
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (comm == nullptr || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized && MPI_Init(nullptr, nullptr) != MPI_SUCCESS) return ncclSystemError;
  uint32_t color = 2166136261u;  // FNV-1a of the id bytes
  for (char c : id.internal) color = (color ^ static_cast<unsigned char>(c)) * 16777619u;
  MPI_Comm split;
  if (MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(color & 0x7fffffff), rank, &split) != MPI_SUCCESS)
    return ncclSystemError;
  int size = 0, my_rank = -1;
  MPI_Comm_size(split, &size);
  MPI_Comm_rank(split, &my_rank);
  if (size != nranks || my_rank != rank) {
    MPI_Comm_free(&split);
    return ncclInvalidArgument;
  }
  *comm = new ncclComm{split, rank, nranks};
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) { return comm == nullptr ? ncclInvalidArgument : ncclSuccess; }

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  if (comm == nullptr || error == nullptr) return ncclInvalidArgument;
  *error = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return ncclInvalidArgument;
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (comm == nullptr || device == nullptr) return ncclInvalidArgument;
  *device = 0;  // each process emulates one GPU
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() { return ncclSuccess; }
ncclResult_t ncclGroupEnd() { return ncclSuccess; }

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  (void)stream;
  return reduce_collective(sendbuff, count, recvbuff, count, datatype, op, comm,
                           [&](const void* in, void* out, MPI_Datatype t, MPI_Op o) {
                             return MPI_Allreduce(in, out, static_cast<int>(count), t, o, comm->mpi);
                           });
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  (void)stream;
  if (comm == nullptr) return ncclInvalidArgument;
  return reduce_collective(sendbuff, recvcount * comm->nranks, recvbuff, recvcount, datatype, op, comm,
                           [&](const void* in, void* out, MPI_Datatype t, MPI_Op o) {
                             return MPI_Reduce_scatter_block(in, out, static_cast<int>(recvcount), t, o, comm->mpi);
                           });
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  (void)stream;
  size_t bytes = nccl_type_bytes(datatype);
  if (comm == nullptr || bytes == 0) return ncclInvalidArgument;
  size_t chunk = sendcount * bytes;
  std::vector<unsigned char> copy(static_cast<const unsigned char*>(sendbuff),
                                  static_cast<const unsigned char*>(sendbuff) + chunk);
  return mpi_result(MPI_Allgather(copy.data(), static_cast<int>(chunk), MPI_BYTE, recvbuff, static_cast<int>(chunk),
                                  MPI_BYTE, comm->mpi));
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  (void)stream;
  size_t bytes = nccl_type_bytes(datatype);
  if (comm == nullptr || bytes == 0 || root < 0 || root >= comm->nranks) return ncclInvalidArgument;
  if (comm->rank == root && sendbuff != recvbuff) std::memmove(recvbuff, sendbuff, count * bytes);
  return mpi_result(MPI_Bcast(recvbuff, static_cast<int>(count * bytes), MPI_BYTE, root, comm->mpi));
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

}  // extern "C"
