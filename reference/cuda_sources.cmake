# The CUDA backend of the reference loop (included by CMakeLists.txt when the CUDA toolkit is found).
target_sources(shardplan_reference PRIVATE backend_cuda_absent.cpp)
