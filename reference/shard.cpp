// Unit storage and the ZeRO stages (shard.hpp).
#include "reference/shard.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "reference/bf16.hpp"

namespace shardplan::reference {

namespace {

using Clock = std::chrono::steady_clock;

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Standard normal draws by Box–Muller from SplitMix64 (portable; std::normal_distribution is not).
double normal_draw(uint64_t& state) {
  state = splitmix64(state);
  const double u1 = (static_cast<double>(state >> 11) + 0.5) * 0x1.0p-53;
  state = splitmix64(state);
  const double u2 = static_cast<double>(state >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

std::size_t float_bytes(int64_t n) { return static_cast<std::size_t>(n) * sizeof(float); }

// Host values as the backend's dtype: fp32 as they are, or rounded to bf16.
std::vector<char> host_values_as(const float* values, int64_t n, DType t) {
  std::vector<char> out(static_cast<std::size_t>(n * dtype_bytes(t)));
  if (t == DType::fp32) {
    std::memcpy(out.data(), values, out.size());
  } else {
    auto* b = reinterpret_cast<bf16*>(out.data());
    for (int64_t i = 0; i < n; ++i) b[i] = bf16_from_float(values[i]);
  }
  return out;
}

// Widens n elements of dtype t (host memory) to fp32.
void host_values_widen(float* out, const char* in, int64_t n, DType t) {
  if (t == DType::fp32) {
    std::memcpy(out, in, float_bytes(n));
    return;
  }
  const auto* b = reinterpret_cast<const bf16*>(in);
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(b[i]);
}

}  // namespace

UnitStore::UnitStore(const std::vector<UnitLayout>& units, int zero, bool keep_master, comm::Communicator& world,
                     Arena& arena, double timeout_s)
    : units_(units), zero_(zero), keep_master_(keep_master), world_(world), arena_(arena), k_(arena.backend()),
      dtype_(k_.dtype()), comm_dtype_(dtype_ == DType::bf16 ? comm::DataType::bf16 : comm::DataType::fp32),
      timeout_s_(timeout_s), rank_(world.rank()), size_(world.size()), state_(units.size()) {
  for (std::size_t u = 0; u < units.size(); ++u) {
    const int64_t padded = units[u].padded, shard = units[u].shard();
    UnitState& s = state_[u];
    if (zero_ <= 2) s.full = Buf(arena_, padded, dtype_, Category::params, true);
    if (zero_ == 3) s.shard = Buf(arena_, shard, dtype_, Category::params, true);
    if (zero_ <= 1) s.gfull = Buf(arena_, padded, dtype_, Category::grads, true);
    if (zero_ >= 2) s.gshard = Buf(arena_, shard, dtype_, Category::grads, true);
    // ZeRO §5.1: stage 1 shards the optimizer states, the master copy among them.
    const int64_t moments = zero_ == 0 ? padded : shard;
    s.m = Buf(arena_, moments, DType::fp32, Category::optimizer, true);
    s.v = Buf(arena_, moments, DType::fp32, Category::optimizer, true);
    if (keep_master_) s.master = Buf(arena_, moments, DType::fp32, Category::master, true);
  }
}

std::size_t UnitStore::bytes_of(int64_t elements) const {
  return static_cast<std::size_t>(elements * dtype_bytes(dtype_));
}

UnitStore::~UnitStore() {
  if (exchange_) k_.memory_release(exchange_);
}

void UnitStore::params_init(uint64_t seed, int64_t layers) {
  const double std_dev = 0.02, residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(layers));
  for (std::size_t u = 0; u < units_.size(); ++u) {
    const UnitLayout& L = units_[u];
    std::vector<float> values(static_cast<std::size_t>(L.padded), 0.0f);  // [padded] padding stays 0
    for (const TensorSlot& t : L.tensors) {
      uint64_t state = splitmix64(seed ^ splitmix64(u * 1000003ull + static_cast<uint64_t>(t.offset)));
      for (int64_t i = 0; i < t.numel; ++i) {
        float& x = values[static_cast<std::size_t>(t.offset + i)];
        switch (t.init) {
          case InitKind::normal: x = static_cast<float>(std_dev * normal_draw(state)); break;
          case InitKind::normal_residual: x = static_cast<float>(residual_std * normal_draw(state)); break;
          case InitKind::ones: x = 1.0f; break;
          case InitKind::zeros: x = 0.0f; break;
        }
      }
    }
    UnitState& s = state_[u];
    const int64_t off = rank_ * L.shard();
    // The parameters are the master values rounded to the backend's dtype (amp-bf16: p = bf16(master) always).
    const std::vector<char> stored = host_values_as(values.data(), L.padded, dtype_);
    if (zero_ <= 2) k_.memory_upload(s.full.data(), stored.data(), bytes_of(L.padded));
    if (zero_ == 3) k_.memory_upload(s.shard.data(), stored.data() + bytes_of(off), bytes_of(L.shard()));
    if (s.master) {
      const int64_t first = zero_ == 0 ? 0 : off;
      k_.memory_upload(s.master.data(), values.data() + first, float_bytes(s.master.size()));
    }
  }
}

void UnitStore::wait_timed(comm::Handle& h) {
  const auto t0 = Clock::now();
  h.wait(std::chrono::duration<double>(timeout_s_));
  comm_wait_s += std::chrono::duration<double>(Clock::now() - t0).count();
}

void UnitStore::wait_held(comm::HandlePtr h) {
  held_.push_back(std::move(h));
  wait_timed(*held_.back());
  held_.pop_back();
}

bool UnitStore::in_flight() const {
  if (!reductions_.empty() || !held_.empty()) return true;
  for (const auto& s : state_)
    if (s.gather) return true;
  return false;
}

void UnitStore::barrier() {
  k_.synchronize();
  wait_held(world_.barrier());
}

// A collective runs on the communicator's own stream (NCCL): whatever the backend's kernels still write into or
// read from its buffers — or from memory the caching allocator just handed out again — must be done first.
void UnitStore::collective_prepare() { k_.synchronize(); }

float* UnitStore::exchange_buffer(std::size_t floats) {
  if (floats > exchange_floats_) {
    if (exchange_) k_.memory_release(exchange_);
    exchange_ = static_cast<float*>(k_.memory_allocate(floats * sizeof(float)));
    exchange_floats_ = floats;
  }
  return exchange_;
}

std::vector<double> UnitStore::stats_gather(const std::vector<double>& mine) {
  // Doubles travel as pairs of fp32 words: all_gather copies bits. In backend memory (NCCL reads device memory):
  // [mine.size()] doubles sent, then [size · mine.size()] received.
  const std::size_t n = mine.size(), words = 2 * n;
  float* send = exchange_buffer(words * (1 + static_cast<std::size_t>(size_)));
  float* recv = send + words;
  k_.memory_upload(send, mine.data(), n * sizeof(double));
  collective_prepare();
  wait_held(world_.all_gather(send, recv, words, comm::DataType::fp32));
  std::vector<double> all(n * static_cast<std::size_t>(size_));
  k_.memory_download(all.data(), recv, all.size() * sizeof(double));
  return all;
}

void UnitStore::poll() {
  for (auto& s : state_)
    if (s.gather) s.gather->test();
  for (auto& p : reductions_) p.handle->test();
}

void UnitStore::params_prefetch(int u) {
  if (zero_ != 3 || u < 0 || u >= static_cast<int>(units_.size())) return;
  UnitState& s = state_[static_cast<std::size_t>(u)];
  if (s.full) return;  // gathered or in flight
  // A gathered unit is working set, not the rank's parameters: `buffers`, as the planner counts it (memory.cpp).
  s.full = Buf(arena_, units_[static_cast<std::size_t>(u)].padded, dtype_, Category::buffers);
  collective_prepare();
  s.gather = world_.all_gather(s.shard.data(), s.full.data(),
                               static_cast<std::size_t>(units_[static_cast<std::size_t>(u)].shard()), comm_dtype_);
}

floatX* UnitStore::params_acquire(int u) {
  UnitState& s = state_[static_cast<std::size_t>(u)];
  if (zero_ == 3) {
    params_prefetch(u);
    if (s.gather) {
      wait_timed(*s.gather);
      s.gather.reset();
    }
  }
  return s.full.x();
}

void UnitStore::params_release(int u) {
  if (zero_ != 3) return;
  UnitState& s = state_[static_cast<std::size_t>(u)];
  if (s.gather) {
    wait_timed(*s.gather);
    s.gather.reset();
  }
  s.full.reset();
}

floatX* UnitStore::grads_acquire(int u) {
  UnitState& s = state_[static_cast<std::size_t>(u)];
  // ZeRO-2/3: a unit's unsharded gradients live until its reduce-scatter is done: working set, `buffers`.
  if (!s.gfull) s.gfull = Buf(arena_, units_[static_cast<std::size_t>(u)].padded, dtype_, Category::buffers, true);
  return s.gfull.x();
}

void UnitStore::reduction_retire() {
  Pending& p = reductions_.front();
  wait_timed(*p.handle);
  if (zero_ >= 2) state_[static_cast<std::size_t>(p.unit)].gfull.reset();  // only the shard is kept
  reductions_.pop_front();
}

void UnitStore::grads_done(int u, bool reduce) {
  if (!reduce) return;  // no_sync: keep accumulating unsharded
  UnitState& s = state_[static_cast<std::size_t>(u)];
  const UnitLayout& L = units_[static_cast<std::size_t>(u)];
  collective_prepare();  // the backward kernels that wrote these gradients
  if (zero_ <= 1) {
    // DDP bucket = the unit's flat gradient, all-reduced in place (no bucket copy).
    reductions_.push_back({u, world_.all_reduce(s.gfull.data(), s.gfull.data(), static_cast<std::size_t>(L.padded),
                                                comm_dtype_)});
    return;
  }
  reductions_.push_back({u, world_.reduce_scatter(s.gfull.data(), s.gshard.data(),
                                                  static_cast<std::size_t>(L.shard()), comm_dtype_)});
  // At most one reduce-scatter in flight: the previous unit's unsharded grads are freed before this unit's
  // backward is followed by the next one's (bounds unsharded grads to two units, as FSDP does).
  while (reductions_.size() > 1) reduction_retire();
}

void UnitStore::grads_finish() {
  while (!reductions_.empty()) reduction_retire();
}

double UnitStore::optimizer_step(AdamWParams a, double clip_norm) {
  // Squared norm of the reduced gradient: whole model under DDP (identical on every rank), otherwise the rank's
  // shard, summed over ranks with one all-reduce.
  double sq = 0;
  for (std::size_t u = 0; u < units_.size(); ++u) {
    const UnitState& s = state_[u];
    const int64_t shard = units_[u].shard();
    if (zero_ == 0) sq += k_.sum_squares(s.gfull.x(), units_[u].padded);
    if (zero_ == 1) sq += k_.sum_squares(x_offset(s.gfull.x(), rank_ * shard, dtype_), shard);
    if (zero_ >= 2) sq += k_.sum_squares(s.gshard.x(), shard);
  }
  if (zero_ >= 1 && size_ > 1) {
    // Two floats carry the double's high and low parts, so the sum keeps ~double precision.
    float parts[2];  // [2] high and low parts of the squared norm
    parts[0] = static_cast<float>(sq);
    parts[1] = static_cast<float>(sq - static_cast<double>(parts[0]));
    float* device_parts = exchange_buffer(2);
    k_.memory_upload(device_parts, parts, sizeof parts);
    collective_prepare();
    wait_held(world_.all_reduce(device_parts, device_parts, 2, comm::DataType::fp32));
    k_.memory_download(parts, device_parts, sizeof parts);
    sq = static_cast<double>(parts[0]) + static_cast<double>(parts[1]);
  }
  const double norm = std::sqrt(sq);
  // Global-norm clipping (Pascanu et al. 2013; torch.nn.utils.clip_grad_norm_: coefficient clip/(norm + 1e-6)).
  a.grad_scale = clip_norm > 0 && norm > clip_norm ? static_cast<float>(clip_norm / (norm + 1e-6)) : 1.0f;

  sends_.clear();
  sends_.reserve(units_.size());  // no reallocation while gathers read from them
  for (std::size_t u = 0; u < units_.size(); ++u) {
    UnitState& s = state_[u];
    const int64_t padded = units_[u].padded, shard = units_[u].shard(), off = rank_ * shard;
    floatX* own = zero_ == 3 ? s.shard.x() : x_offset(s.full.x(), zero_ == 0 ? 0 : off, dtype_);  // [moments]
    const floatX* grad = zero_ >= 2 ? s.gshard.x() : x_offset(s.gfull.x(), zero_ == 0 ? 0 : off, dtype_);
    k_.adamw_step_shard(own, s.master.f(), grad, s.m.f(), s.v.f(), zero_ == 0 ? padded : shard, a);
    if ((zero_ == 1 || zero_ == 2) && size_ > 1) {
      sends_.emplace_back(arena_, shard, dtype_, Category::buffers);
      k_.memory_copy(sends_.back().data(), own, bytes_of(shard));
      collective_prepare();
      held_.push_back(
          world_.all_gather(sends_.back().data(), s.full.data(), static_cast<std::size_t>(shard), comm_dtype_));
    }
    if (zero_ <= 1) k_.memory_zero(s.gfull.data(), bytes_of(padded));
  }
  for (auto& h : held_) wait_timed(*h);
  held_.clear();
  sends_.clear();
  return norm;
}

std::vector<float> UnitStore::params_full_read() {
  std::vector<float> out;
  for (std::size_t u = 0; u < units_.size(); ++u) {
    const void* p = nullptr;
    sends_.clear();
    if (zero_ == 3) {
      sends_.emplace_back(arena_, units_[u].padded, dtype_, Category::buffers);  // [padded] the gathered unit
      collective_prepare();
      wait_held(world_.all_gather(state_[u].shard.data(), sends_.back().data(),
                                  static_cast<std::size_t>(units_[u].shard()), comm_dtype_));
      p = sends_.back().data();
    } else {
      p = state_[u].full.data();
    }
    std::vector<char> stored(bytes_of(units_[u].numel));  // [numel] in the backend's dtype
    k_.memory_download(stored.data(), p, stored.size());
    const std::size_t at = out.size();
    out.resize(at + static_cast<std::size_t>(units_[u].numel));
    host_values_widen(out.data() + at, stored.data(), units_[u].numel, dtype_);
  }
  sends_.clear();
  return out;
}

int64_t UnitStore::params_stored() const {
  int64_t n = 0;
  for (const auto& u : units_) n += zero_ == 3 ? u.shard() : u.padded;
  return n;
}

}  // namespace shardplan::reference
