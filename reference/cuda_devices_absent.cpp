// Builds without the CUDA toolkit see no GPU (backend.hpp).
#include "reference/backend.hpp"

namespace shardplan::reference {

int cuda_devices_visible() { return 0; }

}  // namespace shardplan::reference
