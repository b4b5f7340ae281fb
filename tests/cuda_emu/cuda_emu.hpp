#pragma once
// A host emulator of the CUDA execution model, just large enough to run reference/cuda_kernels_*.cu unchanged on
// a machine without a GPU (CI), so that the kernel code that runs on the H200 is executed and compared with its
// CPU twin on every test run (tests/cuda_emu/emu_kernels_test.cpp; what is and is not emulated: README.md).
//
// Model. Every CUDA thread is a coroutine (POSIX ucontext: makecontext/swapcontext) with its own stack, so that a
// kernel can stop in the middle of a loop at __syncthreads or a warp shuffle and resume there, exactly as written.
// A block's threads run round-robin on the calling host thread until each reaches a barrier or returns; blocks run
// one after another. Two kinds of barrier: the block barrier (__syncthreads) and one barrier per warp (every
// shuffle is one exchange through per-lane slots). A barrier waits for the threads that have not returned yet, as
// on Volta and later, where exited threads no longer hold up bar.sync.
//
// Checks the GPU does not make (each an exception from the launch, so the test names the failure):
//   - a shuffle that reads a lane which has returned (undefined on the GPU with the full mask 0xffffffff),
//   - a deadlock: a round in which no thread arrived anywhere, e.g. __syncthreads inside a branch not every
//     thread takes, or lanes of one warp waiting in different barriers,
//   - a launch configuration the GPU rejects (block > 1024 threads, grid y/z > 65535, ...): recorded as
//     cudaErrorInvalidConfiguration for cudaGetLastError, as the runtime does; the kernel does not run.
//
// Included through the stand-in tests/cuda_emu/cuda_runtime.h, which this target puts first on the include path,
// so that the kernel files' own `#include <cuda_runtime.h>` gets these definitions whether or not a CUDA toolkit
// is installed.
#ifndef SHARDPLAN_CUDA_EMULATION
#error "tests/cuda_emu is the host emulation of CUDA: build with -DSHARDPLAN_CUDA_EMULATION (tests/CMakeLists.txt)"
#endif

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cmath>  // the device math functions (expf, logf, tanhf, pow, ...) are the host's libm
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

// AddressSanitizer (g++ defines __SANITIZE_ADDRESS__, clang has __has_feature): see asan_leave below.
#if defined(__SANITIZE_ADDRESS__)
#define SHARDPLAN_CUDA_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SHARDPLAN_CUDA_EMU_ASAN 1
#endif
#endif
#ifdef SHARDPLAN_CUDA_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

// --- the runtime API types and calls the kernel files use (names and values as in CUDA's driver_types.h) -------
struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
typedef struct CUstream_st* cudaStream_t;  // opaque; the emulator has one implicit stream (launches run at once)
enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorInvalidConfiguration = 9,
};
typedef enum cudaError cudaError_t;

namespace cuda_emu {

constexpr int kWarpSize = 32;
// The limits of every GPU since compute capability 3.0 (CUDA C++ Programming Guide, "Technical Specifications per
// Compute Capability"): what the launch checks, so that an emulated launch fails where a real one would.
constexpr unsigned kMaxThreadsPerBlock = 1024, kMaxBlockX = 1024, kMaxBlockY = 1024, kMaxBlockZ = 64;
constexpr unsigned kMaxGridX = 2147483647u, kMaxGridYZ = 65535;
// Stack of one emulated thread. The kernels need a few hundred bytes; 64 KiB leaves room for unoptimised and
// sanitizer builds (larger frames, redzones). A PROT_NONE guard page below each stack turns an overflow into a
// SIGSEGV at the faulting line instead of silent corruption of the neighbouring thread's stack.
constexpr std::size_t kStackBytes = 64 * 1024;

struct Barrier {
  int expected = 0;          // threads of its group that have not returned
  int arrived = 0;           // threads waiting in it now
  std::uint64_t generation = 0;  // incremented at each release
};

struct Thread {
  uint3 idx{0, 0, 0};
  int warp = 0;  // warp of the block (linear thread index / 32)
  int lane = 0;
  bool done = false;
  ucontext_t context{};
  char* stack = nullptr;  // kStackBytes, from the pool below
};

// State of the launch in progress. Blocks run one at a time on one host thread, so plain globals suffice; this is
// also what makes `__shared__` = `static` correct (one block's shared memory at a time), see the macros below.
inline uint3 block_index{0, 0, 0};
inline dim3 block_dim, grid_dim;
inline Thread* current = nullptr;
inline ucontext_t scheduler_context;
inline std::vector<Thread> threads;         // [threads per block]
inline std::vector<Barrier> warp_barriers;  // [warps per block]
inline Barrier block_barrier;
// Shuffle slots [2][threads per block]: a lane writes its value into buffer (warp generation g mod 2), passes the
// warp barrier, reads its partner's slot. Two buffers make one barrier per shuffle enough: a lane can only write
// the same buffer again two shuffles later, after every lane of the warp has passed the barrier in between (and so
// has read this shuffle's values). The slot also records g, so that a partner which returned before this shuffle
// is told from one which took part and returned right after it.
struct ShuffleSlot {
  std::uint64_t value = 0;
  std::uint64_t generation = ~std::uint64_t{0};  // of the warp barrier when written; never written: matches none
};
inline std::vector<ShuffleSlot> shuffle_slots[2];
inline std::function<void()> kernel_body;  // the kernel bound to its arguments
inline std::uint64_t events = 0;           // arrivals and exits: a scheduler round without any is a deadlock
inline std::exception_ptr failure;         // thrown inside a thread, rethrown by the launch
inline cudaError_t last_error = cudaSuccess;
inline bool reverse_order = false;  // run threads in descending index order (tests: results must not depend on it)

// Stacks are mapped once and reused by every block and launch (a block of 256 threads needs 256 stacks).
inline std::vector<char*>& stack_pool() {
  static std::vector<char*> pool;
  return pool;
}
inline char* stack_get(std::size_t i) {
  auto& pool = stack_pool();
  while (pool.size() <= i) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    void* p = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    mprotect(p, page, PROT_NONE);  // stacks grow down: the guard page is the lowest
    pool.push_back(static_cast<char*>(p) + page);
  }
  return pool[i];
}

// AddressSanitizer must be told when execution moves to another stack (its fiber annotations,
// <sanitizer/common_interface_defs.h>): otherwise it takes the coroutine stacks for corrupted ones when a kernel
// throws, and may report false stack errors. Without ASan these are no-ops.
inline const void* scheduler_stack_bottom = nullptr;  // the host thread's stack, as ASan reports it
inline std::size_t scheduler_stack_size = 0;
inline void* scheduler_fake_stack = nullptr;
#ifdef SHARDPLAN_CUDA_EMU_ASAN
inline void asan_leave(void** fake_stack, const void* bottom, std::size_t size) {
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
}
inline void asan_enter_thread(void* fake_stack) {
  __sanitizer_finish_switch_fiber(fake_stack, &scheduler_stack_bottom, &scheduler_stack_size);
}
inline void asan_enter_scheduler() { __sanitizer_finish_switch_fiber(scheduler_fake_stack, nullptr, nullptr); }
#else
inline void asan_leave(void**, const void*, std::size_t) {}
inline void asan_enter_thread(void*) {}
inline void asan_enter_scheduler() {}
#endif

// Back to the scheduler; resumes here when the scheduler next picks this thread.
inline void yield() {
  void* fake_stack = nullptr;
  asan_leave(&fake_stack, scheduler_stack_bottom, scheduler_stack_size);
  swapcontext(&current->context, &scheduler_context);
  asan_enter_thread(fake_stack);
}

inline void barrier_release_if_full(Barrier& b) {
  if (b.arrived > 0 && b.arrived == b.expected) {
    b.arrived = 0;
    ++b.generation;
    ++events;
  }
}

inline void barrier_wait(Barrier& b) {
  const std::uint64_t g = b.generation;
  ++b.arrived;
  ++events;
  barrier_release_if_full(b);
  while (b.generation == g) yield();
}

// Entry of every thread's coroutine. An exception must not unwind past the coroutine's first frame (there is no
// caller to unwind into): it is kept in `failure` and rethrown by the launch.
inline void thread_main() {
  asan_enter_thread(nullptr);
  try {
    kernel_body();
  } catch (...) {
    if (!failure) failure = std::current_exception();
  }
  Thread& t = *current;
  t.done = true;
  ++events;
  // A returned thread no longer counts towards its barriers; its departure may complete one.
  --warp_barriers[t.warp].expected;
  barrier_release_if_full(warp_barriers[t.warp]);
  --block_barrier.expected;
  barrier_release_if_full(block_barrier);
  asan_leave(nullptr, scheduler_stack_bottom, scheduler_stack_size);  // null: this stack is done
}  // returns to uc_link: the scheduler

inline std::string block_name() {
  return "block (" + std::to_string(block_index.x) + "," + std::to_string(block_index.y) + "," +
         std::to_string(block_index.z) + ")";
}

inline void block_run() {
  const int n = static_cast<int>(block_dim.x * block_dim.y * block_dim.z);
  const int warps = (n + kWarpSize - 1) / kWarpSize;
  threads.assign(static_cast<std::size_t>(n), Thread{});
  warp_barriers.assign(static_cast<std::size_t>(warps), Barrier{});
  for (auto& s : shuffle_slots) s.assign(static_cast<std::size_t>(n), ShuffleSlot{});
  block_barrier = Barrier{};
  block_barrier.expected = n;
  for (int i = 0; i < n; ++i) {
    Thread& t = threads[static_cast<std::size_t>(i)];
    // Linear thread index i = x + y·Dx + z·Dx·Dy; warps are consecutive runs of 32 (Programming Guide §"Thread
    // Hierarchy" and §"SIMT Architecture").
    t.idx = uint3{i % block_dim.x, (i / block_dim.x) % block_dim.y, i / (block_dim.x * block_dim.y)};
    t.warp = i / kWarpSize;
    t.lane = i % kWarpSize;
    ++warp_barriers[static_cast<std::size_t>(t.warp)].expected;
    t.stack = stack_get(static_cast<std::size_t>(i));
    getcontext(&t.context);
    t.context.uc_stack.ss_sp = t.stack;
    t.context.uc_stack.ss_size = kStackBytes;
    t.context.uc_link = &scheduler_context;
    makecontext(&t.context, thread_main, 0);
  }
  for (bool alive = true; alive;) {
    alive = false;
    const std::uint64_t before = events;
    for (int k = 0; k < n; ++k) {
      Thread& t = threads[static_cast<std::size_t>(reverse_order ? n - 1 - k : k)];
      if (t.done) continue;
      current = &t;
      asan_leave(&scheduler_fake_stack, t.stack, kStackBytes);
      swapcontext(&scheduler_context, &t.context);
      asan_enter_scheduler();
      current = nullptr;
      if (failure) {
        // The other threads' stacks are abandoned mid-kernel; kernels hold no resources, and the next block
        // starts every coroutine afresh.
        std::exception_ptr e = failure;
        failure = nullptr;
        std::rethrow_exception(e);
      }
      alive = alive || !t.done;
    }
    if (alive && events == before)
      throw std::logic_error("cuda_emu: deadlock in " + block_name() +
                             ": threads wait in barriers that cannot complete (__syncthreads or a shuffle in a "
                             "branch not every thread of the block or warp takes)");
  }
}

// Why a launch with this configuration fails on a GPU, or cudaSuccess.
inline cudaError_t launch_config_check(dim3 grid, dim3 block, std::size_t dynamic_shared) {
  const std::uint64_t per_block = std::uint64_t{block.x} * block.y * block.z;
  if (per_block == 0 || per_block > kMaxThreadsPerBlock || block.x > kMaxBlockX || block.y > kMaxBlockY ||
      block.z > kMaxBlockZ)
    return cudaErrorInvalidConfiguration;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > kMaxGridX || grid.y > kMaxGridYZ || grid.z > kMaxGridYZ)
    return cudaErrorInvalidConfiguration;
  // Dynamic shared memory (extern __shared__) is not emulated; no kernel of the project uses it. Refusing the
  // launch keeps a future kernel that needs it from running on memory that does not exist.
  if (dynamic_shared != 0) return cudaErrorInvalidValue;
  return cudaSuccess;
}

// kernel<<<grid, block, dynamic_shared, stream>>>(args...), run to completion before returning (the emulator's
// one stream is synchronous). Arguments convert to the kernel's parameter types as they do at a real launch.
template <typename... P, typename... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, std::size_t dynamic_shared, cudaStream_t,
            A... args) {
  if (const cudaError_t e = launch_config_check(grid, block, dynamic_shared); e != cudaSuccess) {
    last_error = e;  // sticky until cudaGetLastError reads it, as the runtime's launch errors
    return;
  }
  kernel_body = [=] { kernel(args...); };
  grid_dim = grid;
  block_dim = block;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        block_index = uint3{x, y, z};
        block_run();
      }
  kernel_body = nullptr;
}

// __shfl_xor_sync with the full mask: the value of lane (lane ^ lane_mask) of the same warp.
template <typename T>
T shuffle_xor(T v, int lane_mask) {
  static_assert(sizeof(T) <= sizeof(std::uint64_t), "shuffles move at most 8 bytes");
  Thread& me = *current;
  const int warp_first = me.warp * kWarpSize;
  Barrier& warp = warp_barriers[static_cast<std::size_t>(me.warp)];
  const std::uint64_t g = warp.generation;
  std::vector<ShuffleSlot>& slots = shuffle_slots[g & 1];
  ShuffleSlot& mine = slots[static_cast<std::size_t>(warp_first + me.lane)];
  std::memcpy(&mine.value, &v, sizeof(T));
  mine.generation = g;
  barrier_wait(warp);
  const int other = warp_first + (me.lane ^ lane_mask);
  if (other >= static_cast<int>(threads.size()) || slots[static_cast<std::size_t>(other)].generation != g)
    throw std::logic_error("cuda_emu: lane " + std::to_string(me.lane) + " of warp " + std::to_string(me.warp) +
                           " in " + block_name() + " shuffles with lane " + std::to_string(other - warp_first) +
                           ", which has returned (undefined with the full mask)");
  T r;
  std::memcpy(&r, &slots[static_cast<std::size_t>(other)].value, sizeof(T));
  return r;
}

}  // namespace cuda_emu

inline cudaError_t cudaGetLastError() {
  const cudaError_t e = cuda_emu::last_error;
  cuda_emu::last_error = cudaSuccess;
  return e;
}
inline const char* cudaGetErrorString(cudaError_t e) {  // the runtime's strings
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
  }
  return "unrecognized error code";
}

// --- device code ---------------------------------------------------------------------------------------------
// Function qualifiers: every function is a host function here.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
// One copy per kernel function, shared by the threads of the block running now: correct only because blocks run
// one at a time (on a GPU every resident block has its own). Like shared memory, it is not reset between blocks.
#define __shared__ static

// Built-in variables (uint3 / dim3 values, as in CUDA).
#define threadIdx (::cuda_emu::current->idx)
#define blockIdx (::cuda_emu::block_index)
#define blockDim (::cuda_emu::block_dim)
#define gridDim (::cuda_emu::grid_dim)

inline void __syncthreads() { cuda_emu::barrier_wait(cuda_emu::block_barrier); }

// Only the full mask: the kernels shuffle with whole warps (a partial mask would need per-lane participation).
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
  if (mask != 0xffffffffu) throw std::logic_error("cuda_emu: __shfl_xor_sync supports the full mask only");
  return cuda_emu::shuffle_xor(v, lane_mask);
}

// Atomic by construction: a thread runs without interruption between two barriers. Returns the old value.
template <typename T>
T atomicAdd(T* address, T v) {
  const T old = *address;
  *address = old + v;
  return old;
}
