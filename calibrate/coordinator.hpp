#pragma once
// Keeping the ranks in step, with a deadline on everything: a rank that dies or hangs ends the run on every
// rank with an error naming it, never a silent hang.
//  - checkin(step): every rank reports to rank 0 (point to point) before each measurement; rank 0 waits at most
//    `timeout` and names the ranks that did not come, then releases the others. Non-zero ranks wait longer, so
//    that rank 0 speaks first.
//  - A watchdog thread per rank aborts the job (MPI_Abort) when the rank itself made no progress for
//    2·timeout + 10 s: the back-stop for a hang inside a blocking call.
//  - The same thread sends a heartbeat every 0.5 s (ranks to rank 0, rank 0 to every rank; a communicator of its
//    own, MPI_THREAD_MULTIPLE), so that a time-out can name the rank that stopped (SIGSTOP, a frozen node): a rank
//    silent for 2 s is named in the error (issue 19, item 22). A rank that was itself stopped (its own clock jumped)
//    does not blame anyone when it resumes.
// MPI reductions over the world (max, sum) poll non-blocking requests under the same deadline.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <memory>
#include <thread>
#include <vector>

namespace shardplan::calibrate {

class Coordinator {
 public:
  explicit Coordinator(double timeout_s);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  double timeout_s() const { return timeout_s_; }

  // Throws comm::CommError naming the missing rank(s) (rank 0) or rank 0 (others) after the deadline. `stop` (rank
  // 0's) ends the run on every rank in step: checkin returns false everywhere (a raw CSV that cannot be written).
  bool checkin(const std::string& step, bool stop = false);
  double max(double v);
  int64_t sum(int64_t v);
  // Rank 0's text to every rank.
  void broadcast(std::string& text);
  // Marks progress for the watchdog (called inside long waits too).
  void alive() { last_alive_ns_.store(now_ns(), std::memory_order_relaxed); }
  // "" or " (rank 1 has shown no sign of life for 4 s: stopped, or its node is down)": the ranks this rank hears
  // heartbeats from (rank 0: all; others: rank 0) that went silent for more than 2 s.
  std::string silent_ranks_note() const;

 private:
  static int64_t now_ns();
  void wait_request(MPI_Request& r, double timeout_s, const std::string& what);
  void watch();
  void heartbeat();  // the watchdog thread's sends and receives
  void heartbeat_stop();

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  double timeout_s_;
  int64_t step_index_ = 0;
  std::string step_;
  std::mutex step_mutex_;
  std::atomic<int64_t> last_alive_ns_{0};
  std::atomic<bool> stop_{false};
  // Heartbeats: one receive per peer heard from, one send per peer told; last_heard_ns_[r] for each rank heard.
  MPI_Comm beat_comm_ = MPI_COMM_NULL;
  bool beats_ = false;  // MPI_THREAD_MULTIPLE provided
  int64_t beat_out_ = 0;
  std::vector<int64_t> beat_in_;          // [size] receive buffers
  std::vector<MPI_Request> recv_, send_;  // [size]
  std::unique_ptr<std::atomic<int64_t>[]> last_heard_ns_;  // [size]
  int64_t last_beat_ns_ = 0;
  std::thread watchdog_;
};

}  // namespace shardplan::calibrate
