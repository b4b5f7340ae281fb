#include "planner/context_parallel.hpp"

#include <algorithm>

#include "planner/attention_linears.hpp"
#include "planner/comm_cost.hpp"
#include "planner/groups.hpp"
#include "planner/precision.hpp"
#include "planner/step_time.hpp"
#include "planner/partial_recompute.hpp"

namespace shardplan {

CpComm cp_comm(Framework f) { return f == Framework::megatron ? CpComm::p2p : CpComm::all_gather; }

const char* to_string(CpComm c) { return c == CpComm::p2p ? "p2p ring" : "all-gather"; }

bool cp_output_copied(const Strategy& s) { return s.cp > 1 && s.flash_attn && cp_comm(s.framework) == CpComm::all_gather; }

double cp_local_kv_bytes(const ModelSpec& m, const Strategy& s) {
  // What each rank's attention kernel reads: its K/V heads, or one per query head where the model repeats them
  // (attention_linears.hpp attention_kv_heads_per_rank).
  const double kv_heads = attention_kv_heads_per_rank(m, s);
  const double a = static_cast<double>(dtype_bytes(precision_compute_dtype(s.precision)));
  return 2 * static_cast<double>(s.micro_batch * seq_per_rank(s)) * kv_heads * static_cast<double>(model_head_dim(m)) * a;
}

double cp_kv_buffer_bytes(const ModelSpec& m, const Strategy& s) {
  if (s.cp <= 1) return 0;
  const double kv = cp_local_kv_bytes(m, s);
  if (cp_comm(s.framework) == CpComm::p2p) return 4 * kv;
  const double a = static_cast<double>(dtype_bytes(precision_compute_dtype(s.precision)));
  const double dq_fp32 = 4 * static_cast<double>(s.micro_batch * seq_per_rank(s) * (model_q_width(m) / s.tp));
  return (static_cast<double>(s.cp) + 2) * kv + 2 * kv * 4 / a + dq_fp32;
}

CpMergeBytes cp_merge_bytes(const ModelSpec& m, const Strategy& s) {
  CpMergeBytes out;
  if (s.cp <= 1 || cp_comm(s.framework) != CpComm::all_gather) return out;
  const double a = static_cast<double>(dtype_bytes(precision_compute_dtype(s.precision)));
  const double n = static_cast<double>(s.cp);
  const double tokens = static_cast<double>(s.micro_batch * seq_per_rank(s));
  const double q = tokens * static_cast<double>(model_q_width(m) / s.tp);  // output (and dQ) elements
  const double kv = cp_local_kv_bytes(m, s) / a;                           // K and V elements
  // A merge step: upcast the block's output (a + 4 B), out − block_out (12), × sigmoid(Δlse) (8), out − … (12). Half
  // of the steps after the first update half of the rows, then copy the whole tensor (8): 0.75·(a + 36) + 4 a step.
  const double merge_step = 0.75 * (a + 36) + 4;
  out.fwd = q * ((a + 4) + (n - 1) * merge_step + (4 + a)) + (n - 1) * 2 * a * kv;
  // An accumulation step: read the fp32 sum and the block's gradient, write the sum (8 + a), with the same partial
  // copies (0.75·(8 + a) + 4); fp32 zeros first (4), casts back last (4 + a), dK,dV concatenated every step (8).
  const double accumulate_step = 0.75 * (8 + a) + 4;
  out.bwd = 4 * (q + kv) + n * (accumulate_step * (q + kv) + 8 * kv) + (4 + a) * (q + kv) + (n - 1) * 2 * a * kv;
  return out;
}

double CpRing::exposed() const {
  if (steps < 2) return tail_s + slowdown_s;
  return std::max(0.0, first_s - slice_s) + static_cast<double>(steps - 2) * std::max(0.0, step_s - slice_s) + tail_s +
         slowdown_s;
}

namespace {
// The part of a ring's traffic the slices hide, Σ min(comm, slice): it costs overlap_compute_slowdown (step_time.hpp)
// of itself.
double hidden_s(const CpRing& r) {
  if (r.steps < 2) return 0;
  return std::min(r.first_s, r.slice_s) + static_cast<double>(r.steps - 2) * std::min(r.step_s, r.slice_s);
}
}  // namespace

CpRings cp_rings(const ModelSpec& m, const Strategy& s, const ClusterSpec& c, double attention_fwd_s,
                 double attention_bwd_s) {
  CpRings r;
  if (s.cp <= 1) return r;
  const double kv = cp_local_kv_bytes(m, s);
  const double a = static_cast<double>(dtype_bytes(precision_compute_dtype(s.precision)));
  const GroupLayout hop = cp_ring_link(s, c);
  auto p2p = [&](double bytes) { return collective_time_s(c, Collective::send_recv, bytes, hop); };
  r.fwd.steps = r.bwd.steps = s.cp;
  r.fwd.slice_s = attention_fwd_s / static_cast<double>(s.cp);
  r.bwd.slice_s = attention_bwd_s / static_cast<double>(s.cp);
  if (cp_comm(s.framework) == CpComm::p2p) {
    // Forward: cp − 1 hops of K,V (2 · seq/cp · kv_width · a per micro-sequence); backward: K,V and dK,dV together
    // each hop, and dK,dV once more to return to their owner.
    r.fwd.first_s = r.fwd.step_s = p2p(kv);
    r.bwd.first_s = r.bwd.step_s = p2p(2 * kv);
    r.bwd.tail_s = p2p(kv);
  } else {
    // One all-gather of every rank's K,V (the full sequence's); backward gathers again and rotates fp32 dK,dV.
    const double gather = collective_time_s(c, Collective::all_gather, static_cast<double>(s.cp) * kv, cp_group(s, c));
    r.fwd.first_s = gather;
    r.bwd.first_s = gather;
    r.bwd.step_s = r.bwd.tail_s = p2p(kv * 4 / a);
  }
  const double k = overlap_compute_slowdown(c.gpu);
  r.fwd.slowdown_s = k * hidden_s(r.fwd);
  r.bwd.slowdown_s = k * hidden_s(r.bwd);
  // Full recomputation runs the block's forward, its ring included, again inside the backward (per block: the
  // recomputed share of them, partial_recompute.hpp).
  if (s.recompute == Recompute::full) r.bwd.tail_s += recomputed_block_share(m, s) * r.fwd.exposed();
  return r;
}

}  // namespace shardplan
