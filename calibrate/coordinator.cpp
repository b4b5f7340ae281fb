#include "calibrate/coordinator.hpp"

#include <cstdio>
#include <vector>

#include <fmt/format.h>

#include "comm/comm.hpp"
#include "comm/mpi_util.hpp"

namespace shardplan::calibrate {

namespace {
constexpr int kCheckinTag = 11;
}

int64_t Coordinator::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Coordinator::Coordinator(double timeout_s) : timeout_s_(timeout_s) {
  comm::mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  step_ = "start-up";
  alive();
  watchdog_ = std::thread([this] { watch(); });
}

Coordinator::~Coordinator() {
  stop_ = true;
  if (watchdog_.joinable()) watchdog_.join();
  MPI_Comm_free(&comm_);
}

void Coordinator::watch() {
  const int64_t limit_ns = static_cast<int64_t>((2 * timeout_s_ + 10) * 1e9);
  while (!stop_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (now_ns() - last_alive_ns_.load(std::memory_order_relaxed) > limit_ns) {
      std::string step;
      {
        std::lock_guard<std::mutex> lock(step_mutex_);
        step = step_;
      }
      std::fprintf(stderr, "error: rank %d made no progress for %.0f s during %s; ending every rank\n", rank_,
                   2 * timeout_s_ + 10, step.c_str());
      std::fflush(stderr);
      comm::MpiSession::abort_job(1);
    }
  }
}

void Coordinator::wait_request(MPI_Request& r, double timeout_s, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int done = 0, spins = 0;
  while (true) {
    comm::mpi_check(MPI_Test(&r, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    alive();
    if (++spins > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
    if (std::chrono::steady_clock::now() > deadline)
      throw comm::CommError(fmt::format("{} did not finish within {:.0f} s (a rank died or hangs)", what, timeout_s));
  }
}

void Coordinator::checkin(const std::string& step) {
  {
    std::lock_guard<std::mutex> lock(step_mutex_);
    step_ = step;
  }
  alive();
  ++step_index_;
  int64_t mine = step_index_;
  if (rank_ == 0) {
    // One receive per rank; when the deadline passes, the ranks whose receive is still open are the culprits.
    std::vector<int64_t> got(static_cast<std::size_t>(size_), 0);  // [size]
    std::vector<MPI_Request> req(static_cast<std::size_t>(size_), MPI_REQUEST_NULL);
    for (int r = 1; r < size_; ++r)
      comm::mpi_check(MPI_Irecv(&got[static_cast<std::size_t>(r)], 1, MPI_INT64_T, r, kCheckinTag, comm_, &req[static_cast<std::size_t>(r)]),
                      "MPI_Irecv");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    int spins = 0;
    while (true) {
      std::vector<int> missing;
      for (int r = 1; r < size_; ++r) {
        int done = 0;
        comm::mpi_check(MPI_Test(&req[static_cast<std::size_t>(r)], &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (!done) missing.push_back(r);
      }
      if (missing.empty()) break;
      alive();
      if (++spins > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (std::chrono::steady_clock::now() > deadline) {
        throw comm::CommError(fmt::format("rank{} {} did not reach '{}' within {:.0f} s (it died or hangs; see "
                                          "--timeout)",
                                          missing.size() > 1 ? "s" : "", fmt::join(missing, ", "), step, timeout_s_),
                              missing.front());
      }
    }
    for (int r = 1; r < size_; ++r)
      if (got[static_cast<std::size_t>(r)] != mine)
        throw comm::CommError(fmt::format("rank {} is at step {} while rank 0 is at step {} ('{}'): the ranks "
                                          "disagree about the measurement plan",
                                          r, got[static_cast<std::size_t>(r)], mine, step),
                              r);
  } else {
    MPI_Request send;
    comm::mpi_check(MPI_Isend(&mine, 1, MPI_INT64_T, 0, kCheckinTag, comm_, &send), "MPI_Isend");
    wait_request(send, 1.5 * timeout_s_ + 2, fmt::format("reporting '{}' to rank 0", step));
  }
  // Rank 0 releases everyone (a rank that passed its check-in waits here for the slow ones).
  int go = 1;
  MPI_Request bcast;
  comm::mpi_check(MPI_Ibcast(&go, 1, MPI_INT, 0, comm_, &bcast), "MPI_Ibcast");
  wait_request(bcast, rank_ == 0 ? timeout_s_ : 1.5 * timeout_s_ + 2,
               rank_ == 0 ? fmt::format("starting '{}'", step) : fmt::format("waiting for rank 0 to start '{}'", step));
}

double Coordinator::max(double v) {
  MPI_Request r;
  double out = 0;
  comm::mpi_check(MPI_Iallreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, comm_, &r), "MPI_Iallreduce");
  wait_request(r, timeout_s_, "the timing reduction");
  return out;
}

int64_t Coordinator::sum(int64_t v) {
  MPI_Request r;
  int64_t out = 0;
  comm::mpi_check(MPI_Iallreduce(&v, &out, 1, MPI_INT64_T, MPI_SUM, comm_, &r), "MPI_Iallreduce");
  wait_request(r, timeout_s_, "the correctness reduction");
  return out;
}

void Coordinator::broadcast(std::string& text) {
  int64_t length = static_cast<int64_t>(text.size());
  MPI_Request r;
  comm::mpi_check(MPI_Ibcast(&length, 1, MPI_INT64_T, 0, comm_, &r), "MPI_Ibcast");
  wait_request(r, timeout_s_, "broadcast");
  text.resize(static_cast<std::size_t>(length));
  if (length == 0) return;
  comm::mpi_check(MPI_Ibcast(text.data(), static_cast<int>(length), MPI_CHAR, 0, comm_, &r), "MPI_Ibcast");
  wait_request(r, timeout_s_, "broadcast");
}

}  // namespace shardplan::calibrate
