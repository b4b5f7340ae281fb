#pragma once
// Stand-in for the CUDA toolkit's <cuda_runtime.h> in the emulated build of the kernels (tests/CMakeLists.txt puts
// tests/cuda_emu first on that target's include path): the kernel files include <cuda_runtime.h> as under nvcc and
// get the host emulation instead, so the emulated test builds the same with or without a CUDA toolkit installed.
#include "cuda_emu.hpp"
