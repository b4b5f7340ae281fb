// gpu/cublaslt_lazy.cpp: the shardplan binary does not load cuBLASLt at start (it cost every `plan` 75 ms), and
// the forwarding definitions reach the real library on first use. Needs no GPU: the version and status strings
// are host calls. Builds without the CUDA toolkit have no cuBLASLt at all, and skip.
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#if defined(SHARDPLAN_HAVE_CUBLASLT)
#include <cublasLt.h>
#endif

TEST_SUITE("gpu libraries") {
  TEST_CASE("cuBLASLt is opened on first use, not when the process starts") {
#if !defined(SHARDPLAN_HAVE_CUBLASLT)
    MESSAGE("this build has no CUDA toolkit: no cuBLASLt to check");
#else
    // The binary's dynamic section: the libraries loaded at start (readelf from binutils).
    std::string dynamic;
    if (std::FILE* p = popen((std::string("readelf -d '") + SHARDPLAN_BIN + "' 2>/dev/null").c_str(), "r")) {
      char buf[512];
      while (std::fgets(buf, sizeof buf, p)) dynamic += buf;
      pclose(p);
    }
    if (dynamic.empty()) {
      MESSAGE("readelf is not available: the start-up check is skipped");
    } else {
      CHECK(dynamic.find("libcudart") != std::string::npos);  // the check sees the CUDA libraries it links
      CHECK(dynamic.find("libcublasLt") == std::string::npos);
    }
    // First use: the library of the toolkit this was built with answers (CUBLAS_VERSION = major·10000 + …).
    CHECK(cublasLtGetVersion() / 10000 == CUBLAS_VER_MAJOR);
    const std::string ok = cublasLtGetStatusString(CUBLAS_STATUS_SUCCESS);  // "success" in cuBLAS 13
    CHECK_FALSE(ok.empty());
    CHECK(ok != cublasLtGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED));
#endif
  }
}
