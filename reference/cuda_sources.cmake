# The CUDA backend of the reference loop (included by CMakeLists.txt when the CUDA toolkit is found): one
# backend file and four small kernel files (few translation units: CI compiles them on 2 cores), see
# README_cuda.md.
target_sources(shardplan_reference PRIVATE
  backend_cuda.cu
  cuda_kernels_attention.cu
  cuda_kernels_loss.cu
  cuda_kernels_norm.cu
  cuda_kernels_pointwise.cu
)
# C++20 for nvcc too: backend_cuda.cu includes backend.hpp → planner/precision.hpp → planner/strategy.hpp, which uses
# C++20 (defaulted operator==). CMake 3.25 knows no CUDA20 dialect for nvcc (newer CMake does, with this flag; nvcc
# has accepted -std=c++20 since CUDA 12.0), so it is named here for this folder's targets.
if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()
set_property(TARGET shardplan_reference PROPERTY CUDA_STANDARD 20)
find_package(CUDAToolkit REQUIRED)  # imported targets are per folder
# cuBLASLt is opened on first use (gpu/cublaslt_lazy.cpp), not at process start.
target_link_libraries(shardplan_reference PUBLIC CUDA::cudart shardplan_cublaslt)
