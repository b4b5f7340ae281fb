// Chrome trace event format (the "JSON Object Format" of the Trace Event Format document; opens in
// chrome://tracing and ui.perfetto.dev): pid = pipeline stage, tid = stream, "X" complete events for ops, "C"
// counter events for allocated memory, "M" metadata naming processes and threads. Times in microseconds.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "io/atomic_write.hpp"
#include "sim/simulate.hpp"

namespace shardplan::sim {

namespace {

void append_ops(std::string& out, const Engine& e) {
  for (size_t i = 0; i < e.ops().size(); ++i) {
    const OpInfo& op = e.ops()[i];
    const StreamInfo& st = e.streams()[static_cast<size_t>(op.stream)];
    const double a = e.start(static_cast<int32_t>(i)), b = e.end(static_cast<int32_t>(i));
    fmt::format_to(std::back_inserter(out),
                   ",\n{{\"name\":\"{}\",\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{:.3f},\"dur\":{:.3f},\"pid\":{},\"tid\":{},"
                   "\"args\":{{\"micro_batch\":{},\"chunk\":{},\"layer\":{},\"nominal_us\":{:.3f}}}}}",
                   op_name(op), to_string(st.kind), a * 1e6, (b - a) * 1e6, st.rank, op.stream, op.micro, op.chunk,
                   op.layer, op.work * 1e6);
  }
}

void append_memory(std::string& out, const Engine& e) {
  for (int32_t r = 0; r < e.ranks(); ++r)
    for (const MemorySample& s : e.memory_timeline(r))
      fmt::format_to(std::back_inserter(out),
                     ",\n{{\"name\":\"memory allocated (GB)\",\"ph\":\"C\",\"ts\":{:.3f},\"pid\":{},\"args\":{{\"GB\":{:.6f}}}}}",
                     s.t * 1e6, r, s.bytes / 1e9);  // GB = 10^9 bytes, as every other output
}

std::string trace_text(const SimResult& r) {
  const Engine& e = *r.engine;
  std::string out = "{\"displayTimeUnit\":\"ms\",";
  fmt::format_to(std::back_inserter(out),
                 "\"otherData\":{{\"step_s\":{:.9g},\"analytic_step_s\":{:.9g},\"stages\":{},\"ops\":{}}},\n\"traceEvents\":[",
                 r.step_s, r.analytic.time.step_s, e.ranks(), e.ops().size());
  bool first = true;
  for (int32_t rank = 0; rank < e.ranks(); ++rank) {
    fmt::format_to(std::back_inserter(out), "{}\n{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"args\":{{\"name\":\"stage {}\"}}}}",
                   first ? "" : ",", rank, rank);
    first = false;
    fmt::format_to(std::back_inserter(out), ",\n{{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":{},\"args\":{{\"sort_index\":{}}}}}",
                   rank, rank);
  }
  for (size_t i = 0; i < e.streams().size(); ++i) {
    const StreamInfo& st = e.streams()[i];
    fmt::format_to(std::back_inserter(out),
                   ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":\"{}\"}}}}"
                   ",\n{{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"sort_index\":{}}}}}",
                   st.rank, i, to_string(st.kind), st.rank, i, static_cast<int>(st.kind));
  }
  append_ops(out, e);
  append_memory(out, e);
  out += "\n]}\n";
  return out;
}

}  // namespace

void write_trace(const SimResult& r, const std::string& path) {
  if (!r.engine) throw std::runtime_error("no simulated schedule to write");
  // The whole trace or the old file, never part of one (io/atomic_write.hpp).
  io::write_file_atomically(path, trace_text(r), "--trace");
}

}  // namespace shardplan::sim
