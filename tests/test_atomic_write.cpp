// io/atomic_write: the one writer of the program. Temporary name beside the target, fsync, rename; a group all
// or none (with the previous files restored); nothing left behind on failure or exception.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

#include "io/atomic_write.hpp"
#include "planner/error.hpp"
#include "tests/cli_runner.hpp"

namespace fs = std::filesystem;
using namespace shardplan;

namespace {

fs::path scratch(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("shardplan_atomic_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

}  // namespace

TEST_SUITE("atomic write") {
  TEST_CASE("a file is written whole with the umask's mode, replacing the old one; no temporary stays") {
    const fs::path d = scratch("one");
    io::write_file_atomically((d / "a.txt").string(), "first");
    io::write_file_atomically((d / "a.txt").string(), "second, longer");
    CHECK(test::read_all(d / "a.txt") == "second, longer");
    CHECK(names_in(d) == std::set<std::string>{"a.txt"});
    struct stat st;
    REQUIRE(::stat((d / "a.txt").c_str(), &st) == 0);
    const mode_t mask = ::umask(0);
    ::umask(mask);
    CHECK((st.st_mode & 0777) == (0666 & ~mask));  // not mkstemp's 0600
    io::write_file_atomically((d / "empty").string(), "");
    CHECK(fs::file_size(d / "empty") == 0);
  }

  TEST_CASE("a path that cannot be a file: InputError naming the flag and the path, nothing created") {
    const fs::path d = scratch("bad");
    std::ofstream(d / "a-file") << "x";
    fs::create_directories(d / "a-dir");
    for (const fs::path& p : {d / "missing" / "x.md", d / "a-file" / "x.md", d / "a-dir"}) {
      CAPTURE(p.string());
      try {
        io::write_file_atomically(p.string(), "text", "--out");
        FAIL("written");
      } catch (const InputError& e) {
        CHECK(std::string(e.what()).rfind("--out " + p.string() + ": cannot write (", 0) == 0);
      }
    }
    CHECK_THROWS_AS(io::write_file_atomically("", "text", "--md"), InputError);
    CHECK(names_in(d) == std::set<std::string>{"a-file", "a-dir"});
    CHECK(fs::is_empty(d / "a-dir"));
  }

  TEST_CASE("a group commits all or none: a failed rename restores the files already replaced") {
    const fs::path d = scratch("group");
    std::ofstream(d / "a.md") << "old a";
    {
      io::AtomicWriter w;
      w.stage((d / "a.md").string(), "new a");
      w.stage((d / "b.md").string(), "new b");
      w.stage((d / "c.md").string(), "new c");
      // Between staging and commit, a non-empty folder takes c.md's place: its rename must fail.
      fs::create_directories(d / "c.md" / "inside");
      CHECK_THROWS_AS(w.commit(), InputError);
    }
    CHECK(test::read_all(d / "a.md") == "old a");  // restored
    CHECK_FALSE(fs::exists(d / "b.md"));            // was new: removed again
    CHECK(names_in(d) == std::set<std::string>{"a.md", "c.md"});
    // And a group that succeeds leaves exactly its files.
    fs::remove_all(d / "c.md");
    io::AtomicWriter w;
    w.stage((d / "a.md").string(), "new a");
    w.stage((d / "b.md").string(), "new b");
    w.commit();
    CHECK(test::read_all(d / "a.md") == "new a");
    CHECK(names_in(d) == std::set<std::string>{"a.md", "b.md"});
  }

  TEST_CASE("an exception between stage and commit removes every temporary") {
    const fs::path d = scratch("exception");
    try {
      io::AtomicWriter w;
      w.stage((d / "a.html").string(), std::string(1 << 20, 'x'));
      CHECK(names_in(d).size() == 1);  // the temporary exists while staged
      throw std::runtime_error("rendering failed");
    } catch (const std::runtime_error&) {
    }
    CHECK(fs::is_empty(d));
  }

  TEST_CASE("a folder: new ones appear whole by one rename; into an existing one, other files stay") {
    const fs::path d = scratch("folder");
    const std::vector<io::FolderFile> files = {{"run.sh", "#!/bin/sh\n", true}, {"README.md", "# x\n", false}};
    io::write_folder_atomically((d / "launch").string(), files, "--emit");
    CHECK(names_in(d) == std::set<std::string>{"launch"});
    CHECK(names_in(d / "launch") == std::set<std::string>{"run.sh", "README.md"});
    CHECK((fs::status(d / "launch" / "run.sh").permissions() & fs::perms::owner_exec) != fs::perms::none);
    CHECK((fs::status(d / "launch" / "README.md").permissions() & fs::perms::owner_exec) == fs::perms::none);
    std::ofstream(d / "launch" / "keep.txt") << "mine";
    io::write_folder_atomically((d / "launch").string() + "/", files, "--emit");
    CHECK(names_in(d / "launch") == std::set<std::string>{"run.sh", "README.md", "keep.txt"});
    // Under a file: one error naming the flag and the folder, nothing made.
    std::ofstream(d / "a-file") << "x";
    try {
      io::write_folder_atomically((d / "a-file" / "sub").string(), files, "--emit");
      FAIL("written");
    } catch (const InputError& e) {
      CHECK(std::string(e.what()).rfind("--emit " + (d / "a-file" / "sub").string() + ": cannot write", 0) == 0);
    }
    CHECK(names_in(d) == std::set<std::string>{"launch", "a-file"});
  }
}
