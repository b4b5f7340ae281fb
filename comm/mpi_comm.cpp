// MPI backend of the communication interface (OpenMPI from Debian): non-blocking collectives (MPI-3) on host
// buffers. OpenMPI has no asynchronous progress thread, so Handle::wait polls MPI_Test, which both drives
// progress and lets it give up after a time-out instead of hanging.
#include <mpi.h>

#include <thread>
#include <vector>

#include <fmt/format.h>

#include "comm/comm.hpp"
#include "comm/mpi_util.hpp"
#include "numeric/bf16.hpp"  // header-only bf16 rounding, shared with the kernels so that all round alike

namespace shardplan::comm {

namespace {

MPI_Datatype mpi_type(DataType t) {
  // bf16 has no MPI type: its elements travel as 16-bit words and are added by bf16_sum.
  return t == DataType::bf16 ? MPI_UINT16_T : MPI_FLOAT;
}

// MPI user reduction for bf16: inout[i] = round(in[i] + inout[i]), each pairwise sum computed in fp32 and rounded
// to bf16 (RNE), as NCCL's bf16 reductions round at every step.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const numeric::bf16*>(in);
  auto* b = static_cast<numeric::bf16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = numeric::bf16_from_float(numeric::bf16_to_float(a[i]) + numeric::bf16_to_float(b[i]));
}

int as_int(std::size_t count) {
  if (count > static_cast<std::size_t>(INT32_MAX)) throw CommError(fmt::format("{} elements: too many for MPI", count));
  return static_cast<int>(count);
}

// One operation's requests (one, or a send and a receive): done when all are.
class MpiHandle final : public Handle {
 public:
  MpiHandle(MPI_Request request, std::string what) : requests_{request}, what_(std::move(what)) {}
  MpiHandle(std::vector<MPI_Request> requests, std::string what) : requests_(std::move(requests)), what_(std::move(what)) {}
  ~MpiHandle() override {
    // A handle dropped unfinished must not leak a live request (the buffers may go away): finish it. Not one whose
    // wait() timed out: its peer is stopped or dead, and MPI_Wait here, during the unwinding that carries the
    // time-out to the error line, blocked until the watchdog (2·timeout + 10 s; issue 19, item 22). The process
    // ends right after that error; the request is abandoned (freeing a collective's request is erroneous).
    if (timed_out_) return;
    for (MPI_Request& r : requests_)
      if (r != MPI_REQUEST_NULL) MPI_Wait(&r, MPI_STATUS_IGNORE);
  }
  bool test() override {
    int done = 0;
    mpi_check(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE),
              what_.c_str());
    return done != 0;
  }
  void wait(std::chrono::duration<double> timeout) override {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    auto last = std::chrono::steady_clock::now();
    int spins = 0;
    while (!test()) {
      // Spin briefly (latency), then yield the core (oversubscribed CPU runs need the other ranks to run).
      if (++spins > 1000) std::this_thread::yield();
      // A jump of the clock between two polls: this process was stopped (SIGSTOP), not its peers; the time it did
      // not run does not count against them.
      const auto now = std::chrono::steady_clock::now();
      if (now - last > std::chrono::seconds(1)) deadline += now - last;
      last = now;
      if (now > deadline) {
        timed_out_ = true;
        throw CommError(fmt::format("{} did not finish within {:.0f} s", what_, timeout.count()));
      }
    }
  }

 private:
  std::vector<MPI_Request> requests_;
  std::string what_;
  bool timed_out_ = false;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (bf16_sum_ != MPI_OP_NULL) MPI_Op_free(&bf16_sum_);
    if (owned_) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }
  std::string library_version() const override { return mpi_library_version(); }

  HandlePtr all_gather(const void* send, void* recv, std::size_t count, DataType t) override {
    MPI_Request r;
    mpi_check(MPI_Iallgather(send, as_int(count), mpi_type(t), recv, as_int(count), mpi_type(t), comm_, &r),
              "MPI_Iallgather");
    return std::make_unique<MpiHandle>(r, "all_gather");
  }
  HandlePtr reduce_scatter(const void* send, void* recv, std::size_t count, DataType t) override {
    MPI_Request r;
    mpi_check(MPI_Ireduce_scatter_block(send, recv, as_int(count), mpi_type(t), sum_op(t), comm_, &r),
              "MPI_Ireduce_scatter_block");
    return std::make_unique<MpiHandle>(r, "reduce_scatter");
  }
  HandlePtr all_reduce(const void* send, void* recv, std::size_t count, DataType t) override {
    MPI_Request r;
    mpi_check(MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, as_int(count), mpi_type(t), sum_op(t), comm_, &r),
              "MPI_Iallreduce");
    return std::make_unique<MpiHandle>(r, "all_reduce");
  }
  HandlePtr all_to_all(const void* send, void* recv, std::size_t count, DataType t) override {
    MPI_Request r;
    mpi_check(MPI_Ialltoall(send, as_int(count), mpi_type(t), recv, as_int(count), mpi_type(t), comm_, &r),
              "MPI_Ialltoall");
    return std::make_unique<MpiHandle>(r, "all_to_all");
  }
  HandlePtr broadcast(void* buffer, std::size_t count, DataType t, int root) override {
    MPI_Request r;
    mpi_check(MPI_Ibcast(buffer, as_int(count), mpi_type(t), root, comm_, &r), "MPI_Ibcast");
    return std::make_unique<MpiHandle>(r, "broadcast");
  }
  HandlePtr send(const void* buffer, std::size_t count, DataType t, int peer) override {
    MPI_Request r;
    mpi_check(MPI_Isend(buffer, as_int(count), mpi_type(t), peer, kTag, comm_, &r), "MPI_Isend");
    return std::make_unique<MpiHandle>(r, fmt::format("send to rank {}", peer));
  }
  HandlePtr recv(void* buffer, std::size_t count, DataType t, int peer) override {
    MPI_Request r;
    mpi_check(MPI_Irecv(buffer, as_int(count), mpi_type(t), peer, kTag, comm_, &r), "MPI_Irecv");
    return std::make_unique<MpiHandle>(r, fmt::format("receive from rank {}", peer));
  }
  HandlePtr send_recv(const void* send, void* recv, std::size_t count, DataType t, int to, int from) override {
    std::vector<MPI_Request> r(2);
    mpi_check(MPI_Irecv(recv, as_int(count), mpi_type(t), from, kTag, comm_, &r[0]), "MPI_Irecv");
    mpi_check(MPI_Isend(send, as_int(count), mpi_type(t), to, kTag, comm_, &r[1]), "MPI_Isend");
    return std::make_unique<MpiHandle>(std::move(r), fmt::format("send to rank {} / receive from rank {}", to, from));
  }
  HandlePtr barrier() override {
    MPI_Request r;
    mpi_check(MPI_Ibarrier(comm_, &r), "MPI_Ibarrier");
    return std::make_unique<MpiHandle>(r, "barrier");
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm sub;
    mpi_check(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
    return std::make_unique<MpiCommunicator>(sub, true);
  }

 private:
  // The reduction of a sum in dtype t; the bf16 one is created at its first use and freed with the communicator.
  MPI_Op sum_op(DataType t) {
    if (t == DataType::fp32) return MPI_SUM;
    if (bf16_sum_ == MPI_OP_NULL) mpi_check(MPI_Op_create(&bf16_sum, 1, &bf16_sum_), "MPI_Op_create");
    return bf16_sum_;
  }

  static constexpr int kTag = 7;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_world() {
  MPI_Comm dup;
  // A private copy of the world: our traffic never matches a message of the caller's own MPI use.
  mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "MPI_Comm_dup");
  return std::make_unique<MpiCommunicator>(dup, true);
}

}  // namespace shardplan::comm
