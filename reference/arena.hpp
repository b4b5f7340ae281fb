#pragma once
// The tracking arena: every tensor the reference loop allocates goes through it, tagged with the planner's
// memory component (reference.hpp MemoryByComponent). It keeps the live bytes per component, the high-water
// mark of their sum, and what was live at that mark — the measured side of `shardplan validate`.
#include <cstdint>
#include <stdexcept>
#include <unordered_map>

#include "reference/backend.hpp"
#include "reference/reference.hpp"

namespace shardplan::reference {

enum class Category { params, grads, master, optimizer, activations, logits, buffers };

// Memory comes from a backend (host or device), which must outlive the arena.
class Arena {
 public:
  explicit Arena(Backend& backend) : backend_(backend) {}
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena();

  // `count` elements of `dtype` in backend memory, zero-filled when `zero` (the caller overwrites otherwise).
  void* allocate(int64_t count, DType dtype, Category c, bool zero);
  void release(void* p);

  int64_t live_total() const { return live_total_; }
  MemoryByComponent live() const { return live_; }
  int64_t peak() const { return peak_; }
  const MemoryByComponent& at_peak() const { return at_peak_; }
  // Starts a new measurement window: the peak becomes what is live now.
  void reset_peak();
  Backend& backend() const { return backend_; }

 private:
  struct Entry {
    int64_t bytes;
    Category category;
  };
  Backend& backend_;
  std::unordered_map<void*, Entry> entries_;
  MemoryByComponent live_;
  int64_t live_total_ = 0;
  int64_t peak_ = 0;
  MemoryByComponent at_peak_;
};

// An owned tensor in the arena (move-only): `count` elements of one dtype. Shapes are documented where each Buf is
// declared. Tensors the kernels see as floatX are of the backend's dtype (x()); statistics, moments and the master
// copy are fp32 (f()).
class Buf {
 public:
  Buf() = default;
  Buf(Arena& a, int64_t count, DType dtype, Category c, bool zero = false)
      : arena_(&a), data_(a.allocate(count, dtype, c, zero)), count_(count), dtype_(dtype) {}
  // A tensor of the backend's dtype.
  static Buf of_backend_dtype(Arena& a, int64_t count, Category c, bool zero = false) {
    return Buf(a, count, a.backend().dtype(), c, zero);
  }
  Buf(Buf&& o) noexcept : arena_(o.arena_), data_(o.data_), count_(o.count_), dtype_(o.dtype_) {
    o.data_ = nullptr;
    o.count_ = 0;
  }
  Buf& operator=(Buf&& o) noexcept {
    if (this != &o) {
      reset();
      arena_ = o.arena_, data_ = o.data_, count_ = o.count_, dtype_ = o.dtype_;
      o.data_ = nullptr, o.count_ = 0;
    }
    return *this;
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  ~Buf() { reset(); }

  void reset() {
    if (data_) arena_->release(data_);
    data_ = nullptr, count_ = 0;
  }
  void* data() const { return data_; }
  // As a kernel tensor: elements of the backend's dtype (checked: a Buf of another dtype is a bug).
  floatX* x() const {
    if (data_ && dtype_ != arena_->backend().dtype()) throw std::logic_error("Buf::x on a tensor of another dtype");
    return static_cast<floatX*>(data_);
  }
  float* f() const {
    if (data_ && dtype_ != DType::fp32) throw std::logic_error("Buf::f on a tensor that is not fp32");
    return static_cast<float*>(data_);
  }
  int64_t size() const { return count_; }
  DType dtype() const { return dtype_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  Arena* arena_ = nullptr;
  void* data_ = nullptr;
  int64_t count_ = 0;
  DType dtype_ = DType::fp32;
};

// The process's resident set in bytes (/proc/self/statm, second field × page size); 0 where unreadable.
int64_t rss_bytes_read();

}  // namespace shardplan::reference
