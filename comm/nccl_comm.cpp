// NCCL backend (compiled only when the CUDA toolkit is found): one process per GPU, started by mpirun.
//  - The GPU is the node-local rank modulo the visible GPUs; the ncclUniqueId is made on world rank 0 and
//    broadcast over MPI (NCCL docs, "Creating a communicator with MPI").
//  - Each communicator has its own non-blocking CUDA stream, so communication overlaps compute on others.
//  - Process groups are ncclCommSplit children (NCCL ≥ 2.18).
//  - Handles are CUDA events recorded after the operation; waiting polls the event and
//    ncclCommGetAsyncError, so a failed peer or a network error surfaces as CommError (after ncclCommAbort)
//    instead of a hang (NCCL docs, "Fault tolerance / asynchronous errors").
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <thread>

#include <fmt/format.h>

#include "comm/comm.hpp"
#include "comm/mpi_util.hpp"

namespace shardplan::comm {

namespace {

void cuda_check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw CommError(fmt::format("{} failed: {}", call, cudaGetErrorString(e)));
}

void nccl_check(ncclResult_t r, const char* call) {
  if (r != ncclSuccess && r != ncclInProgress)
    throw CommError(fmt::format("{} failed: {}", call, ncclGetErrorString(r)));
}

ncclDataType_t nccl_type(DataType t) { return t == DataType::fp32 ? ncclFloat : ncclBfloat16; }

class NcclHandle final : public Handle {
 public:
  NcclHandle(ncclComm_t comm, cudaStream_t stream, std::string what) : comm_(comm), what_(std::move(what)) {
    cuda_check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventRecord(event_, stream), "cudaEventRecord");
  }
  ~NcclHandle() override { cudaEventDestroy(event_); }
  bool test() override {
    ncclResult_t async = ncclSuccess;
    nccl_check(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError");
    if (async != ncclSuccess && async != ncclInProgress) {
      ncclCommAbort(comm_);
      throw CommError(fmt::format("{}: NCCL reported {}", what_, ncclGetErrorString(async)));
    }
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaErrorNotReady) return false;
    cuda_check(e, "cudaEventQuery");
    return true;
  }
  void wait(std::chrono::duration<double> timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!test()) {
      std::this_thread::yield();
      if (std::chrono::steady_clock::now() > deadline) {
        ncclCommAbort(comm_);  // frees the stream's kernels waiting for a peer that will not come
        throw CommError(fmt::format("{} did not finish within {:.0f} s", what_, timeout.count()));
      }
    }
  }

 private:
  ncclComm_t comm_;
  cudaEvent_t event_{};
  std::string what_;
};

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(ncclComm_t comm) : comm_(comm) {
    nccl_check(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank");
    nccl_check(ncclCommCount(comm_, &size_), "ncclCommCount");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_check(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc");  // float[1] for the barrier
  }
  ~NcclCommunicator() override {
    cudaStreamSynchronize(stream_);
    cudaFree(scratch_);
    cudaStreamDestroy(stream_);
    ncclCommDestroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }
  // ncclGetVersion: major·10000 + minor·100 + patch since NCCL 2.9 (nccl.h NCCL_VERSION).
  std::string library_version() const override {
    int code = 0;
    nccl_check(ncclGetVersion(&code), "ncclGetVersion");
    return fmt::format("NCCL {}.{}.{}", code / 10000, code / 100 % 100, code % 100);
  }

  HandlePtr all_gather(const void* send, void* recv, std::size_t count, DataType t) override {
    nccl_check(ncclAllGather(send, recv, count, nccl_type(t), comm_, stream_), "ncclAllGather");
    return done("all_gather");
  }
  HandlePtr reduce_scatter(const void* send, void* recv, std::size_t count, DataType t) override {
    nccl_check(ncclReduceScatter(send, recv, count, nccl_type(t), ncclSum, comm_, stream_), "ncclReduceScatter");
    return done("reduce_scatter");
  }
  HandlePtr all_reduce(const void* send, void* recv, std::size_t count, DataType t) override {
    nccl_check(ncclAllReduce(send, recv, count, nccl_type(t), ncclSum, comm_, stream_), "ncclAllReduce");
    return done("all_reduce");
  }
  HandlePtr all_to_all(const void* send, void* recv, std::size_t count, DataType t) override {
    // NCCL has no all-to-all call: one send and one receive per peer inside a group (nccl-tests src/alltoall.cu
    // AlltoAllRunColl; NCCL docs "Point-to-point communication": all-to-all).
    const std::size_t block = count * element_bytes(t);
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    for (int q = 0; q < size_; ++q) {
      nccl_check(ncclSend(static_cast<const char*>(send) + q * block, count, nccl_type(t), q, comm_, stream_), "ncclSend");
      nccl_check(ncclRecv(static_cast<char*>(recv) + q * block, count, nccl_type(t), q, comm_, stream_), "ncclRecv");
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    return done("all_to_all");
  }
  HandlePtr broadcast(void* buffer, std::size_t count, DataType t, int root) override {
    nccl_check(ncclBroadcast(buffer, buffer, count, nccl_type(t), root, comm_, stream_), "ncclBroadcast");
    return done("broadcast");
  }
  HandlePtr send(const void* buffer, std::size_t count, DataType t, int peer) override {
    nccl_check(ncclSend(buffer, count, nccl_type(t), peer, comm_, stream_), "ncclSend");
    return done(fmt::format("send to rank {}", peer));
  }
  HandlePtr recv(void* buffer, std::size_t count, DataType t, int peer) override {
    nccl_check(ncclRecv(buffer, count, nccl_type(t), peer, comm_, stream_), "ncclRecv");
    return done(fmt::format("receive from rank {}", peer));
  }
  HandlePtr send_recv(const void* send, void* recv, std::size_t count, DataType t, int to, int from) override {
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    nccl_check(ncclSend(send, count, nccl_type(t), to, comm_, stream_), "ncclSend");
    nccl_check(ncclRecv(recv, count, nccl_type(t), from, comm_, stream_), "ncclRecv");
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    return done(fmt::format("send to rank {} / receive from rank {}", to, from));
  }
  HandlePtr barrier() override {
    nccl_check(ncclAllReduce(scratch_, scratch_, 1, ncclFloat, ncclSum, comm_, stream_), "ncclAllReduce");
    return done("barrier");
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    ncclComm_t child = nullptr;
    nccl_check(ncclCommSplit(comm_, color, key, &child, nullptr), "ncclCommSplit");
    return std::make_unique<NcclCommunicator>(child);
  }

 private:
  HandlePtr done(std::string what) { return std::make_unique<NcclHandle>(comm_, stream_, std::move(what)); }

  ncclComm_t comm_;
  cudaStream_t stream_{};
  float* scratch_ = nullptr;
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_world(const WorldInfo& world) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
    throw CommError("the nccl backend needs a GPU and none is visible (use --backend mpi on CPUs)");
  cuda_check(cudaSetDevice(world.local_rank % devices), "cudaSetDevice");
  ncclUniqueId id;
  if (world.rank == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  mpi_check(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
  ncclComm_t comm = nullptr;
  nccl_check(ncclCommInitRank(&comm, world.size, id, world.rank), "ncclCommInitRank");
  return std::make_unique<NcclCommunicator>(comm);
}

}  // namespace shardplan::comm
