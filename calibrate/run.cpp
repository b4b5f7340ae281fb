// `shardplan calibrate`: every rank of the mpirun job runs run_calibrate. Bad input is found identically on
// every rank (same arguments) or on rank 0 and broadcast; rank 0 alone prints it, every rank exits 2.
#include "calibrate/run.hpp"

#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "calibrate/bench.hpp"
#include "calibrate/coordinator.hpp"
#include "calibrate/device.hpp"
#include "calibrate/plan.hpp"
#include "calibrate/profile.hpp"
#include "comm/comm.hpp"
#include "comm/groups.hpp"
#include "io/atomic_write.hpp"
#include "io/input_file.hpp"
#include "io/preset_store.hpp"
#include "planner/error.hpp"

extern char** environ;

namespace shardplan::calibrate {

namespace fs = std::filesystem;

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return text;
}

std::string step_name(const RawRecord& r) {
  if (r.kind == "collective") return fmt::format("{} {} ({} ranks) {}", r.op, r.scope, r.ranks, human_bytes(r.bytes));
  if (r.kind == "gemm") return fmt::format("gemm {} {}x{}x{}", r.op, r.m, r.n, r.k);
  if (r.kind == "elementwise") return fmt::format("elementwise {} {}", r.op, human_bytes(r.bytes));
  return fmt::format("copy {}", human_bytes(r.bytes));
}

// Every rank's string, gathered on rank 0 (fixed-size slots; blocking, used at start-up only).
std::vector<std::string> gather_strings(const std::string& mine, int rank, int size) {
  constexpr int kSlot = 256;
  char slot[kSlot] = {};
  std::snprintf(slot, kSlot, "%s", mine.c_str());
  std::vector<char> all(rank == 0 ? static_cast<std::size_t>(kSlot * size) : 1);  // [size × kSlot] on rank 0
  MPI_Gather(slot, kSlot, MPI_CHAR, all.data(), kSlot, MPI_CHAR, 0, MPI_COMM_WORLD);
  std::vector<std::string> out;
  if (rank == 0)
    for (int r = 0; r < size; ++r) out.emplace_back(all.data() + static_cast<std::ptrdiff_t>(r) * kSlot);
  return out;
}

// Rank 0's verdict ("" = fine) to everyone.
std::string agree(const std::string& verdict_on_rank0, int rank) {
  int64_t length = rank == 0 ? static_cast<int64_t>(verdict_on_rank0.size()) : 0;
  MPI_Bcast(&length, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  std::string text = rank == 0 ? verdict_on_rank0 : std::string(static_cast<std::size_t>(length), ' ');
  if (length > 0) MPI_Bcast(text.data(), static_cast<int>(length), MPI_CHAR, 0, MPI_COMM_WORLD);
  return text;
}

// Can `path` be written (its folder exists and accepts a new file)? "" or the reason.
std::string check_writable(const std::string& path, const char* flag) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return fmt::format("{} {}: is a folder; give a file name such as {}/profile.yaml", flag, path, path);
  const fs::path dir = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) return fmt::format("{} {}: the folder {} does not exist; create it or choose another path", flag, path, dir.string());
  try {  // a temporary beside the target, removed again when the probe goes (io/atomic_write.hpp)
    io::AtomicWriter probe;
    probe.stage(path, "", flag);
  } catch (const std::exception& e) {
    return fmt::format("{}; choose a writable path", e.what());
  }
  return "";
}

// --raw is an append log that --resume reads back: a regular file (or a character device such as /dev/null when
// nothing is resumed). A FIFO would block its open on rank 0 while the other ranks time out and blame rank 0.
std::string check_raw_target(const std::string& path, bool resume) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) return "";
  if (S_ISCHR(st.st_mode) && !resume) return "";
  const char* what = S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISCHR(st.st_mode) ? "a character device"
                     : S_ISBLK(st.st_mode) ? "a block device" : "not a regular file";
  return fmt::format("--raw {}: is {}; the raw CSV must be a regular file (--resume reads it back)",
                     io::escape_for_line(path), what);
}

// The timeout as typed, for the start-up watchdog (resolve_plan checks and reports it later): 120 s when unreadable.
double startup_timeout(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  return end != nullptr && *end == '\0' && v >= 1 && v <= 86400 ? v : 120;
}

// What this rank is about to measure, as one hash: ranks with the same flags but other working folders or preset
// folders (another --preset's shapes) would measure other steps (issue 19, item 9).
uint64_t plan_hash(const RunPlan& plan, const std::vector<RawRecord>& steps, const std::string& setup) {
  uint64_t h = comm::fnv1a(setup);
  h = comm::fnv1a(fmt::format("{} {} {} {}", plan.out, plan.raw, plan.base_cluster, plan.timeout_s), h);
  for (const RawRecord& r : steps) h = comm::fnv1a(r.key() + "\n", h);
  return h;
}

// The progress line: a bar with ETA on a terminal, plain lines otherwise; rank 0 only.
class Progress {
 public:
  Progress(std::size_t total, bool enabled) : total_(total), enabled_(enabled), tty_(::isatty(2) != 0) {}
  void step(std::size_t done, const std::string& what, bool measured) {
    if (measured) ++measured_;
    if (!enabled_) return;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double eta = measured_ > 0 ? elapsed / static_cast<double>(measured_) * static_cast<double>(total_ - done) : 0;
    if (tty_) {
      const int width = 30, filled = static_cast<int>(width * done / std::max<std::size_t>(total_, 1));
      std::fprintf(stderr, "\r[%s%s] %zu/%zu ETA %4.0fs  %-48.48s", std::string(static_cast<std::size_t>(filled), '#').c_str(),
                   std::string(static_cast<std::size_t>(width - filled), ' ').c_str(), done, total_, eta, what.c_str());
      if (done == total_) std::fputc('\n', stderr);
    } else {
      std::fprintf(stderr, "calibrate: %zu/%zu %s%s (ETA %.0f s)\n", done, total_, what.c_str(),
                   measured ? "" : " [resumed]", eta);
    }
    std::fflush(stderr);
  }

 private:
  std::size_t total_, measured_ = 0;
  bool enabled_, tty_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace

int run_calibrate(const CalibrateFlags& flags, const PresetStore& store, const std::string& command_line) {
  // MPI_Init waits for every rank and has no timeout: a rank stopped at spawn hung the job for ever (issue 19, item 8).
  comm::StartupWatchdog startup(startup_timeout(flags.timeout) + 5, "calibrate");
  comm::MpiSession mpi(nullptr, nullptr);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  auto fail = [&](int code, const std::string& message) {
    if (rank == 0) {
      std::fprintf(stderr, "error: %s\n", io::escape_for_line(message).c_str());
      std::fflush(stderr);
    }
    return code;
  };

  // Ranks started with other flags would measure other sizes and wait on each other forever.
  if (const std::vector<int> odd = comm::ranks_with_other_arguments(); !odd.empty())
    return fail(2, fmt::format("rank(s) {} were started with other flags than rank 0: give every rank the same "
                               "calibrate command line", fmt::join(odd, ", ")));
  if (const std::string why = comm::ranks_per_node_problem(); !why.empty()) return fail(2, why);
  if (const std::string why = comm::ranks_per_node_mismatch(); !why.empty()) return fail(2, why);
  RunPlan plan;
  try {
    plan = resolve_plan(flags, store, size);
  } catch (const BadInputError& e) {
    return fail(2, e.what());
  } catch (const InputError& e) {
    return fail(2, e.what());
  }
  // Files: rank 0 looks (and reads what --resume continues), everyone hears the verdict.
  std::string resume_text;
  {
    std::string verdict;
    if (rank == 0) {
      verdict = check_writable(plan.out, "--out");
      if (verdict.empty()) verdict = check_raw_target(plan.raw, flags.resume);
      if (verdict.empty()) verdict = check_writable(plan.raw, "--raw");
      if (verdict.empty() && flags.resume && !fs::exists(plan.raw))
        verdict = fmt::format("--resume: {} does not exist (run without --resume to start afresh)", plan.raw);
      if (verdict.empty() && flags.resume) {  // bounded: --raw /dev/zero was read until std::bad_alloc
        const std::string why = io::read_file_bounded(plan.raw, resume_text, kMaxInputBytes, true);
        if (!why.empty()) verdict = fmt::format("--resume: cannot read {}: {}", plan.raw, why);
      }
    }
    verdict = agree(verdict, rank);
    if (!verdict.empty()) return fail(2, verdict);
  }

  const comm::WorldInfo world = comm::query_world();
  int min_local = world.local_size, max_local = world.local_size;
  MPI_Allreduce(MPI_IN_PLACE, &min_local, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &max_local, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (min_local != max_local)
    return fail(2, fmt::format("nodes run {} to {} ranks each; give every node the same number of ranks (mpirun "
                               "-npernode N)", min_local, max_local));

  std::string where = "start-up";
  try {
    Coordinator co(plan.timeout_s);
    startup.disarm();  // from here the coordinator's deadlines and watchdog hold every rank
    // NCCL first: it picks this rank's GPU, which the device then uses.
    std::unique_ptr<comm::Communicator> world_comm = comm::make_world(plan.backend);
    std::unique_ptr<Device> device = plan.backend == "nccl" ? make_gpu_device() : make_cpu_device();
    if (plan.base_cluster.empty()) {
      // GPU without --base-cluster: the first cluster preset whose GPU this is ("h200" in "NVIDIA H200").
      std::string name = lower(device->description());
      for (const std::string& c : store.names(PresetKind::cluster)) {
        const ClusterSpec spec = store.cluster(c);
        const std::string stem = lower(spec.gpu_name.substr(0, spec.gpu_name.find('-')));
        if (name.find(stem) != std::string::npos) {
          plan.base_cluster = c;
          plan.preset_peak_flops = spec.gpu.bf16_tflops * 1e12;
          break;
        }
      }
      if (plan.base_cluster.empty())
        return fail(2, fmt::format("no cluster preset has the GPU '{}': name the closest with --base-cluster NAME",
                                   device->description()));
    }
    // Scopes: the world, and across several nodes also one node and the rails (one rank per node).
    std::unique_ptr<comm::Communicator> intra, rail;
    if (world.nodes > 1) {
      const comm::SplitKey a = comm::intra_node_split(world), b = comm::rail_split(world);
      intra = world_comm->split(a.color, a.key);
      rail = world_comm->split(b.color, b.key);
    }
    std::vector<RawRecord> steps = plan_steps(plan, world, comm::element_bytes(device->dtype()));

    // Resume: rank 0 reads the raw CSV, every rank parses the same text.
    std::vector<RawRecord> done_records;
    const std::string setup = fmt::format("backend={} ranks={} nodes={} ranks_per_node={} dtype={} quick={}", plan.backend,
                                          world.size, world.nodes, world.local_size, comm::to_string(device->dtype()),
                                          plan.quick ? 1 : 0);
    if (const std::vector<int> odd = comm::ranks_with_other_value(plan_hash(plan, steps, setup)); !odd.empty())
      return fail(2, fmt::format("rank(s) {} resolved another measurement plan than rank 0 from the same flags (another "
                                 "working folder, preset folder or environment?): give every rank the same files",
                                 fmt::join(odd, ", ")));
    if (flags.resume) {
      std::string text = resume_text;
      co.broadcast(text);
      std::string old_setup;
      try {
        done_records = parse_csv(text, plan.raw, old_setup);
      } catch (const std::runtime_error& e) {
        return fail(2, fmt::format("--resume: {}", e.what()));
      }
      if (old_setup != setup)
        return fail(2, fmt::format("--resume: {} was measured as '{}', this run is '{}'; run without --resume",
                                   plan.raw, old_setup, setup));
    }
    std::set<std::string> done_keys;
    for (const RawRecord& r : done_records) done_keys.insert(r.key());

    // The raw CSV, written by rank 0 as measurements arrive (append + flush: a crash loses at most one line). Every
    // write is checked (a full disk cut it mid-line with exit 0; issue 19, item 5): rank 0 notes the failure and
    // stops the run at the next check-in, on every rank alike (exit 1, the previous profile untouched).
    std::FILE* raw = nullptr;
    std::string raw_error;
    auto raw_put = [&](const std::string& text) {
      if (raw == nullptr || !raw_error.empty()) return;
      errno = 0;
      if (std::fputs(text.c_str(), raw) < 0 || std::fflush(raw) != 0)
        raw_error = fmt::format("--raw {}: cannot write ({}); the lines before the failure are kept", plan.raw,
                                std::strerror(errno != 0 ? errno : EIO));
    };
    if (rank == 0) {
      try {
        if (flags.resume) {
          // Rewrite what was kept (drops a partial last line), then append.
          std::string text = csv_header(setup);
          for (const RawRecord& r : done_records) text += csv_line(r);
          io::write_file_atomically(plan.raw, text, "--raw");
          raw = std::fopen(plan.raw.c_str(), "a");
        } else {
          raw = std::fopen(plan.raw.c_str(), "w");
          raw_put(csv_header(setup));
        }
        if (raw == nullptr) raw_error = fmt::format("--raw {}: cannot write ({})", plan.raw, std::strerror(errno));
      } catch (const std::exception& e) {
        raw_error = e.what();
      }
    }

    // Fault injection for the fault tests: SHARDPLAN_CALIBRATE_FAULT=hang:R stops rank R before it measures;
    // exit:R ends rank R there (a crashed node).
    int hang_rank = -1;
    if (const char* fault = std::getenv("SHARDPLAN_CALIBRATE_FAULT"); fault && std::string(fault).rfind("hang:", 0) == 0)
      hang_rank = std::atoi(fault + 5);
    if (const char* fault = std::getenv("SHARDPLAN_CALIBRATE_FAULT");
        fault && std::string(fault).rfind("exit:", 0) == 0 && std::atoi(fault + 5) == rank)
      std::_Exit(3);

    Progress progress(steps.size(), rank == 0 && !flags.quiet);
    std::vector<RawRecord> records = done_records;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const RawRecord& step = steps[i];
      where = step_name(step);
      if (done_keys.count(step.key())) {
        progress.step(i + 1, where, false);
        continue;
      }
      if (rank == hang_rank)
        while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
      if (!co.checkin(where, !raw_error.empty())) break;  // rank 0 could not write the raw CSV: every rank stops
      RawRecord r;
      try {
        if (step.kind == "collective") {
          comm::Communicator& group = step.scope == "world" ? *world_comm : step.scope == "intra_node" ? *intra : *rail;
          r = measure_collective(co, group, *device, step, plan.collective_timing);
        } else if (step.kind == "gemm") {
          r = measure_gemm(co, *device, step, plan.gemm_timing);
        } else if (step.kind == "elementwise") {
          r = measure_elementwise(co, *device, step, plan.gemm_timing);
        } else {
          r = measure_copy(co, *device, step, plan.gemm_timing);
        }
      } catch (const comm::CommError& e) {  // a collective timed out: name the rank that went silent, if one did
        const std::string note = std::string(e.what()).find("shown no sign of life") == std::string::npos
                                     ? co.silent_ranks_note() : std::string();
        throw comm::CommError(e.what() + note, e.rank());
      }
      records.push_back(r);
      raw_put(csv_line(r));
      progress.step(i + 1, where, true);
    }
    if (raw != nullptr && std::fclose(raw) != 0 && raw_error.empty())
      raw_error = fmt::format("--raw {}: cannot write ({})", plan.raw, std::strerror(errno));
    {
      std::string why = raw_error;  // rank 0 knows; every rank ends alike
      co.broadcast(why);
      if (!why.empty()) return fail(1, why);
    }
    where = "the profile";

    // The environment, for the profile's meta.
    char host[MPI_MAX_PROCESSOR_NAME] = {};
    int host_length = 0;
    MPI_Get_processor_name(host, &host_length);
    const std::vector<std::string> hosts = gather_strings(host, rank, size);
    const std::vector<std::string> devices = gather_strings(device->description(), rank, size);
    std::string status;
    if (rank == 0) {
      ProfileMeta meta;
      meta.name = fs::path(plan.out).stem().string();
      meta.date = utc_now();
      meta.command = command_line;
      meta.backend = plan.backend;
      meta.base_cluster = plan.base_cluster;
      meta.dtype = comm::to_string(device->dtype());
      meta.cpu = !device->gpu();
      meta.quick = plan.quick;
      meta.ranks = world.size;
      meta.nodes = world.nodes;
      meta.ranks_per_node = world.local_size;
      for (const std::string& h : hosts)
        if (std::find(meta.hostnames.begin(), meta.hostnames.end(), h) == meta.hostnames.end()) meta.hostnames.push_back(h);
      for (const std::string& d : devices)
        if (std::find(meta.devices.begin(), meta.devices.end(), d) == meta.devices.end()) meta.devices.push_back(d);
      meta.versions.emplace_back("mpi", comm::mpi_library_version());
      if (std::string(world_comm->backend()) == "nccl") meta.versions.emplace_back("nccl", world_comm->library_version());
      if (!device->versions().empty()) meta.versions.emplace_back("cuda", device->versions());
      for (char** e = environ; *e != nullptr; ++e) {
        const std::string kv = *e;
        // What a user sets to tune the transport (mpirun's own OMPI_MCA_orte_*/ess_* plumbing is left out), and
        // an emulated node layout (comm.hpp query_world): its "nodes" may share one machine.
        bool tuning = kv.rfind("NCCL_", 0) == 0 || kv.rfind("UCX_", 0) == 0 ||
                      kv.rfind("SHARDPLAN_RANKS_PER_NODE=", 0) == 0;
        for (const char* p : {"OMPI_MCA_btl", "OMPI_MCA_pml", "OMPI_MCA_coll", "OMPI_MCA_mtl", "OMPI_MCA_osc"})
          tuning = tuning || kv.rfind(p, 0) == 0;
        if (tuning) {
          const auto eq = kv.find('=');
          meta.environment.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
        }
      }
      std::sort(meta.environment.begin(), meta.environment.end());
      meta.preset_peak_flops = plan.preset_peak_flops;
      const Profile profile = build_profile(meta, records);
      try {
        // Read back before it is written: a profile predict would refuse (an edited --resume CSV with 1e300 s) is
        // not written at all (issue 19, item 17).
        const std::string text = profile_yaml(profile);
        try {
          (void)parse_profile_yaml(text, plan.out, store);
        } catch (const InputError& e) {
          throw std::runtime_error(fmt::format("the measurements give a profile shardplan could not read back ({}); {} "
                                               "was not written, {} keeps the measurements",
                                               e.what(), plan.out, plan.raw));
        }
        io::write_file_atomically(plan.out, text, "--out");
        // The measurements as nccl-tests would print them, then the fit's summary.
        std::fputs(nccl_tests_table(records, comm::to_string(device->dtype()),
                                    static_cast<int64_t>(comm::element_bytes(device->dtype())))
                       .c_str(),
                   stdout);
        std::fputs(summary_text(profile, plan.out, plan.raw).c_str(), stdout);
        std::fflush(stdout);
        if (profile.wrong > 0)
          status = fmt::format("{} elements came back wrong from the collectives (see 'wrong' in {}): the "
                               "communication library or the network is broken",
                               profile.wrong, plan.out);
      } catch (const std::runtime_error& e) {
        status = e.what();
      }
    }
    co.broadcast(status);
    if (!status.empty()) return fail(1, status);
  } catch (const std::exception& e) {
    // A failed or hung rank: this rank says so (naming the rank when known) and ends every rank.
    std::fprintf(stderr, "error: rank %d, during %s: %s\n", rank, where.c_str(), io::escape_for_line(e.what()).c_str());
    std::fflush(stderr);
    comm::MpiSession::abort_job(1);
  }
  return 0;
}

}  // namespace shardplan::calibrate
