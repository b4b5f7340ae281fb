// The CPU device: one rank = one core (Eigen without OpenMP is single-threaded), fp32 GEMMs with Eigen's
// blocked kernels, memcpy for the copy bandwidth, an AdamW loop for the rate of elementwise work.
#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "calibrate/device.hpp"

namespace shardplan::calibrate {

namespace {

// "model name" of /proc/cpuinfo (Linux), else "cpu".
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return "cpu: " + line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "cpu";
}

class CpuGemm final : public Kernel {
 public:
  CpuGemm(int64_t m, int64_t n, int64_t k, std::size_t rotate_bytes) {
    const std::size_t set_bytes = 4 * static_cast<std::size_t>(m * k + k * n + m * n);
    const std::size_t sets = std::clamp<std::size_t>((rotate_bytes + set_bytes - 1) / set_bytes, 1, 64);
    for (std::size_t i = 0; i < sets; ++i) {
      a_.push_back(Eigen::MatrixXf::Random(m, k));  // [m × k]
      b_.push_back(Eigen::MatrixXf::Random(k, n));  // [k × n]
      c_.emplace_back(m, n);                        // [m × n]
    }
  }
  void launch() override {
    c_[next_].noalias() = a_[next_] * b_[next_];
    next_ = (next_ + 1) % a_.size();
  }

 private:
  std::vector<Eigen::MatrixXf> a_, b_, c_;
  std::size_t next_ = 0;
};

class CpuCopy final : public Kernel {
 public:
  explicit CpuCopy(std::size_t bytes) : src_(bytes, 1), dst_(bytes, 0) {}
  void launch() override { std::memcpy(dst_.data(), src_.data(), src_.size()); }

 private:
  std::vector<unsigned char> src_, dst_;  // [bytes] each
};

// AdamW (Loshchilov & Hutter 2019, Algorithm 2) over p, g, m, v [n] each: 16 B read and 12 B written per element.
class CpuElementwise final : public Kernel {
 public:
  static constexpr std::size_t kBytesPerElement = 28;
  explicit CpuElementwise(std::size_t bytes)
      : n_(std::max<std::size_t>(bytes / kBytesPerElement, 1)), p_(n_, 0.01f), g_(n_, 0.001f), m_(n_, 0.0f),
        v_(n_, 0.0f) {}
  void launch() override {
    const float b1 = 0.9f, b2 = 0.95f, lr = 1e-4f, eps = 1e-8f, wd = 0.1f, c1 = 0.1f, c2 = 0.05f;
    for (std::size_t i = 0; i < n_; ++i) {
      m_[i] = b1 * m_[i] + (1 - b1) * g_[i];
      v_[i] = b2 * v_[i] + (1 - b2) * g_[i] * g_[i];
      p_[i] -= lr * ((m_[i] / c1) / (std::sqrt(v_[i] / c2) + eps) + wd * p_[i]);
    }
  }

 private:
  std::size_t n_;
  std::vector<float> p_, g_, m_, v_;  // [n] each
};

class CpuDevice final : public Device {
 public:
  std::string description() const override { return cpu_model(); }
  bool gpu() const override { return false; }
  comm::DataType dtype() const override { return comm::DataType::fp32; }
  // Larger than the L2 and the share of L3 of one core on current servers.
  std::size_t cache_bytes() const override { return 32u << 20; }
  std::string versions() const override { return ""; }
  void* allocate(std::size_t bytes) override {
    void* p = std::calloc(bytes > 0 ? bytes : 1, 1);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void release(void* p) override { std::free(p); }
  void upload(void* dst, const std::vector<float>& values) override {
    std::memcpy(dst, values.data(), values.size() * sizeof(float));
  }
  std::vector<float> download(const void* src, std::size_t count) override {
    std::vector<float> v(count);
    std::memcpy(v.data(), src, count * sizeof(float));
    return v;
  }
  void synchronize() override {}
  std::unique_ptr<Kernel> gemm(int64_t m, int64_t n, int64_t k, std::size_t rotate_bytes) override {
    return std::make_unique<CpuGemm>(m, n, k, rotate_bytes);
  }
  std::unique_ptr<Kernel> copy(std::size_t bytes) override { return std::make_unique<CpuCopy>(bytes); }
  std::unique_ptr<Kernel> elementwise(std::size_t bytes) override { return std::make_unique<CpuElementwise>(bytes); }
};

}  // namespace

std::unique_ptr<Device> make_cpu_device() { return std::make_unique<CpuDevice>(); }

#if !SHARDPLAN_HAVE_NCCL
std::unique_ptr<Device> make_gpu_device() {
  throw comm::CommError("this shardplan was built without the CUDA toolkit: no GPU device");
}
#endif

}  // namespace shardplan::calibrate
