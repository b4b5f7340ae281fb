#pragma once
// The measurements, nccl-tests style: warm-up, then `iters` back-to-back iterations timed together (iters chosen
// so that one repeat lasts about target_s), several repeats; each repeat's time is the slowest rank's; the record
// keeps the median and p10/p90 over repeats. Collectives are checked for correctness afterwards (#wrong).
#include <cstdint>
#include <string>

#include "calibrate/coordinator.hpp"
#include "calibrate/device.hpp"
#include "calibrate/records.hpp"
#include "comm/comm.hpp"

namespace shardplan::calibrate {

struct TimingConfig {
  int warmup = 5;
  int repeats = 5;
  double target_s = 0.02;  // one repeat
  int64_t min_iters = 20, max_iters = 1000;
};

// `plan` carries the identity (op, scope, ranks, bytes); the result adds iters, repeats, times and #wrong.
// `group` is the communicator of the scope (this rank's group); every rank of the world calls this at once.
RawRecord measure_collective(Coordinator& co, comm::Communicator& group, Device& device, const RawRecord& plan,
                             const TimingConfig& tc);
RawRecord measure_gemm(Coordinator& co, Device& device, const RawRecord& plan, const TimingConfig& tc);
RawRecord measure_copy(Coordinator& co, Device& device, const RawRecord& plan, const TimingConfig& tc);
// Device::elementwise over plan.bytes (read + written); the device must have one.
RawRecord measure_elementwise(Coordinator& co, Device& device, const RawRecord& plan, const TimingConfig& tc);

// Elements per rank of a collective of S bytes over n ranks (nccl-tests): S/(elem·n) for all-gather and
// reduce-scatter, S/elem for all-reduce.
int64_t collective_count(const std::string& op, int64_t bytes, int64_t ranks, int64_t element_bytes);

}  // namespace shardplan::calibrate
