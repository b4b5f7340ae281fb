// comm/: process groups of a parallel layout (Megatron-LM rank order: tp fastest, then dp, then pp).
// The multi-rank behaviour (collectives, time-outs) is tested under mpirun: tests/mpi/*.sh.
#include <doctest/doctest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "comm/comm.hpp"
#include "comm/groups.hpp"

using namespace shardplan::comm;

TEST_SUITE("comm") {
  TEST_CASE("groups of tp 2 × dp 2 × pp 2") {
    const ParallelLayout l{2, 2, 2};
    // rank 5 = (pp 1 · dp 2 + dp 0) · tp 2 + tp 1.
    CHECK(tp_split(l, 5).color == 2);  // ranks 4, 5
    CHECK(tp_split(l, 5).key == 1);
    CHECK(dp_split(l, 5).color == 3);  // ranks 5, 7
    CHECK(dp_split(l, 5).key == 0);
    CHECK(pp_split(l, 5).color == 1);  // ranks 1, 5
    CHECK(pp_split(l, 5).key == 1);
    // Every kind of group partitions the 8 ranks into 4 groups of 2.
    for (auto split : {tp_split, dp_split, pp_split}) {
      std::multiset<int> colors;
      for (int r = 0; r < 8; ++r) colors.insert(split(l, r).color);
      std::set<int> distinct(colors.begin(), colors.end());
      CHECK(distinct.size() == 4);
      for (int c : distinct) CHECK(colors.count(c) == 2);
    }
  }

  TEST_CASE("node and rail groups") {
    WorldInfo w;
    w.rank = 11;
    w.size = 16;
    w.local_rank = 3;
    w.local_size = 8;
    w.node = 1;
    w.nodes = 2;
    CHECK(intra_node_split(w).color == 1);
    CHECK(rail_split(w).color == 3);  // with rank 3 of node 0
    CHECK(rail_split(w).key == 1);
  }

  TEST_CASE("the command line from /proc/self/cmdline") {
    using Args = std::vector<std::string>;
    // Every string ends with a NUL: 5 + 2 + 1 + 4 = 12 bytes; the empty argument stays, a blank inside one too.
    CHECK(split_command_line(std::string("prog\0a\0\0b c\0", 12)) == Args{"prog", "a", "", "b c"});
    CHECK(split_command_line(std::string("prog\0a", 6)) == Args{"prog", "a"});  // a last one without its NUL
    CHECK(split_command_line("").empty());
    // This process: the test binary's own path first.
    const Args own = own_command_line();
    REQUIRE_FALSE(own.empty());
    CHECK(std::filesystem::path(own[0]).filename() == "shardplan_tests");
  }

  TEST_CASE("element sizes and backends") {
    CHECK(element_bytes(DataType::fp32) == 4);
    CHECK(element_bytes(DataType::bf16) == 2);
    CHECK(backend_available("mpi"));
    CHECK_FALSE(backend_available("gloo"));
#if SHARDPLAN_HAVE_NCCL
    CHECK(backend_available("nccl"));
#else
    CHECK_FALSE(backend_available("nccl"));
#endif
  }
}
