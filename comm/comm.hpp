#pragma once
// shardplan_comm: one small communication interface with two backends, MPI (CPU ranks, CI) and NCCL (one
// process per GPU, compiled only when the CUDA toolkit is found). Ranks are started by mpirun in both cases.
//
// Buffers are device pointers for NCCL and host pointers for MPI; `count` is in elements of `dtype`.
// Every operation is asynchronous and returns a Handle: wait() blocks until it is done (or throws CommError),
// so communication overlaps whatever the caller does before waiting.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardplan::comm {

enum class DataType { fp32, bf16 };
std::size_t element_bytes(DataType t);
const char* to_string(DataType t);

// A communication failure or a time-out. `rank` names the rank at fault when known (else -1).
class CommError : public std::runtime_error {
 public:
  CommError(const std::string& what, int rank = -1) : std::runtime_error(what), rank_(rank) {}
  int rank() const { return rank_; }

 private:
  int rank_;
};

class Handle {
 public:
  virtual ~Handle() = default;
  // Blocks until done. Throws CommError when the operation failed or did not finish within `timeout`.
  virtual void wait(std::chrono::duration<double> timeout) = 0;
  // Non-blocking: true when done (drives progress for backends without a progress thread, e.g. OpenMPI).
  virtual bool test() = 0;
};
using HandlePtr = std::unique_ptr<Handle>;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "mpi" | "nccl"
  // The communication library under it, for the record: "Open MPI v4.1.4", "NCCL 2.27.3".
  virtual std::string library_version() const = 0;

  // recv[size·count] = concat over ranks of send[count].
  virtual HandlePtr all_gather(const void* send, void* recv, std::size_t count, DataType t) = 0;
  // recv[count] = sum over ranks of send[size·count], the rank-th block.
  virtual HandlePtr reduce_scatter(const void* send, void* recv, std::size_t count, DataType t) = 0;
  // recv[count] = sum over ranks of send[count] (send == recv allowed).
  virtual HandlePtr all_reduce(const void* send, void* recv, std::size_t count, DataType t) = 0;
  // recv[size·count], block q = rank q's send block `rank()`; send[size·count], block q goes to rank q
  // (MPI_Alltoall; NCCL: grouped ncclSend/ncclRecv per peer, as nccl-tests src/alltoall.cu). Expert parallelism's
  // token dispatch and combine (issue 17).
  virtual HandlePtr all_to_all(const void* send, void* recv, std::size_t count, DataType t) = 0;
  virtual HandlePtr broadcast(void* buffer, std::size_t count, DataType t, int root) = 0;
  virtual HandlePtr send(const void* buffer, std::size_t count, DataType t, int peer) = 0;
  // send[count] to rank `to` and recv[count] from rank `from`, at once: a pipeline stage's exchange with its
  // neighbours (torch.distributed.batch_isend_irecv, Megatron-Core pipeline_parallel/p2p_communication.py
  // _communicate). NCCL: one group of ncclSend + ncclRecv, which a ring of separate sends would deadlock without.
  virtual HandlePtr send_recv(const void* send, void* recv, std::size_t count, DataType t, int to, int from) = 0;
  virtual HandlePtr recv(void* buffer, std::size_t count, DataType t, int peer) = 0;
  virtual HandlePtr barrier() = 0;

  // A sub-communicator of the ranks passing the same color, ordered by key (MPI_Comm_split / ncclCommSplit).
  // Collective over this communicator; every rank must call it.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
};

// Rank layout of the MPI job: the world, this rank's node (ranks sharing memory) and its place there.
struct WorldInfo {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;  // within the node
  int node = 0, nodes = 1;             // node index (ordered by the lowest world rank on it)
};

// MPI must be initialised (see MpiSession). Collective over MPI_COMM_WORLD.
// SHARDPLAN_RANKS_PER_NODE=K overrides what MPI reports: every K consecutive world ranks are one node. For
// launchers that hide the machine's topology, and to run the multi-node groups (intra-node, rails) on one
// machine (tests/mpi/calibrate_nodes.sh). An invalid K is ignored here: callers check it first, before MPI starts.
WorldInfo query_world();
// "" when SHARDPLAN_RANKS_PER_NODE is unset or a whole number ≥ 1, else the one-line reason (bad input).
std::string ranks_per_node_problem();

// The program name, then its arguments, as this process was started (/proc/self/cmdline); empty when unreadable.
std::vector<std::string> own_command_line();
// The strings of a cmdline file, each ended by a NUL ("a\0\0b\0" → "a", "", "b"; a last one without its NUL too).
std::vector<std::string> split_command_line(const std::string& raw);

// The ranks whose command-line arguments (after the program name, /proc/self/cmdline) differ from rank 0's, in
// order; empty when every rank got the same. A rank started with other flags (an MPMD launch, a wrapper that
// differs per node) would otherwise wait forever in a collective of another size. Collective over
// MPI_COMM_WORLD (one 64-bit FNV-1a hash per rank).
std::vector<int> ranks_with_other_arguments();

// 64-bit FNV-1a (Fowler, Noll, Vo) of `text`, continuing from `seed`.
uint64_t fnv1a(const std::string& text, uint64_t seed = 1469598103934665603ull);

// The ranks whose `mine` differs from rank 0's, in order (one 64-bit value per rank, all-gathered). Collective over
// MPI_COMM_WORLD. validate and calibrate compare a hash of what they resolved (the model and cluster files as read,
// the measurement plan): ranks with the same flags but other working folders read other files (issue 19, item 9).
std::vector<int> ranks_with_other_value(uint64_t mine);

// The smallest of every rank's `mine` (MPI_Allreduce MIN), so that a decision depending on it is taken alike.
int64_t min_over_ranks(int64_t mine);

// "" when every rank sees the same SHARDPLAN_RANKS_PER_NODE (set alike or unset), else the one-line reason naming
// the variable and the ranks. Collective over MPI_COMM_WORLD.
std::string ranks_per_node_mismatch();

// A deadline on MPI start-up, which no MPI timeout covers: MPI_Init waits for every rank of the job (a rank stopped
// right after spawn kept the others in MPI_Init for ever; issue 19, item 8). Armed before MPI_Init; a watchdog
// thread ends this process with exit 1 when disarm() has not come within `timeout_s`. Rank 0 (by the launcher's
// variables) prints one error line at the deadline; the other ranks wait 3 s more and leave silently, so that
// when rank 0 is the stopped one, another still explains why the job ended.
class StartupWatchdog {
 public:
  StartupWatchdog(double timeout_s, std::string command);
  ~StartupWatchdog();
  StartupWatchdog(const StartupWatchdog&) = delete;
  StartupWatchdog& operator=(const StartupWatchdog&) = delete;
  void disarm();

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// The MPI library's version line (MPI_Get_library_version, up to its first comma): "Open MPI v4.1.4".
std::string mpi_library_version();

// MPI_Init_thread on construction (MPI_THREAD_MULTIPLE when offered: the watchdog aborts from its own thread),
// MPI_Finalize on destruction. One per process.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  // Ends every rank of the job now (MPI_Abort): the way out of a hang. A job of one rank has nobody to end: it
  // leaves with `code` without MPI_Abort's 8-line banner (issue 19, item 21).
  [[noreturn]] static void abort_job(int code);
};

// The world communicator of a backend: "mpi" or "nccl". Throws CommError when the backend is not compiled in
// (nccl without the CUDA toolkit) or cannot start (no GPU). NCCL picks the GPU local_rank % visible GPUs.
std::unique_ptr<Communicator> make_world(const std::string& backend);
bool backend_available(const std::string& backend);

}  // namespace shardplan::comm
