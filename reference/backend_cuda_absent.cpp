// Builds without the CUDA toolkit: the CUDA backend is absent, and says so.
#include <stdexcept>

#include "reference/backend.hpp"

namespace shardplan::reference {

bool cuda_backend_built() { return false; }

std::unique_ptr<Backend> make_cuda_backend(DType) {
  throw std::runtime_error(
      "this build has no CUDA backend: the CUDA toolkit was not found at configure time (install it, or use "
      "--backend cpu)");
}

}  // namespace shardplan::reference
