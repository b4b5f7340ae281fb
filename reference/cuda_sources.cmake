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
find_package(CUDAToolkit REQUIRED)  # imported targets are per folder
target_link_libraries(shardplan_reference PUBLIC CUDA::cudart CUDA::cublasLt)
