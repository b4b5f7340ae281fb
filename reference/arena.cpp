// The tracking arena (arena.hpp).
#include "reference/arena.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

namespace shardplan::reference {

namespace {

int64_t& component_of(MemoryByComponent& m, Category c) {
  switch (c) {
    case Category::params: return m.params;
    case Category::grads: return m.grads;
    case Category::master: return m.master;
    case Category::optimizer: return m.optimizer;
    case Category::activations: return m.activations;
    case Category::logits: return m.logits;
    case Category::buffers: return m.buffers;
  }
  return m.buffers;
}

}  // namespace

Arena::~Arena() {
  for (auto& [p, e] : entries_) backend_.memory_release(p);
}

void* Arena::allocate(int64_t count, DType dtype, Category c, bool zero) {
  // The tensor's own bytes are counted; the backend rounds the allocation up to its alignment (slack that is the
  // allocator's, not the loop's: it shows in the device's own figure).
  const int64_t bytes = count * dtype_bytes(dtype);
  void* p = backend_.memory_allocate(static_cast<std::size_t>(bytes));
  if (zero) backend_.memory_zero(p, static_cast<std::size_t>(bytes));
  entries_[p] = Entry{bytes, c};
  component_of(live_, c) += bytes;
  live_total_ += bytes;
  if (live_total_ > peak_) {
    peak_ = live_total_;
    at_peak_ = live_;
  }
  return p;
}

void Arena::release(void* p) {
  auto it = entries_.find(p);
  if (it == entries_.end()) return;
  component_of(live_, it->second.category) -= it->second.bytes;
  live_total_ -= it->second.bytes;
  entries_.erase(it);
  backend_.memory_release(p);
}

void Arena::reset_peak() {
  peak_ = live_total_;
  at_peak_ = live_;
}

int64_t rss_bytes_read() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return static_cast<int64_t>(resident) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace shardplan::reference
