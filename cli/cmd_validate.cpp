// `shardplan validate`: hold a prediction against a measurement.
//   mpirun -np 4 shardplan validate --preset tiny --zero 3 --backend cpu     trains with the reference loop
//   shardplan validate --preset llama3-8b --gpus 64 ... --measurements run.jsonl   any run's per-step log
// The prediction is made before and apart from the measurement: from the model, the presets and --cluster only.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.hpp"
#include "cli/config_flags.hpp"
#include "cli/render_prediction.hpp"
#include "cli/render_validation.hpp"
#include "cli/report_option.hpp"
#include "cli/terminal.hpp"
#include "comm/comm.hpp"
#include "io/atomic_write.hpp"
#include "io/input_file.hpp"
#include "io/measurements.hpp"
#include "planner/moe.hpp"
#include "planner/error.hpp"
#include "planner/validation.hpp"
#include "reference/backend.hpp"
#include "reference/reference.hpp"

namespace shardplan::cli {

namespace {

struct ValidateOptions {
  ConfigFlags config;
  std::string format = "table";
  std::string report;        // --report FILE.md|.html
  std::string measurements;  // --measurements FILE.jsonl: compare with a log instead of running
  std::string backend = "cpu";
  std::string data = "corpus";
  std::string steps_out;     // --steps-out FILE.jsonl: the reference loop's steps, in the measurements schema
  int64_t steps = 8, warmup = 2;
  uint64_t seed = 1234;
  double timeout_s = 120;
  bool quiet = false;
  // Whether these flags were typed (CLI::App::count), to tell a choice from a default.
  bool precision_given = false, framework_given = false, warmup_given = false;
};

void check_format(const std::string& f) {
  if (f != "table" && f != "json" && f != "yaml" && f != "csv" && f != "markdown")
    throw InputError("--format '" + f + "' is not one of: table, json, yaml, csv, markdown");
}

// An output file named on the command line must be creatable before a run of minutes starts: its folder exists
// and is writable (every rank checks; rank 0 writes).
void check_output_path(const std::string& path, const char* flag) {
  if (path.empty()) return;
  // A device, a FIFO or /dev/stdout is written in place (io/atomic_write.hpp): its folder need not be writable.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) return;
  const std::filesystem::path p(path);
  const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw InputError(fmt::format("{} {}: the folder {} does not exist (create it first)", flag, path, dir.string()));
  if (std::filesystem::is_directory(p, ec))
    throw InputError(fmt::format("{} {}: is a folder; name a file", flag, path));
  if (::access(dir.c_str(), W_OK) != 0)
    throw InputError(fmt::format("{} {}: the folder {} is not writable", flag, path, dir.string()));
}

// Every rank must train the same configuration (comm::ranks_with_other_arguments).
void check_same_command_line() {
  const std::vector<int> odd = comm::ranks_with_other_arguments();
  if (!odd.empty())
    throw InputError(fmt::format("rank(s) {} were started with other flags than rank 0: give every rank the same "
                                 "validate command line", fmt::join(odd, ", ")));
}

// Test hook for the fault tests (tests/mpi/validate_faults.sh): SHARDPLAN_VALIDATE_FAULT=hang:R or exit:R makes
// rank R stall forever, or die, after its first step.
void inject_fault(int rank, int64_t step) {
  const char* spec = std::getenv("SHARDPLAN_VALIDATE_FAULT");
  if (spec == nullptr || step != 0) return;
  const std::string s(spec);
  const size_t colon = s.find(':');
  if (colon == std::string::npos || std::atoi(s.c_str() + colon + 1) != rank) return;
  if (s.compare(0, colon, "exit") == 0) std::_Exit(3);
  if (s.compare(0, colon, "hang") == 0)
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

int64_t grad_accum_of(const Strategy& s) { return s.global_batch / std::max<int64_t>(s.micro_batch * s.dp, 1); }

// The reference loop trains data parallel only, in the precisions its backend has.
void check_reference_strategy(const Strategy& s) {
  if (s.tp != 1 || s.pp != 1 || s.sp || s.vpp != 1)
    throw InputError("validate trains the data-parallel reference loop: drop --tp/--pp/--vpp/--sp (tensor and "
                     "pipeline parallelism are predicted, not run)");
  if (s.cp != 1)
    throw InputError("validate trains the data-parallel reference loop: drop --cp (context parallelism is predicted, "
                     "not run: reference/README.md)");
  if (s.hsdp > 0 && s.hsdp != s.dp) throw InputError("validate: --hsdp is not run by the reference loop; drop it");
  if (s.offload_optimizer) throw InputError("validate: --offload-optimizer is not run by the reference loop; drop it");
  if (s.global_batch % (s.micro_batch * s.dp) != 0)
    throw InputError(fmt::format("--global-batch {} is not a multiple of --micro-batch {} × {} ranks", s.global_batch,
                                 s.micro_batch, s.dp));
}

reference::RunConfig run_config_of(const ResolvedConfig& cfg, const ValidateOptions& o) {
  reference::RunConfig rc;
  rc.model = cfg.model;
  rc.zero = cfg.strategy.zero;
  rc.micro_batch = cfg.strategy.micro_batch;
  rc.grad_accum = grad_accum_of(cfg.strategy);
  rc.seq = cfg.strategy.seq;
  rc.recompute = cfg.strategy.recompute;
  rc.precision = cfg.strategy.precision;
  rc.backend = o.backend;
  rc.data = o.data;
  rc.steps = o.steps;
  rc.warmup_steps = o.warmup;
  rc.seed = o.seed;
  rc.comm_timeout_s = o.timeout_s;
  return rc;
}

std::map<std::string, int64_t> component_map(const reference::MemoryByComponent& m) {
  return {{"params", m.params},       {"grads", m.grads},   {"master", m.master}, {"optimizer", m.optimizer},
          {"activations", m.activations}, {"logits", m.logits}, {"buffers", m.buffers}};
}

// What the run measured, by CONTRACT names. On GPU the device memory in use before the loop allocated anything
// is the `runtime` component (CUDA context, cuBLAS workspace, NCCL buffers), and counts toward the peak.
MeasuredFigures measured_figures(const reference::RunResult& r) {
  MeasuredFigures f{r.median_step_s, r.peak_bytes, component_map(r.at_peak)};
  if (r.runtime_bytes > 0) {
    f.components["runtime"] = r.runtime_bytes;
    f.peak_bytes = r.peak_bytes + r.runtime_bytes;
  }
  return f;
}

// One line of the measurements schema (io/measurements.hpp) per step, so `validate --measurements` replays a run.
nlohmann::json step_json(const reference::StepRecord& r) {
  return {{"step", r.step},           {"warmup", r.warmup},       {"step_s", r.step_s},
          {"compute_s", r.compute_s}, {"comm_wait_s", r.comm_wait_s}, {"loss", r.loss},
          {"grad_norm", r.grad_norm}, {"peak_bytes", r.peak_bytes}, {"components", component_map(r.at_peak)},
          {"rss_bytes", r.rss_bytes}};
}

// Rank 0's progress: a line redrawn in place on a terminal; under mpirun or into a log (stderr is no TTY) a plain
// line with the ETA at most every kPlainProgressEvery seconds, and for the first and last steps.
constexpr double kPlainProgressEvery = 5.0;

class StepProgress {
 public:
  StepProgress(int64_t total, bool tty) : total_(total), tty_(tty) {}
  void print(const reference::StepRecord& r) {
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const int64_t done = r.step + 1;
    const double eta = elapsed / static_cast<double>(done) * static_cast<double>(total_ - done);
    if (tty_) {
      std::fprintf(stderr, "\rvalidate: step %lld/%lld %s loss %.4f  %.3f s  peak %.1f MB  ETA %.0f s   ",
                   static_cast<long long>(done), static_cast<long long>(total_), r.warmup ? "(warm-up)" : "         ",
                   r.loss, r.step_s, static_cast<double>(r.peak_bytes) / 1e6, eta);
      if (done == total_) std::fputc('\n', stderr);
    } else {
      if (done != 1 && done != total_ && std::chrono::duration<double>(now - last_).count() < kPlainProgressEvery) return;
      std::fprintf(stderr, "validate: step %lld/%lld%s, loss %.4f, %.3f s, peak %.1f MB, ETA %.0f s\n",
                   static_cast<long long>(done), static_cast<long long>(total_), r.warmup ? " (warm-up)" : "", r.loss,
                   r.step_s, static_cast<double>(r.peak_bytes) / 1e6, eta);
      last_ = now;
    }
    std::fflush(stderr);
  }

 private:
  int64_t total_;
  bool tty_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_ = start_;
};

// The prediction for the reference loop on CPU ranks: its memory needs no calibration; its time needs a profile
// measured on CPU ranks (calibrate --backend mpi), else it is not predicted. On GPUs (--backend cuda) the cluster
// is the one given (--gpu, --cluster: a preset or a profile of calibrate --backend nccl).
bool prepare_prediction(ResolvedConfig& cfg, const ValidateOptions& o, std::vector<std::string>& notes) {
  if (o.backend == "cuda") {
    if (cfg.cluster.gpu.cpu_ranks)
      throw InputError("--cluster " + o.config.cluster + " was measured on CPU ranks; --backend cuda needs a GPU "
                       "cluster (--gpu NAME, or a profile of calibrate --backend nccl)");
    if (cfg.cluster_defaulted)
      notes.push_back(std::string("no --cluster or --gpu given; predicted on ") + kDefaultCluster +
                      " (pass --gpu with the GPU the ranks run on)");
    return true;
  }
  const bool cpu_profile = cfg.cluster.gpu.cpu_ranks;
  cfg.cluster.gpu.cpu_ranks = true;
  if (cpu_profile) return true;
  notes.push_back(o.config.cluster.empty()
                      ? "step time not predicted: CPU ranks need a calibration profile (mpirun -np N shardplan calibrate "
                        "--backend mpi --out cpu.yaml, then --cluster cpu.yaml)"
                      : "step time not predicted: --cluster " + o.config.cluster +
                            " is not a profile measured on CPU ranks (calibrate --backend mpi)");
  return false;
}

void emit(const Prediction& p, const Validation& v, const ValidationSource& src, const ValidateOptions& o) {
  // The table fits the terminal or COLUMNS (issue 19, item 23); piped output without COLUMNS is unchanged.
  const std::string text =
      render_validation(p, v, src, o.format, o.format == "table" ? stdout_terminal(TerminalFlags{}) : kPlainTerminal);
  write_report_option(o.report, validation_json(p, v, src));
  std::cout << text << std::flush;
}

void validate_from_log(const ValidateOptions& o, const GlobalOptions& global) {
  if (o.warmup_given && o.warmup < 0) throw InputError(fmt::format("--warmup must be 0 or more, got {}", o.warmup));
  if (!(o.timeout_s >= 1) || o.timeout_s > 86400)
    throw InputError(fmt::format("--timeout must be between 1 and 86400 seconds, got {}", o.timeout_s));
  if (!o.report.empty() && io::same_file(o.measurements, o.report))
    throw InputError(fmt::format("--report {} is the --measurements log; write the report to another file", o.report));
  const PresetStore store = load_presets(global);
  const ResolvedConfig cfg = resolve_config(o.config, store);
  const Prediction p = predict(cfg.model, cfg.strategy, cfg.cluster);
  const Measurement m = summarise_measurements(load_measurements(o.measurements), o.warmup_given ? o.warmup : 1,
                                               o.measurements);
  ValidationSource src;
  src.what = "measurements " + o.measurements;
  src.steps_timed = m.steps_timed;
  if (cfg.cluster_defaulted) src.notes.push_back(std::string("no --cluster or --gpu given; predicted on ") + kDefaultCluster);
  // The batch the prediction is for, when --global-batch did not say (give the run's own to compare like with like).
  if (!cfg.batch_note.empty()) src.notes.push_back(cfg.batch_note);
  const MeasuredFigures figures{m.step_s, m.peak_bytes, m.components};
  emit(p, compare_with_measurement(p, figures, true), src, o);
}

// The options of a training run, before MPI starts (every rank alike).
void check_run_options(ValidateOptions& o) {
  if (o.backend != "cpu" && o.backend != "cuda")
    throw InputError("--backend '" + o.backend + "' is not one of: cpu (Eigen + MPI), cuda (cuBLASLt + NCCL)");
  if (o.backend == "cuda" && !reference::cuda_backend_built())
    throw InputError("--backend cuda: this build has no CUDA backend (the CUDA toolkit was not found when it was "
                     "configured); use --backend cpu or rebuild on a machine with /usr/local/cuda");
  if (o.backend == "cuda" && reference::cuda_devices_visible() == 0)
    throw InputError("--backend cuda: no GPU is visible to this process (check nvidia-smi and CUDA_VISIBLE_DEVICES, "
                     "or use --backend cpu)");
  if (o.data != "corpus" && o.data != "synthetic")
    throw InputError("--data '" + o.data + "' is not one of: corpus, synthetic");
  if (o.steps < 1) throw InputError(fmt::format("--steps must be at least 1, got {}", o.steps));
  if (o.warmup < 0) throw InputError(fmt::format("--warmup must be 0 or more, got {}", o.warmup));
  // A validation needs tens of steps; 2^63 would train for ever (and its per-step log grow without end).
  if (o.steps > 100000 || o.warmup > 100000)
    throw InputError(fmt::format("--steps {} / --warmup {}: at most 100000 each (a validation needs tens)", o.steps,
                                 o.warmup));
  // At least a second, as calibrate's: 1e-9 s was accepted and then failed the first collective with exit 1.
  if (!(o.timeout_s >= 1) || o.timeout_s > 86400)
    throw InputError(fmt::format("--timeout must be between 1 and 86400 seconds, got {}", o.timeout_s));
  if (o.framework_given && o.config.framework != "reference")
    throw InputError("--framework " + o.config.framework + ": validate runs shardplan's reference loop, so the "
                     "prediction is for --framework reference (compare other frameworks with --measurements)");
  if (const std::string why = comm::ranks_per_node_problem(); !why.empty()) throw InputError(why);
  check_output_path(o.steps_out, "--steps-out");
  check_output_path(o.report, "--report");
  io::require_distinct_outputs({{"--steps-out", o.steps_out}, {"--report", o.report}});
  o.config.framework = "reference";
  if (!o.precision_given) o.config.precision = "fp32";
}

// The configuration every rank resolved, compared (a hash of the prediction and of the run): the same flags in other
// working folders read other files (issue 19, item 9: a silently wrong measurement, or MPI_ERR_TRUNCATE). A rank
// whose files fail says so on rank 0 only; every rank throws alike.
struct Resolved {
  ResolvedConfig cfg;
  ValidationSource src;
  bool time_predicted = false;
  Prediction p;
  reference::RunConfig rc;
};

Resolved resolve_on_every_rank(const ValidateOptions& o, const GlobalOptions& global, const comm::WorldInfo& world_info) {
  Resolved r;
  std::string problem;
  try {
    const PresetStore store = load_presets(global);
    ConfigFlags flags = o.config;
    flags.one_micro_batch_default = true;
    r.cfg = resolve_config(flags, store);
    check_reference_strategy(r.cfg.strategy);
    if (const std::string feature = first_extended_feature(r.cfg.model); !feature.empty())  // issue 17
      throw InputError(fmt::format("validate: the reference loop trains a dense GPT; model '{}' uses '{}', which it "
                                   "does not implement (predict and plan model it; validate --measurements compares "
                                   "a run of your own)", r.cfg.model.name, feature));
    if (!r.cfg.batch_note.empty()) r.src.notes.push_back(r.cfg.batch_note);
    r.time_predicted = prepare_prediction(r.cfg, o, r.src.notes);
    r.p = predict(r.cfg.model, r.cfg.strategy, r.cfg.cluster);  // before, and apart from, the run
    r.rc = run_config_of(r.cfg, o);
    if (const std::string why = reference::check_config(r.rc, world_info.size); !why.empty()) throw InputError(why);
  } catch (const InputError& e) {
    problem = e.what();
  }
  const uint64_t mine = problem.empty() ? comm::fnv1a(prediction_json(r.p).dump()) : comm::fnv1a("\x01" + problem);
  const std::vector<int> odd = comm::ranks_with_other_value(mine);
  if (!problem.empty() && (odd.empty() || world_info.rank == 0)) throw InputError(problem);
  if (!odd.empty())
    throw InputError(fmt::format("rank(s) {} resolved another configuration than rank 0 from the same flags (other "
                                 "model, cluster or preset files, e.g. another working folder): give every rank the "
                                 "same files",
                                 fmt::join(odd, ", ")));
  // The reference loop's memory on CPU ranks, judged before training and by every rank alike (the smallest machine):
  // --micro-batch 100000 failed inside training with an error line per rank and exit 1 (issue 19, item 18).
  if (o.backend == "cpu") {
    const int64_t need = reference::bytes_needed(r.rc, world_info.size);
    const int64_t available = comm::min_over_ranks(reference::make_backend("cpu")->device_memory_available());
    if (available > 0 && need > available)
      throw InputError(fmt::format("the reference run needs about {:.2f} GB per rank but this machine has {:.2f} GB "
                                   "available: lower --micro-batch or --seq, use more ranks, a higher --zero, "
                                   "--recompute full, or a smaller model",
                                   static_cast<double>(need) / 1e9, static_cast<double>(available) / 1e9));
  }
  return r;
}

// Predicts, trains and compares; rank 0 prints and writes. Bad input throws InputError on every rank alike; a
// failure during training names the rank and ends the job.
void train_and_compare(ValidateOptions o, const GlobalOptions& global, const comm::WorldInfo& world_info,
                       comm::StartupWatchdog& startup) {
  if (o.config.gpus && *o.config.gpus != world_info.size)
    throw InputError(fmt::format("--gpus {} but mpirun started {} ranks: drop --gpus or start mpirun -np {}",
                                 *o.config.gpus, world_info.size, *o.config.gpus));
  o.config.gpus = world_info.size;
  check_same_command_line();
  if (const std::string why = comm::ranks_per_node_mismatch(); !why.empty()) throw InputError(why);
  Resolved resolved = resolve_on_every_rank(o, global, world_info);
  startup.disarm();  // start-up is over: training has its own deadlines (--timeout)
  ValidationSource& src = resolved.src;
  const bool time_predicted = resolved.time_predicted;
  const Prediction& p = resolved.p;
  const reference::RunConfig& rc = resolved.rc;

  const bool leader = world_info.rank == 0;
  const bool progress = leader && !o.quiet;
  StepProgress bar(o.steps + o.warmup, isatty(STDERR_FILENO) != 0);
  nlohmann::json steps = nlohmann::json::array();
  reference::RunResult result;
  try {
    std::unique_ptr<comm::Communicator> world = comm::make_world(o.backend == "cuda" ? "nccl" : "mpi");
    result = reference::run_training(rc, *world, [&](const reference::StepRecord& r) {
      inject_fault(world_info.rank, r.step);
      steps.push_back(step_json(r));
      if (progress) bar.print(r);
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: rank %d, during training: %s\n", world_info.rank, io::escape_for_line(e.what()).c_str());
    std::fflush(stderr);
    comm::MpiSession::abort_job(1);
  }
  if (!leader) return;

  src.what = fmt::format("the reference loop ({} backend, {} ranks, {} data)", o.backend, world_info.size, o.data);
  src.steps_timed = o.steps;
  src.steps = steps;
  const MeasuredFigures figures = measured_figures(result);
  if (!o.steps_out.empty()) {
    std::string lines;
    for (const nlohmann::json& s : steps) lines += s.dump() + "\n";
    io::write_file_atomically(o.steps_out, lines, "--steps-out");
  }
  emit(p, compare_with_measurement(p, figures, time_predicted), src, o);
}

// Every rank runs this under mpirun. Returns the exit code. An error is printed by rank 0 before MPI_Finalize,
// which waits for every rank: no rank can exit, and make mpirun end the job, before the line is out.
int validate_by_training(ValidateOptions o, const GlobalOptions& global) {
  check_run_options(o);  // before MPI: an InputError here goes to main, which prints it from rank 0 only
  // MPI_Init waits for every rank and has no timeout of its own (issue 19, item 8): --timeout covers start-up too.
  comm::StartupWatchdog startup(o.timeout_s + 5, "validate");
  comm::MpiSession mpi(nullptr, nullptr);
  const comm::WorldInfo world_info = comm::query_world();
  auto fail = [&](int code, const char* what) {
    if (world_info.rank == 0) {
      std::fprintf(stderr, "error: %s\n", io::escape_for_line(what).c_str());
      std::fflush(stderr);
    }
    return code;
  };
  try {
    train_and_compare(o, global, world_info, startup);
  } catch (const InputError& e) {
    return fail(2, e.what());
  } catch (const std::exception& e) {
    return fail(1, e.what());  // after training only rank 0 works (writes its outputs)
  }
  return 0;
}

}  // namespace

void add_validate_command(CLI::App& app, const GlobalOptions& global) {
  auto opts = std::make_shared<ValidateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "validate", "Train the reference FSDP loop (under mpirun) or read a run's log, and compare with the prediction");
  add_config_flags(*cmd, opts->config);
  cmd->add_option("--backend", opts->backend,
                  "Reference loop backend: cpu (Eigen + MPI) or cuda (one GPU per rank, cuBLASLt + NCCL); default cpu");
  cmd->add_option("--measurements", opts->measurements,
                  "Compare with a run's per-step log (JSON lines: step, step_s, peak_bytes, components) instead of "
                  "training");
  cmd->add_option("--steps", opts->steps, "Optimizer steps measured after warm-up (default 8)");
  cmd->add_option("--warmup", opts->warmup,
                  "Steps run first and not timed (default 2; with --measurements the first steps dropped, default 1)");
  cmd->add_option("--data", opts->data, "corpus (the shipped text) | synthetic (default corpus)");
  cmd->add_option("--seed", opts->seed, "Seed of the initial weights and the data order (default 1234)");
  cmd->add_option("--timeout", opts->timeout_s, "Seconds a rank may wait on another before the run ends (default 120)");
  cmd->add_option("--steps-out", opts->steps_out, "Write every step as a JSON line (the --measurements schema)");
  cmd->add_flag("--quiet", opts->quiet, "No progress line");
  cmd->add_option("--format", opts->format, "table | json | yaml | csv | markdown (default table)");
  add_report_option(*cmd, opts->report);
  cmd->callback([opts, cmd, &global] {
    check_format(opts->format);
    opts->precision_given = cmd->count("--precision") > 0;
    opts->framework_given = cmd->count("--framework") > 0;
    opts->warmup_given = cmd->count("--warmup") > 0;
    if (!opts->measurements.empty()) {
      for (const char* run_only : {"--backend", "--steps", "--data", "--seed", "--steps-out"})
        if (cmd->count(run_only) > 0)
          throw InputError(std::string(run_only) + " configures the reference loop; with --measurements nothing is "
                           "trained: drop it");
      validate_from_log(*opts, global);
    } else {
      if (const int code = validate_by_training(*opts, global); code != 0) {
        std::fflush(stdout);
        std::exit(code);  // MPI is finalised and the one error line printed (rank 0)
      }
    }
  });
}

}  // namespace shardplan::cli
