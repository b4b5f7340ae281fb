#pragma once
// Discrete-event engine for one training step: ops on in-order streams (CUDA stream semantics: an op starts when
// the op before it on its stream has finished and every op it depends on has finished), streams grouped by rank
// (one simulated rank class per pipeline stage) and by the resource they use. Ops on one communication link share
// it (processor sharing: n active transfers each progress at 1/n); the compute stream of a rank runs slower by a
// factor while a data-parallel transfer of that rank is active (step_time.hpp kOverlapComputeSlowdown). Every op
// may allocate bytes when it starts and free bytes when it ends; the engine keeps each rank's peak and what is
// live at it.
#include <cstdint>
#include <string>
#include <vector>

namespace shardplan::sim {

// What a stream carries. The resource follows from it (compute, or one link per kind of process group).
// ep: the expert-parallel all-to-alls (issue 17), on their own stream and link; cp: the context-parallel ring.
enum class StreamKind : uint8_t { compute, tp, pp, dp_gather, dp_reduce, dp_bucket, ep, cp, count };
const char* to_string(StreamKind k);

// Resources of one rank: compute, and the links of its process groups. FSDP all-gathers, reduce-scatters and DDP
// buckets share the data-parallel link (their costs in step_time.cpp add up on it).
enum class Resource : uint8_t { compute, tp_link, pp_link, dp_link, ep_link, cp_link, count };
Resource resource_of(StreamKind k);

// What an op does (for traces and for the breakdown).
enum class OpKind : uint8_t {
  forward, backward, embed_fwd, embed_bwd, head_fwd, head_bwd, tp_fwd, tp_bwd,
  send_act, send_grad, gather_fwd, gather_bwd, gather_root, reduce_unit, reduce_root, reduce_bucket,
  grad_norm, optimizer, param_gather, backward_weight,
  release,  // zero-duration: frees (or allocates) what waits for two streams (a reduce-scatter input, a gradient shard)
  ep_fwd, ep_bwd,  // a block's expert-parallel all-to-alls (dispatch + combine), forward / backward
  cp_fwd, cp_bwd,  // a context-parallel ring transfer (K/V forward; K/V and dK/dV backward)
  head_regather,   // FSDP2's [final norm, LM head] unit copied out of its all-gather again for the norm's backward
  count
};
const char* to_string(OpKind k);

// Memory by what it holds; each maps to a component of CONTRACT.md's memory.components.
enum class MemKind : uint8_t {
  params, grads, master, optimizer, runtime,
  activations, boundary_activations, recompute_working_set, logits,
  gathered_block, gathered_root, unit_grads, root_grads, unsharded_grads,
  reduce_buffers, pipeline_buffers, sp_buffer, optimizer_temps,
  reduce_inputs,    // reduce-scatter inputs in the reduce dtype (FSDP2 foreach_reduce)
  backward_temps,   // a block's backward temporaries (and its recomputed working set)
  model_buffers,    // module buffers (RoPE caches)
  gathered_weights, // FSDP moments (planner/memory_moments.hpp): gathered compute-dtype units, counted as params
  working_grads,    // ... and the bf16 unsharded gradients of the units in backward, counted as grads
  cached_free,      // freed blocks the caching allocator keeps reserved (counted as fragmentation, not allocated)
  ep_buffers,       // the expert-parallel all-to-all receive buffer (planner/memory.cpp add_parallel_buffers)
  cp_buffers,       // context-parallel K/V ring buffers of one layer's attention (planner/context_parallel.hpp)
  fp8_weights,      // Transformer Engine's FP8 weight casts kept for the step (planner/fp8.hpp)
  count
};
const char* to_string(MemKind k);            // what it is, for people
const char* component_of(MemKind k);         // params | grads | ... | buffers | runtime

struct OpInfo {
  int32_t stream = 0;
  OpKind kind = OpKind::forward;
  int32_t micro = -1;   // micro-batch, -1 for per-step ops
  int32_t chunk = -1;   // model chunk (interleaved schedule)
  int32_t layer = -1;   // block index within the stage (all chunks), -1 if none
  double work = 0;      // seconds at full rate
};

struct StreamInfo {
  int32_t rank = 0;
  StreamKind kind = StreamKind::compute;
};

struct RankMemory {
  double peak = 0;          // allocated bytes at the peak (runtime included)
  double peak_time = 0;
  int32_t peak_op = -1;     // the op whose allocation reached the peak
  double live[static_cast<int>(MemKind::count)] = {};   // bytes live at the peak, by kind
  int32_t count[static_cast<int>(MemKind::count)] = {};  // allocations live at the peak, by kind
};

struct MemorySample {
  double t = 0;
  double bytes = 0;
};

class Engine {
 public:
  // Compute of a rank slows by this fraction while one of its data-parallel transfers runs.
  explicit Engine(double overlap_slowdown) : slowdown_(overlap_slowdown) {}

  int32_t add_stream(int32_t rank, StreamKind kind);
  // Ops are queued on their stream in the order they are added.
  int32_t add_op(int32_t stream, OpKind kind, double seconds, int32_t micro = -1, int32_t chunk = -1,
                 int32_t layer = -1);
  void add_dep(int32_t op, int32_t depends_on);  // ignored when depends_on < 0
  void alloc_at_start(int32_t op, MemKind kind, double bytes);
  void free_at_end(int32_t op, MemKind kind, double bytes);
  // Frees at the op's start, before its allocations count: what it allocates takes the place of what it frees.
  void free_at_start(int32_t op, MemKind kind, double bytes);
  void alloc_static(int32_t rank, MemKind kind, double bytes);  // alive for the whole step

  // Plays the step out. Throws std::runtime_error when ops are left that can never start (a schedule error).
  void run(bool record_memory_timeline);

  int32_t ranks() const { return ranks_; }
  const std::vector<OpInfo>& ops() const { return ops_; }
  const std::vector<StreamInfo>& streams() const { return streams_; }
  double start(int32_t op) const { return start_[static_cast<size_t>(op)]; }
  double end(int32_t op) const { return end_[static_cast<size_t>(op)]; }
  double makespan() const { return makespan_; }
  const RankMemory& memory(int32_t rank) const { return memory_[static_cast<size_t>(rank)]; }
  const std::vector<MemorySample>& memory_timeline(int32_t rank) const { return timeline_[static_cast<size_t>(rank)]; }

 private:
  struct MemEvent {
    int32_t op;
    MemKind kind;
    bool at_end;
    double bytes;
  };
  struct Active {
    double remaining = 0, rate = 1, since = 0;
    uint32_t version = 0;
  };
  void start_op(int32_t op, double now);
  void finish_op(int32_t op, double now);
  void try_start(int32_t stream, double now);
  void set_rate(int32_t op, double now, double rate);
  void relink(int32_t rank, Resource r, double now);  // rates of a resource after its active set changed
  void apply_memory(int32_t op, bool at_end, double now);
  double compute_rate(int32_t rank) const;
  size_t slot(int32_t rank, Resource r) const {
    return static_cast<size_t>(rank) * static_cast<size_t>(Resource::count) + static_cast<size_t>(r);
  }

  double slowdown_;
  int32_t ranks_ = 0;
  std::vector<StreamInfo> streams_;
  std::vector<std::vector<int32_t>> stream_ops_;  // [stream][i] ops in issue order
  std::vector<OpInfo> ops_;
  std::vector<std::pair<int32_t, int32_t>> edges_;  // (op, dependency)
  std::vector<MemEvent> mem_events_;
  std::vector<std::pair<int32_t, std::pair<MemKind, double>>> static_allocs_;

  // Run state.
  std::vector<double> start_, end_;
  std::vector<int32_t> pending_;             // [op] unfinished dependencies
  std::vector<int32_t> dependents_begin_, dependents_;  // CSR [op] → ops waiting on it
  std::vector<int32_t> mem_begin_;           // CSR [op] → mem_events_ (sorted by op)
  std::vector<size_t> head_;                 // [stream] next op index
  std::vector<uint8_t> busy_;                // [stream]
  std::vector<Active> active_;               // [op]
  std::vector<std::vector<int32_t>> running_;  // [rank·resource] active ops
  std::vector<double> current_;              // [rank] allocated bytes now
  std::vector<std::vector<double>> live_;    // [rank][kind]
  std::vector<std::vector<int32_t>> live_count_;
  std::vector<RankMemory> memory_;
  std::vector<std::vector<MemorySample>> timeline_;
  bool record_timeline_ = false;
  double makespan_ = 0;
  struct Event {
    double t;
    uint64_t seq;
    int32_t op;
    uint32_t version;
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  std::vector<Event> heap_;
  uint64_t seq_ = 0;
};

}  // namespace shardplan::sim
