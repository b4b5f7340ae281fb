#include "calibrate/bench.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

namespace shardplan::calibrate {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Times run(iters) (iters back-to-back, finished when it returns) as described in bench.hpp, into rec.
template <class Run>
void time_repeats(RawRecord& rec, Coordinator& co, const TimingConfig& tc, Run run) {
  run(tc.warmup);
  // Two iterations, the slowest rank's mean, set the iteration count of a repeat.
  double t0 = now_s();
  run(2);
  const double one = std::max(co.max((now_s() - t0) / 2), 1e-9);
  rec.iters = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(tc.target_s / one)), tc.min_iters, tc.max_iters);
  std::vector<double> per_iter;  // [repeats]
  for (int r = 0; r < tc.repeats; ++r) {
    co.max(0.0);  // every rank starts together
    t0 = now_s();
    run(rec.iters);
    per_iter.push_back(co.max((now_s() - t0) / static_cast<double>(rec.iters)));
    co.alive();
  }
  rec.repeats = tc.repeats;
  rec.median_s = quantile(per_iter, 0.5);
  rec.p10_s = quantile(per_iter, 0.1);
  rec.p90_s = quantile(per_iter, 0.9);
}

// Rank r's input element i: small integers, so that sums over up to 32 ranks are exact in fp32 and bf16
// (≤ 32·7 = 224 < 256, bf16's last exact integer run).
float input_value(int rank, std::size_t i) { return static_cast<float>(rank % 4 + static_cast<int>(i % 5)); }

}  // namespace

int64_t collective_count(const std::string& op, int64_t bytes, int64_t ranks, int64_t element_bytes) {
  // all_reduce: S is each rank's buffer; send_recv: S is what one rank sends its neighbour (one pipeline hop).
  if (op == "all_reduce" || op == "send_recv") return bytes / element_bytes;
  return bytes / (element_bytes * ranks);
}

RawRecord measure_collective(Coordinator& co, comm::Communicator& group, Device& device, const RawRecord& plan,
                             const TimingConfig& tc) {
  RawRecord rec = plan;
  const comm::DataType t = device.dtype();
  const std::size_t elem = comm::element_bytes(t);
  const int n = group.size(), me = group.rank();
  const std::size_t count = static_cast<std::size_t>(collective_count(plan.op, plan.bytes, n, static_cast<int64_t>(elem)));
  const bool gather = plan.op == "all_gather", scatter = plan.op == "reduce_scatter", a2a = plan.op == "all_to_all";
  // send_recv: every rank sends `count` to the next rank and receives `count` from the previous one, all at once (a
  // pipeline's neighbours; nccl-tests src/sendrecv.cu pairs ranks the same way).
  const bool p2p = plan.op == "send_recv";
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  // all_to_all: each rank sends one block of `count` to every rank and receives one from each.
  const std::size_t send_count = scatter || a2a ? count * static_cast<std::size_t>(n) : count;  // [send_count]
  const std::size_t recv_count = gather || a2a ? count * static_cast<std::size_t>(n) : count;   // [recv_count]
  DeviceBuffer send(device, send_count * elem), recv(device, recv_count * elem);
  // NCCL queues launches on a stream: launch all, wait for the last (nccl-tests). MPI progresses only inside
  // MPI calls: wait each.
  const bool pipelined = std::string(group.backend()) == "nccl";
  const auto timeout = std::chrono::duration<double>(co.timeout_s());
  auto launch = [&] {
    if (gather) return group.all_gather(send.data(), recv.data(), count, t);
    if (a2a) return group.all_to_all(send.data(), recv.data(), count, t);
    if (p2p) return group.send_recv(send.data(), recv.data(), count, t, next, prev);
    if (scatter) return group.reduce_scatter(send.data(), recv.data(), count, t);
    return group.all_reduce(send.data(), recv.data(), count, t);
  };
  auto run = [&](int64_t iters) {
    comm::HandlePtr last;
    for (int64_t i = 0; i < iters; ++i) {
      last = launch();
      if (!pipelined) last->wait(timeout);
    }
    if (last) last->wait(timeout);
    device.synchronize();
  };

  std::vector<float> input(send_count);  // [send_count]
  for (std::size_t i = 0; i < send_count; ++i) input[i] = input_value(me, i);
  device.upload(send.data(), input);
  try {
    time_repeats(rec, co, tc, run);
    // Correctness (nccl-tests' #wrong): fresh inputs, one run, every element compared with its exact value.
    device.upload(send.data(), input);
    run(1);
  } catch (const comm::CommError& e) {
    throw comm::CommError(fmt::format("{} {} of {} bytes over {} ranks: {}", plan.op, plan.scope, plan.bytes, n,
                                      e.what()));
  }
  const std::vector<float> got = device.download(recv.data(), recv_count);  // [recv_count]
  int64_t wrong = 0;
  for (std::size_t i = 0; i < recv_count; ++i) {
    float want = 0;
    if (gather) {
      want = input_value(static_cast<int>(i / count), i % count);  // block q comes from rank q
    } else if (p2p) {
      want = input_value(prev, i);  // the previous rank's buffer, whole
    } else if (a2a) {
      // block q is rank q's block `me`: its elements me·count … me·count + count − 1
      want = input_value(static_cast<int>(i / count), static_cast<std::size_t>(me) * count + i % count);
    } else {
      const std::size_t at = scatter ? static_cast<std::size_t>(me) * count + i : i;  // my block of the sum
      for (int q = 0; q < n; ++q) want += input_value(q, at);
    }
    if (got[i] != want) ++wrong;
  }
  rec.wrong = co.sum(wrong);
  return rec;
}

RawRecord measure_gemm(Coordinator& co, Device& device, const RawRecord& plan, const TimingConfig& tc) {
  RawRecord rec = plan;
  const std::unique_ptr<Kernel> gemm = device.gemm(plan.m, plan.n, plan.k, 2 * device.cache_bytes());
  TimingConfig g = tc;
  g.warmup = std::min(tc.warmup, 2);  // a GEMM needs no protocol warm-up, only the first-touch of its buffers
  g.min_iters = 1;
  time_repeats(rec, co, g, [&](int64_t iters) {
    for (int64_t i = 0; i < iters; ++i) gemm->launch();
    device.synchronize();
  });
  return rec;
}

namespace {

// A memory-bound kernel timed as a GEMM is: a short warm-up (first touch), then repeats.
RawRecord measure_stream(Coordinator& co, Device& device, Kernel& k, const RawRecord& plan, const TimingConfig& tc) {
  RawRecord rec = plan;
  TimingConfig g = tc;
  g.warmup = std::min(tc.warmup, 2);
  g.min_iters = 1;
  time_repeats(rec, co, g, [&](int64_t iters) {
    for (int64_t i = 0; i < iters; ++i) k.launch();
    device.synchronize();
  });
  return rec;
}

}  // namespace

RawRecord measure_copy(Coordinator& co, Device& device, const RawRecord& plan, const TimingConfig& tc) {
  const std::unique_ptr<Kernel> copy = device.copy(static_cast<std::size_t>(plan.bytes));
  return measure_stream(co, device, *copy, plan, tc);
}

RawRecord measure_elementwise(Coordinator& co, Device& device, const RawRecord& plan, const TimingConfig& tc) {
  const std::unique_ptr<Kernel> k = device.elementwise(static_cast<std::size_t>(plan.bytes));
  if (!k) throw std::logic_error("measure_elementwise on a device without an elementwise kernel");
  return measure_stream(co, device, *k, plan, tc);
}

}  // namespace shardplan::calibrate
