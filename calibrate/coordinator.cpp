#include "calibrate/coordinator.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

#include <fmt/ranges.h>

#include <fmt/format.h>

#include "comm/comm.hpp"
#include "comm/mpi_util.hpp"

namespace shardplan::calibrate {

namespace {
constexpr int kCheckinTag = 11;
constexpr int kBeatTag = 12;
constexpr int64_t kBeatEveryNs = 500'000'000;   // 0.5 s
constexpr int64_t kSilentNs = 2'000'000'000;     // a peer silent this long is named
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
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  beats_ = provided == MPI_THREAD_MULTIPLE && size_ > 1;
  const auto n = static_cast<std::size_t>(size_);
  last_heard_ns_ = std::make_unique<std::atomic<int64_t>[]>(n);
  for (std::size_t r = 0; r < n; ++r) last_heard_ns_[r].store(now_ns());
  if (beats_) {
    comm::mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &beat_comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(beat_comm_, MPI_ERRORS_RETURN);
    beat_in_.assign(n, 0);
    recv_.assign(n, MPI_REQUEST_NULL);
    send_.assign(n, MPI_REQUEST_NULL);
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && (rank_ == 0 || r == 0))
        MPI_Irecv(&beat_in_[static_cast<std::size_t>(r)], 1, MPI_INT64_T, r, kBeatTag, beat_comm_,
                  &recv_[static_cast<std::size_t>(r)]);
  }
  alive();
  watchdog_ = std::thread([this] { watch(); });
}

Coordinator::~Coordinator() {
  stop_ = true;
  if (watchdog_.joinable()) watchdog_.join();
  heartbeat_stop();
  MPI_Comm_free(&comm_);
}

void Coordinator::heartbeat() {
  const int64_t now = now_ns();
  for (int r = 0; r < size_; ++r) {
    MPI_Request& req = recv_[static_cast<std::size_t>(r)];
    if (req == MPI_REQUEST_NULL) continue;
    int got = 0;
    while (MPI_Test(&req, &got, MPI_STATUS_IGNORE) == MPI_SUCCESS && got) {  // drain what arrived
      last_heard_ns_[static_cast<std::size_t>(r)].store(now);
      if (MPI_Irecv(&beat_in_[static_cast<std::size_t>(r)], 1, MPI_INT64_T, r, kBeatTag, beat_comm_, &req) != MPI_SUCCESS) {
        req = MPI_REQUEST_NULL;
        break;
      }
    }
  }
  if (now - last_beat_ns_ < kBeatEveryNs) return;
  last_beat_ns_ = now;
  ++beat_out_;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || !(rank_ == 0 || r == 0)) continue;
    MPI_Request& req = send_[static_cast<std::size_t>(r)];
    int done = 1;
    if (req != MPI_REQUEST_NULL) MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) MPI_Isend(&beat_out_, 1, MPI_INT64_T, r, kBeatTag, beat_comm_, &req);  // 8 bytes: sent eagerly
  }
}

void Coordinator::heartbeat_stop() {
  if (!beats_) return;
  for (MPI_Request& req : recv_) {
    if (req == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
  }
  for (MPI_Request& req : send_)
    if (req != MPI_REQUEST_NULL) MPI_Request_free(&req);  // eager and long delivered, or to a peer that left
  MPI_Comm_free(&beat_comm_);
  beats_ = false;
}

std::string Coordinator::silent_ranks_note() const {
  if (!beats_) return "";
  const int64_t now = now_ns();
  std::vector<int> silent;
  double longest = 0;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || !(rank_ == 0 || r == 0)) continue;
    const int64_t quiet = now - last_heard_ns_[static_cast<std::size_t>(r)].load();
    if (quiet > kSilentNs) {
      silent.push_back(r);
      longest = std::max(longest, static_cast<double>(quiet) / 1e9);
    }
  }
  if (silent.empty()) return "";
  return fmt::format(" (rank{} {} {} shown no sign of life for {:.0f} s: stopped, or its node is down)",
                     silent.size() > 1 ? "s" : "", fmt::join(silent, ", "), silent.size() > 1 ? "have" : "has", longest);
}

void Coordinator::watch() {
  const int64_t limit_ns = static_cast<int64_t>((2 * timeout_s_ + 10) * 1e9);
  int64_t last_tick = now_ns();
  while (!stop_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const int64_t tick = now_ns();
    if (tick - last_tick > kSilentNs) {
      // This process was stopped (SIGSTOP, a suspended machine) and runs again: its own silence is not a hang, and
      // its peers' silence is only the time it did not listen.
      alive();
      for (int r = 0; r < size_; ++r) last_heard_ns_[static_cast<std::size_t>(r)].store(tick);
    }
    last_tick = tick;
    if (beats_) heartbeat();
    if (now_ns() - last_alive_ns_.load(std::memory_order_relaxed) > limit_ns) {
      std::string step;
      {
        std::lock_guard<std::mutex> lock(step_mutex_);
        step = step_;
      }
      const std::string note = silent_ranks_note();
      if (!note.empty())  // the rank waited on is the one to name
        std::fprintf(stderr, "error: rank %d waited %.0f s during %s%s; ending every rank\n", rank_,
                     2 * timeout_s_ + 10, step.c_str(), note.c_str());
      else
        std::fprintf(stderr, "error: rank %d made no progress for %.0f s during %s; ending every rank\n", rank_,
                     2 * timeout_s_ + 10, step.c_str());
      std::fflush(stderr);
      comm::MpiSession::abort_job(1);
    }
  }
}

void Coordinator::wait_request(MPI_Request& r, double timeout_s, const std::string& what) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  auto last = std::chrono::steady_clock::now();
  int done = 0, spins = 0;
  while (true) {
    comm::mpi_check(MPI_Test(&r, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    alive();
    if (++spins > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
    const auto now = std::chrono::steady_clock::now();
    if (now - last > std::chrono::seconds(1)) deadline += now - last;  // this process was stopped, not its peers
    last = now;
    if (now > deadline)
      throw comm::CommError(fmt::format("{} did not finish within {:.0f} s (a rank died or hangs){}", what, timeout_s,
                                        silent_ranks_note()));
  }
}

bool Coordinator::checkin(const std::string& step, bool stop) {
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
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    auto last = std::chrono::steady_clock::now();
    int spins = 0;
    while (true) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last > std::chrono::seconds(1)) deadline += now - last;  // rank 0 itself was stopped
      last = now;
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
  int go = rank_ == 0 && stop ? 0 : 1;
  MPI_Request bcast;
  comm::mpi_check(MPI_Ibcast(&go, 1, MPI_INT, 0, comm_, &bcast), "MPI_Ibcast");
  wait_request(bcast, rank_ == 0 ? timeout_s_ : 1.5 * timeout_s_ + 2,
               rank_ == 0 ? fmt::format("starting '{}'", step) : fmt::format("waiting for rank 0 to start '{}'", step));
  return go != 0;
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
