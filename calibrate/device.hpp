#pragma once
// The device one rank measures on: CPU (fp32, Eigen) for the MPI backend, its GPU (bf16, cuBLASLt) for NCCL.
// Buffers, GEMMs and copies behind one small interface, so the benchmarks are written once.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.hpp"

namespace shardplan::calibrate {

// One kernel to time: launch() queues one more run; Device::synchronize() waits for all of them.
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual void launch() = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string description() const = 0;  // "cpu: Intel(R) Xeon(R) ..." / "NVIDIA H200"
  virtual bool gpu() const = 0;
  virtual comm::DataType dtype() const = 0;     // what collectives and GEMMs run in: fp32 CPU, bf16 GPU
  virtual std::size_t cache_bytes() const = 0;  // the last-level cache the GEMM buffers must exceed (GPU: L2)
  virtual std::string versions() const = 0;     // driver / CUDA / cuBLAS versions ("" on CPU)

  virtual void* allocate(std::size_t bytes) = 0;
  virtual void release(void* p) = 0;
  // values[count] converted to dtype() and copied to dst; download converts back to float.
  virtual void upload(void* dst, const std::vector<float>& values) = 0;
  virtual std::vector<float> download(const void* src, std::size_t count) = 0;
  virtual void synchronize() = 0;

  // C[m×n] = A[m×k]·B[k×n], cycling over enough buffer sets that together they exceed `rotate_bytes`
  // (so each run reads its operands from memory, not from cache).
  virtual std::unique_ptr<Kernel> gemm(int64_t m, int64_t n, int64_t k, std::size_t rotate_bytes) = 0;
  // A large copy of `bytes` (device memory bandwidth).
  virtual std::unique_ptr<Kernel> copy(std::size_t bytes) = 0;
  // An AdamW update streaming `bytes` (read + written) of fp32 state: the rate of the elementwise work the planner
  // costs as memory-bound (norms, activations, optimizer). On CPU cores that work is compute-bound (sqrt, exp,
  // division per element), far below the copy bandwidth. Null where the copy already measures it (GPU: such kernels
  // run at HBM bandwidth).
  virtual std::unique_ptr<Kernel> elementwise(std::size_t /*bytes*/) { return nullptr; }
};

// A device buffer freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer(Device& d, std::size_t bytes) : device_(&d), data_(d.allocate(bytes)) {}
  ~DeviceBuffer() { device_->release(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }

 private:
  Device* device_;
  void* data_;
};

std::unique_ptr<Device> make_cpu_device();
// The GPU of this rank (NCCL has already chosen it); throws comm::CommError without the CUDA build or a GPU.
std::unique_ptr<Device> make_gpu_device();

}  // namespace shardplan::calibrate
