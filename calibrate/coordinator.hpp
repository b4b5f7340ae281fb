#pragma once
// Keeping the ranks in step, with a deadline on everything: a rank that dies or hangs ends the run on every
// rank with an error naming it, never a silent hang.
//  - checkin(step): every rank reports to rank 0 (point to point) before each measurement; rank 0 waits at most
//    `timeout` and names the ranks that did not come, then releases the others. Non-zero ranks wait longer, so
//    that rank 0 speaks first.
//  - A watchdog thread per rank aborts the job (MPI_Abort) when the rank itself made no progress for
//    2·timeout + 10 s: the back-stop for a hang inside a blocking call.
// MPI reductions over the world (max, sum) poll non-blocking requests under the same deadline.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

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

  // Throws comm::CommError naming the missing rank(s) (rank 0) or rank 0 (others) after the deadline.
  void checkin(const std::string& step);
  double max(double v);
  int64_t sum(int64_t v);
  // Rank 0's text to every rank.
  void broadcast(std::string& text);
  // Marks progress for the watchdog (called inside long waits too).
  void alive() { last_alive_ns_.store(now_ns(), std::memory_order_relaxed); }

 private:
  static int64_t now_ns();
  void wait_request(MPI_Request& r, double timeout_s, const std::string& what);
  void watch();

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  double timeout_s_;
  int64_t step_index_ = 0;
  std::string step_;
  std::mutex step_mutex_;
  std::atomic<int64_t> last_alive_ns_{0};
  std::atomic<bool> stop_{false};
  std::thread watchdog_;
};

}  // namespace shardplan::calibrate
