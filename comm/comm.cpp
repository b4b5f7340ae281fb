// The backend-independent parts: MPI start-up and shutdown, the rank layout, backend selection.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/comm.hpp"
#include "comm/mpi_util.hpp"

namespace shardplan::comm {

std::size_t element_bytes(DataType t) { return t == DataType::fp32 ? 4 : 2; }

const char* to_string(DataType t) { return t == DataType::fp32 ? "fp32" : "bf16"; }

void mpi_check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw CommError(fmt::format("{} failed: {}", call, std::string(text, static_cast<std::size_t>(length))));
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  // Errors come back as codes (mpi_check turns them into exceptions) instead of killing the job on the spot.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiSession::abort_job(int code) {
  int initialized = 0, finalized = 0, size = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
  // One rank (or MPI not running): nothing to end but this process, and no banner to add to the error line.
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);  // MPI_Abort does not return; this is also for the type system (and a broken MPI)
}

// ---- start-up watchdog ----------------------------------------------------------------------------------------

namespace {

// This process's rank as the launcher tells it (OpenMPI, MPICH/PMI, Slurm), before MPI_Init; 0 for a singleton.
int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return std::atoi(v);
  return 0;
}

}  // namespace

struct StartupWatchdog::State {
  std::mutex mutex;
  std::condition_variable wake;
  bool disarmed = false;
  std::thread thread;
};

StartupWatchdog::StartupWatchdog(double timeout_s, std::string command) : state_(std::make_shared<State>()) {
  const int rank = launcher_rank();
  // Rank 0 speaks first; another rank only when rank 0 did not end the job (rank 0 is the stopped one).
  const double deadline_s = timeout_s + (rank == 0 ? 0.0 : 3.0);
  state_->thread = std::thread([state = state_, deadline_s, timeout_s, rank, command = std::move(command)] {
    std::unique_lock<std::mutex> lock(state->mutex);
    if (state->wake.wait_for(lock, std::chrono::duration<double>(deadline_s), [&] { return state->disarmed; })) return;
    std::fprintf(stderr,
                 "error: rank %d: %s start-up did not finish within %.0f s: a rank of the job was not started, is "
                 "stopped or hangs (every rank must reach MPI_Init; see --timeout); ending the job\n",
                 rank, command.c_str(), timeout_s);
    std::fflush(stderr);
    std::_Exit(1);  // MPI_Abort needs a finished MPI_Init; mpirun ends the other ranks when one exits non-zero
  });
}

void StartupWatchdog::disarm() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->disarmed = true;
  }
  state_->wake.notify_all();
  if (state_->thread.joinable()) state_->thread.join();
}

StartupWatchdog::~StartupWatchdog() { disarm(); }

namespace {

// SHARDPLAN_RANKS_PER_NODE as a number ≥ 1; 0 when unset; -1 when it is not a valid count.
int ranks_per_node_override() {
  const char* env = std::getenv("SHARDPLAN_RANKS_PER_NODE");
  if (env == nullptr || *env == '\0') return 0;
  char* end = nullptr;
  const long k = std::strtol(env, &end, 10);
  return *end == '\0' && k >= 1 && k <= (1 << 24) ? static_cast<int>(k) : -1;
}

}  // namespace

std::string ranks_per_node_problem() {
  if (ranks_per_node_override() >= 0) return "";
  return std::string("SHARDPLAN_RANKS_PER_NODE=") + std::getenv("SHARDPLAN_RANKS_PER_NODE") +
         ": give a whole number of ranks per node, at least 1 (or unset it)";
}

WorldInfo query_world() {
  WorldInfo w;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
  // Ranks of one node: those that can share memory (MPI-3 MPI_COMM_TYPE_SHARED).
  MPI_Comm node_comm;
  mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &node_comm),
            "MPI_Comm_split_type");
  MPI_Comm_rank(node_comm, &w.local_rank);
  MPI_Comm_size(node_comm, &w.local_size);
  // Node index: the lowest world rank of each node, ranked. leader[r] = lowest world rank on r's node.
  int leader = w.rank;
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, node_comm), "MPI_Allreduce");
  MPI_Comm_free(&node_comm);
  std::vector<int> leaders(static_cast<std::size_t>(w.size));  // [size]
  mpi_check(MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  std::vector<int> distinct = leaders;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  w.nodes = static_cast<int>(distinct.size());
  w.node = static_cast<int>(std::lower_bound(distinct.begin(), distinct.end(), leader) - distinct.begin());
  if (const int per = ranks_per_node_override(); per > 0) {
    w.node = w.rank / per;
    w.nodes = (w.size + per - 1) / per;
    w.local_rank = w.rank % per;
    w.local_size = std::min(per, w.size - w.node * per);  // the last node may hold fewer
  }
  return w;
}

std::vector<std::string> split_command_line(const std::string& raw) {
  std::vector<std::string> out;
  for (size_t start = 0; start < raw.size();) {
    size_t end = raw.find('\0', start);
    if (end == std::string::npos) end = raw.size();
    out.push_back(raw.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::vector<std::string> own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  return split_command_line(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
}

uint64_t fnv1a(const std::string& text, uint64_t seed) {
  uint64_t h = seed;
  for (const char c : text) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

std::vector<int> ranks_with_other_value(uint64_t mine) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<uint64_t> all(static_cast<size_t>(size));  // [size]
  mpi_check(MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD), "MPI_Allgather");
  std::vector<int> odd;
  for (int r = 1; r < size; ++r)
    if (all[static_cast<size_t>(r)] != all[0]) odd.push_back(r);
  return odd;
}

int64_t min_over_ranks(int64_t mine) {
  int64_t out = mine;
  mpi_check(MPI_Allreduce(&mine, &out, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
  return out;
}

std::string ranks_per_node_mismatch() {
  const char* env = std::getenv("SHARDPLAN_RANKS_PER_NODE");
  const std::string mine = env == nullptr ? std::string("\x01unset") : std::string(env);
  const std::vector<int> odd = ranks_with_other_value(fnv1a(mine));
  if (odd.empty()) return "";
  return fmt::format("SHARDPLAN_RANKS_PER_NODE is {} on rank 0 but otherwise (or unset) on rank(s) {}: set it alike for every rank "
                     "(mpirun -x SHARDPLAN_RANKS_PER_NODE=K) or unset it",
                     env == nullptr ? std::string("unset") : fmt::format("'{}'", env), fmt::join(odd, ", "));
}

std::vector<int> ranks_with_other_arguments() {
  // The arguments after the program name (which may differ per node), each with its NUL as in the cmdline file.
  const std::vector<std::string> args = own_command_line();
  uint64_t mine = 1469598103934665603ull;  // FNV-1a 64 (Fowler, Noll, Vo)
  for (size_t a = 1; a < args.size(); ++a) {
    for (const char c : args[a]) mine = (mine ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    mine = (mine ^ 0u) * 1099511628211ull;  // the NUL that ends it
  }
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<uint64_t> all(static_cast<size_t>(size));
  mpi_check(MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD), "MPI_Allgather");
  std::vector<int> odd;
  for (int r = 1; r < size; ++r)
    if (all[static_cast<size_t>(r)] != all[0]) odd.push_back(r);
  return odd;
}

std::string mpi_library_version() {
  char library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(library, &length);
  const std::string line(library);
  return line.substr(0, line.find_first_of(",\n"));
}

bool backend_available(const std::string& backend) {
  if (backend == "mpi") return true;
#if SHARDPLAN_HAVE_NCCL
  if (backend == "nccl") return true;
#endif
  return false;
}

std::unique_ptr<Communicator> make_world(const std::string& backend) {
  if (backend == "mpi") return make_mpi_world();
#if SHARDPLAN_HAVE_NCCL
  if (backend == "nccl") return make_nccl_world(query_world());
#endif
  if (backend == "nccl") throw CommError("this shardplan was built without the CUDA toolkit: no NCCL backend");
  throw CommError(fmt::format("unknown backend '{}'", backend));
}

}  // namespace shardplan::comm
