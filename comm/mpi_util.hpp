#pragma once
// Small MPI helpers shared by the backends (internal to shardplan_comm and shardplan_calibrate).
#include <mpi.h>

#include <memory>
#include <string>

#include "comm/comm.hpp"

namespace shardplan::comm {

// Throws CommError naming the call and MPI's error string when `code` is not MPI_SUCCESS.
void mpi_check(int code, const char* call);

std::unique_ptr<Communicator> make_mpi_world();
#if SHARDPLAN_HAVE_NCCL
std::unique_ptr<Communicator> make_nccl_world(const WorldInfo& world);
#endif

}  // namespace shardplan::comm
