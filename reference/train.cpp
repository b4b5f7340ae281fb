// run_training: the reference training loop (reference.hpp) — micro-batches, ZeRO stage, measurement.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>

#include "reference/arena.hpp"
#include "reference/backend.hpp"
#include "reference/data.hpp"
#include "reference/model.hpp"
#include "reference/reference.hpp"
#include "reference/shard.hpp"

namespace shardplan::reference {

namespace {

using Clock = std::chrono::steady_clock;

struct Loop {
  Backend& k;
  const RunConfig& c;
  Dims d;
  const std::vector<UnitLayout>& units;
  Arena& arena;
  UnitStore& store;
  int64_t layers;
  Poll poll;
};

// One micro-batch: forward, loss, backward; unit gradients are reduced when `last` (no_sync before).
// tokens[N], targets[N]. Returns Σ −log p over the micro-batch's tokens.
double micro_forward_backward(Loop& x, const int32_t* tokens, const int32_t* targets, bool last, float scale) {
  const Dims& d = x.d;
  const int64_t N = d.tokens(), C = d.hidden, L = x.layers;
  const int H = static_cast<int>(L + 1);  // head unit
  const bool recompute = x.c.recompute == Recompute::full;
  UnitStore& st = x.store;
  const DType X = x.k.dtype();
  std::vector<Buf> resid(static_cast<std::size_t>(L + 1));  // [L+1][N,C] block inputs; resid[L] feeds the head
  std::vector<BlockActs> acts(static_cast<std::size_t>(L));  // saved per block (empty under full recompute)

  // ---- forward: gather unit u+1 while unit u computes, reshard u after its forward.
  {
    // [T,T] attention scores on CPU; nothing on the GPU (backend.hpp attention_work_floats)
    Buf work(x.arena, x.k.attention_work_floats(d.attention(), false), DType::fp32, Category::buffers);
    const EmbeddingView e = embedding_view(x.units[0], st.params_acquire(0), X);
    st.params_prefetch(1);
    resid[0] = Buf::of_backend_dtype(x.arena, N * C, Category::activations);
    x.k.embedding_forward(resid[0].x(), tokens, e.wte, e.wpe, d.batch, d.seq, C);
    st.params_release(0);
    for (int64_t l = 0; l < L; ++l) {
      const int u = static_cast<int>(l + 1);
      const BlockView w = block_view(x.units[static_cast<std::size_t>(u)], st.params_acquire(u), X);
      st.params_prefetch(u + 1);
      resid[static_cast<std::size_t>(l + 1)] = Buf::of_backend_dtype(x.arena, N * C, Category::activations);
      // Full recompute keeps only the block input; the block's tensors live just while it runs.
      BlockActs a = block_acts_allocate(x.arena, d);
      block_forward(x.k, resid[static_cast<std::size_t>(l + 1)].x(), resid[static_cast<std::size_t>(l)].x(), a, w,
                    work.f(), d, x.poll);
      if (!recompute) acts[static_cast<std::size_t>(l)] = std::move(a);
      st.params_release(u);
    }
  }

  // ---- head: final norm, logits, loss and their backward at once; BACKWARD_PRE prefetch of the last block.
  Buf d_resid = Buf::of_backend_dtype(x.arena, N * C, Category::activations);  // [N,C] ∂loss/∂(residual stream)
  double loss = 0;
  {
    const HeadView w = head_view(x.units[static_cast<std::size_t>(H)], st.params_acquire(H), X);
    const HeadView g = head_view(x.units[static_cast<std::size_t>(H)], st.grads_acquire(H), X);
    const floatX* lm = w.lm_head;
    floatX* d_lm = g.lm_head;
    if (d.tied) {  // the LM head is the embedding matrix: its unit is gathered again and receives gradients
      lm = embedding_view(x.units[0], st.params_acquire(0), X).wte;
      d_lm = embedding_view(x.units[0], st.grads_acquire(0), X).wte;
    }
    st.params_prefetch(static_cast<int>(L));
    loss = head_forward_backward(x.k, d_resid.x(), resid[static_cast<std::size_t>(L)].x(), targets, w, g, lm, d_lm,
                                 x.arena, d, scale);
    resid[static_cast<std::size_t>(L)].reset();
    st.params_release(H);
    if (d.tied) st.params_release(0);
    st.grads_done(H, last);
  }

  // ---- backward: blocks in reverse, prefetching the next one (the embedding needs no parameters).
  {
    BlockScratch s = block_scratch_allocate(x.arena, d);
    for (int64_t l = L - 1; l >= 0; --l) {
      const int u = static_cast<int>(l + 1);
      const BlockView w = block_view(x.units[static_cast<std::size_t>(u)], st.params_acquire(u), X);
      if (u - 1 >= 1) st.params_prefetch(u - 1);
      const BlockView g = block_view(x.units[static_cast<std::size_t>(u)], st.grads_acquire(u), X);
      BlockActs recomputed;
      const BlockActs* a = &acts[static_cast<std::size_t>(l)];
      if (recompute) {
        recomputed = block_acts_allocate(x.arena, d);
        Buf out = Buf::of_backend_dtype(x.arena, N * C, Category::activations);  // [N,C] the recomputed output, unused
        block_forward(x.k, out.x(), resid[static_cast<std::size_t>(l)].x(), recomputed, w, s.work.f(), d, x.poll);
        a = &recomputed;
      }
      block_backward(x.k, d_resid.x(), resid[static_cast<std::size_t>(l)].x(), *a, w, g, s, d, x.poll);
      acts[static_cast<std::size_t>(l)] = BlockActs();
      recomputed = BlockActs();
      resid[static_cast<std::size_t>(l)].reset();
      st.params_release(u);
      st.grads_done(u, last);
    }
  }
  const EmbeddingView ge = embedding_view(x.units[0], st.grads_acquire(0), X);
  x.k.embedding_backward(ge.wte, ge.wpe, d_resid.x(), tokens, d.batch, d.seq, C);
  st.grads_done(0, last);
  return loss;
}

// Step statistics exchanged between ranks, per rank: step_s, comm_s, peak, params, grads, master, optimizer,
// activations, logits, buffers, rss, loss_sum.
constexpr int kStats = 12;

// [count] int32 in backend memory, outside the arena (the token ids of one micro-batch: input data, which the
// planner does not count).
class BackendInts {
 public:
  BackendInts(Backend& k, int64_t count)
      : k_(k), data_(static_cast<int32_t*>(k.memory_allocate(static_cast<std::size_t>(count) * sizeof(int32_t)))) {}
  ~BackendInts() { k_.memory_release(data_); }
  BackendInts(const BackendInts&) = delete;
  BackendInts& operator=(const BackendInts&) = delete;
  int32_t* data() const { return data_; }

 private:
  Backend& k_;
  int32_t* data_;
};

}  // namespace

int64_t bytes_needed(const RunConfig& c, int world_size) {
  const int64_t seq = c.seq ? c.seq : c.model.seq;
  const Dims d = dims_make(c.model, c.micro_batch, seq);
  const std::vector<UnitLayout> units = layout_make(d, c.model.layers, world_size);
  int64_t P = 0, unit_max = 0;
  for (const auto& u : units) P += u.padded, unit_max = std::max(unit_max, u.padded);
  const int64_t W = world_size, L = c.model.layers, N = d.tokens(), C = d.hidden;
  const int64_t X = dtype_bytes(run_dtype(c.precision));  // bytes of a tensor element (fp32 4, bf16 2)
  const AttentionShape s = d.attention();
  const int64_t sharded = c.zero >= 1 ? P / W : P;
  const int64_t states = X * (c.zero == 3 ? P / W + 3 * unit_max : P)                  // params (+ gathered units)
                         + X * (c.zero >= 2 ? P / W + (c.grad_accum > 1 ? P : 2 * unit_max) : P)  // grads
                         + 4 * (run_keeps_master(c.precision) ? sharded : 0)       // fp32 master
                         + 4 * 2 * sharded;                                         // AdamW m, v (fp32)
  // BlockActs per token (model.hpp): tensors, then fp32 statistics; the backward scratch.
  const int64_t block = 3 * C + s.qkv_width() + s.q_width() + d.fc1_width + d.ffn, block_stats = s.heads + 4;
  const int64_t scratch = C + d.ffn + d.fc1_width + s.q_width() + s.qkv_width();
  const int64_t kept = c.recompute == Recompute::full ? 1 : L;
  const int64_t activations = X * N * ((L + 2) * C + kept * block + scratch) + 4 * (N * kept * block_stats + 3 * seq * seq);
  const int64_t logits = X * N * d.padded_vocab;
  return states + activations + logits;
}

// The steps of one run, on a store and arena owned by run_training.
RunResult train_steps(const RunConfig& c, comm::Communicator& world, const Dims& d,
                      const std::vector<UnitLayout>& units, Arena& arena, UnitStore& store,
                      const std::function<void(const StepRecord&)>& on_step) {
  const int W = world.size(), rank = world.rank();
  const int64_t seq = d.seq;
  store.params_init(c.seed, c.model.layers);
  Backend& k = arena.backend();
  Loop loop{k, c, d, units, arena, store, c.model.layers, [&store] { store.poll(); }};
  TokenSource data(c.data, c.corpus_path, seq, c.model.vocab,
                   c.seed);

  const int64_t N = d.tokens();
  const int64_t per_rank = c.grad_accum * c.micro_batch;  // sequences per rank per step
  const int64_t global = per_rank * W;                    // sequences per step
  const float scale = static_cast<float>(1.0 / static_cast<double>(global * seq));
  std::vector<int32_t> tokens(static_cast<std::size_t>(N)), targets(static_cast<std::size_t>(N));  // [B,T] each
  BackendInts tokens_k(k, N), targets_k(k, N);  // [B,T] each, in backend memory

  RunResult result;
  result.world = W;
  result.params_total = layout_params(units);
  result.params_per_rank = store.params_stored();
  const int64_t total_steps = c.warmup_steps + c.steps;
  for (int64_t step = 0; step < total_steps; ++step) {
    store.barrier();
    arena.reset_peak();
    store.comm_wait_s = 0;
    const auto t0 = Clock::now();
    double loss_sum = 0;
    for (int64_t m = 0; m < c.grad_accum; ++m) {
      // This rank's slice of the step's global batch: sequences [rank·per_rank, (rank+1)·per_rank).
      for (int64_t b = 0; b < c.micro_batch; ++b) {
        const int64_t g = step * global + rank * per_rank + m * c.micro_batch + b;
        data.sequence_read(g, tokens.data() + b * seq, targets.data() + b * seq);
      }
      k.memory_upload(tokens_k.data(), tokens.data(), tokens.size() * sizeof(int32_t));
      k.memory_upload(targets_k.data(), targets.data(), targets.size() * sizeof(int32_t));
      loss_sum += micro_forward_backward(loop, tokens_k.data(), targets_k.data(), m + 1 == c.grad_accum, scale);
    }
    store.grads_finish();
    const AdamWParams adam{static_cast<float>(c.lr), static_cast<float>(c.beta1), static_cast<float>(c.beta2),
                           static_cast<float>(c.eps), static_cast<float>(c.weight_decay), step + 1, 1.0f};
    const double grad_norm = store.optimizer_step(adam, c.clip_norm);
    k.synchronize();  // the optimizer's kernels belong to this step
    const double step_s = std::chrono::duration<double>(Clock::now() - t0).count();

    const MemoryByComponent& p = arena.at_peak();
    const std::vector<double> mine = {step_s,
                                 store.comm_wait_s,
                                 static_cast<double>(arena.peak()),
                                 static_cast<double>(p.params),
                                 static_cast<double>(p.grads),
                                 static_cast<double>(p.master),
                                 static_cast<double>(p.optimizer),
                                 static_cast<double>(p.activations),
                                 static_cast<double>(p.logits),
                                 static_cast<double>(p.buffers),
                                 static_cast<double>(k.device_memory_used()),
                                 loss_sum};
    const std::vector<double> all = store.stats_gather(mine);
    StepRecord r;
    r.step = step;
    r.warmup = step < c.warmup_steps;
    r.grad_norm = grad_norm;
    double loss_total = 0;
    int peak_rank = 0;
    for (int q = 0; q < W; ++q) {
      const double* s = all.data() + q * kStats;
      r.step_s = std::max(r.step_s, s[0]);
      r.comm_wait_s = std::max(r.comm_wait_s, s[1]);
      r.compute_s = std::max(r.compute_s, s[0] - s[1]);
      if (s[2] > all[static_cast<std::size_t>(peak_rank * kStats + 2)]) peak_rank = q;
      r.rss_bytes = std::max(r.rss_bytes, static_cast<int64_t>(s[10]));
      loss_total += s[11];
    }
    const double* s = all.data() + peak_rank * kStats;
    r.peak_bytes = static_cast<int64_t>(s[2]);
    r.at_peak = MemoryByComponent{static_cast<int64_t>(s[3]), static_cast<int64_t>(s[4]), static_cast<int64_t>(s[5]),
                                  static_cast<int64_t>(s[6]), static_cast<int64_t>(s[7]), static_cast<int64_t>(s[8]),
                                  static_cast<int64_t>(s[9])};
    r.loss = loss_total / static_cast<double>(global * seq);
    result.steps.push_back(r);
    if (on_step) on_step(r);
    if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm))
      throw std::runtime_error(fmt::format("the loss became {} at step {} (grad norm {})", r.loss, step, r.grad_norm));
  }

  std::vector<double> measured;
  for (const StepRecord& r : result.steps) {
    if (r.warmup) continue;
    measured.push_back(r.step_s);
    if (r.peak_bytes > result.peak_bytes) {
      result.peak_bytes = r.peak_bytes;
      result.at_peak = r.at_peak;
    }
  }
  std::sort(measured.begin(), measured.end());
  const std::size_t n = measured.size();
  result.median_step_s = n % 2 ? measured[n / 2] : 0.5 * (measured[n / 2 - 1] + measured[n / 2]);
  result.between_steps = arena.live();
  if (c.keep_params) result.final_params = store.params_full_read();
  return result;
}

RunResult run_training(const RunConfig& c, comm::Communicator& world,
                       const std::function<void(const StepRecord&)>& on_step) {
  const std::string problem = check_config(c, world.size());
  if (!problem.empty()) throw std::invalid_argument(problem);
  const int W = world.size();
  // The backend's memory must be what the communicator moves: host memory over MPI, device memory over NCCL.
  const std::string expected_comm = c.backend == "cuda" ? "nccl" : "mpi";
  if (world.backend() != expected_comm)
    throw std::invalid_argument(fmt::format("the {} backend trains over {} but the communicator is {}", c.backend,
                                            expected_comm, world.backend()));
  // On the heap, and abandoned (not destroyed) when a failure leaves communication in flight: see UnitStore.
  auto backend_owned = make_backend(c.backend, run_dtype(c.precision));
  Backend& backend = *backend_owned;
  const int64_t need = bytes_needed(c, W), available = backend.device_memory_available();
  if (available > 0 && need > available)
    throw std::runtime_error(fmt::format(
        "the reference run needs about {:.2f} GiB per rank but the {} has {:.2f} GiB available: use more "
        "ranks, a higher --zero, --recompute full, a smaller --micro-batch or --seq, or a smaller model",
        static_cast<double>(need) / (1 << 30), backend.description(), static_cast<double>(available) / (1 << 30)));
  const int64_t seq = c.seq ? c.seq : c.model.seq;
  Dims d = dims_make(c.model, c.micro_batch, seq);
  std::vector<UnitLayout> units = layout_make(d, c.model.layers, W);
  const int64_t runtime_bytes = backend.name() == std::string("cuda") ? backend.device_memory_used() : 0;
  auto arena_owned = std::make_unique<Arena>(backend);
  Arena& arena = *arena_owned;
  auto store_owned =
      std::make_unique<UnitStore>(units, c.zero, run_keeps_master(c.precision), world, arena, c.comm_timeout_s);
  UnitStore& store = *store_owned;
  try {
    RunResult r = train_steps(c, world, d, units, arena, store, on_step);
    for (const double b : store.stats_gather({static_cast<double>(runtime_bytes)}))
      r.runtime_bytes = std::max(r.runtime_bytes, static_cast<int64_t>(b));
    return r;
  } catch (...) {
    if (store.in_flight()) {
      (void)store_owned.release();  // intentionally leaked: MPI may still complete into these buffers
      (void)arena_owned.release();
      (void)backend_owned.release();
    }
    throw;
  }
}

}  // namespace shardplan::reference
