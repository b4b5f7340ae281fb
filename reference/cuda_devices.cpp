// GPUs visible to this process (backend.hpp), asked of the CUDA runtime without creating a context on any of them
// beyond what cudaGetDeviceCount itself initialises.
#include <cuda_runtime.h>

#include "reference/backend.hpp"

namespace shardplan::reference {

int cuda_devices_visible() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error for later calls
    return 0;
  }
  return count;
}

}  // namespace shardplan::reference
