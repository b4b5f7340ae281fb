// `--emit DIR`: the plan's numbers (launch_facts), the file set with its README, and the all-or-nothing writer.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/emit_launch.hpp"
#include "cli/render_prediction.hpp"
#include "planner/error.hpp"
#include "planner/precision.hpp"

namespace shardplan::cli {

namespace fs = std::filesystem;

std::string double_quoted(const std::string& s) { return nlohmann::json(s).dump(); }

std::string shell_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

LaunchFacts launch_facts(const LaunchPlan& plan) {
  const Prediction& p = plan.prediction;
  const Strategy& s = p.strategy;
  LaunchFacts f;
  f.model_name = p.model.name;
  if (plan.hf) {
    const fs::path config(plan.hf->source_path);
    f.model_ref = fs::absolute(config).parent_path().lexically_normal().string();
    f.block_class = plan.hf->block_class;
  } else {
    f.model_ref = p.model.name;
  }
  f.gpus = s.gpus;
  f.procs_per_node = std::min(s.gpus, p.cluster.gpus_per_node);
  f.nodes = (s.gpus + f.procs_per_node - 1) / f.procs_per_node;
  f.tp = s.tp;
  f.pp = s.pp;
  f.dp = s.dp;
  f.vpp = s.vpp;
  // ZeRO-0 shards nothing: every data-parallel rank is a replica.
  f.shard = s.zero == 0 ? 1 : shard_degree(s);
  f.replicate = f.shard > 0 ? s.dp / f.shard : 1;
  f.micro_batch = s.micro_batch;
  f.grad_accum = grad_accum_steps(s);
  f.global_batch = s.global_batch;
  f.seq = s.seq;
  f.layers = p.model.layers;
  f.layers_per_virtual_stage = p.model.layers / std::max<int64_t>(1, s.pp * s.vpp);
  f.zero = s.zero;
  f.sp = s.sp;
  f.offload = s.offload_optimizer;
  f.flash = s.flash_attn;
  const DType compute = precision_compute_dtype(s.precision);
  f.bf16 = compute == DType::bf16;
  f.fp16 = compute == DType::fp16;
  f.fp32_master = s.precision != Precision::pure_bf16 && s.precision != Precision::pure_fp16;
  f.recompute = s.recompute;
  f.schedule = s.schedule;
  f.framework = s.framework;
  if (plan.training && plan.training->steps > 0) f.steps = plan.training->steps;
  return f;
}

namespace {

std::string readme(const LaunchPlan& plan, const LaunchFacts& f, const std::vector<EmittedFile>& files) {
  const Prediction& p = plan.prediction;
  const Strategy& s = p.strategy;
  std::string out = fmt::format("# Launch files for {} on {} × {}\n\n", f.model_name, f.gpus, p.cluster.gpu.name);
  out += fmt::format("Written by `shardplan plan --emit` for the recommended configuration ({} modelled):\n\n",
                     to_string(s.framework));
  out += fmt::format("- {:.2f} B parameters; {} node(s) × {} GPUs (cluster {})\n", p.params.total / 1e9, f.nodes,
                     f.procs_per_node, p.cluster.name);
  out += fmt::format("- tp {} · pp {}{} · dp {} (ZeRO-{}, model states sharded over {}, {} replica(s)){}{}\n", f.tp,
                     f.pp, f.vpp > 1 ? fmt::format(" (vpp {})", f.vpp) : "", f.dp, f.zero, f.shard, f.replicate,
                     f.sp ? " · sequence parallel" : "", f.offload ? " · optimizer offloaded to the host" : "");
  out += fmt::format("- micro-batch {} × {} accumulation steps = global batch {} sequences of {} tokens\n",
                     f.micro_batch, f.grad_accum, f.global_batch, f.seq);
  out += fmt::format("- recompute {}, {}, precision {}\n", to_string(f.recompute),
                     f.flash ? "flash attention" : "no flash attention", to_string(s.precision));
  if (p.time.modelled)
    out += fmt::format("- predicted: step {:.3f} s, {:.0f} tokens/s per GPU, MFU {:.1f} %, peak {:.1f} GB per GPU\n",
                       p.time.step_s, p.throughput.tokens_per_s_per_gpu, 100 * p.throughput.mfu,
                       static_cast<double>(p.peak_bytes()) / kGB);
  if (plan.training)
    out += fmt::format("- training {} ({} optimizer steps)\n", training_line(*plan.training), plan.training->steps);
  out += fmt::format("\nModel: `{}`{}.\n", f.model_ref,
                     plan.hf ? " (the folder of the config.json given to --hf-config)"
                             : " — not from --hf-config: point MODEL (train_fsdp2.py) and the other files at a Hugging "
                               "Face model id or folder with this architecture");
  out += "\n## Files\n\n";
  for (const EmittedFile& file : files) {
    out += fmt::format("- `{}`\n", file.name);
    for (const std::string& note : file.notes) out += fmt::format("  - note: {}\n", note);
  }
  out += "\n## Run\n\n";
  out += "- PyTorch FSDP2: on every node `NODE_RANK=<i> MASTER_ADDR=<node 0> ./torchrun.sh`\n";
  out += "- Accelerate: `accelerate launch --config_file accelerate_config.yaml your_train.py`\n";
  out += "- DeepSpeed: `deepspeed --num_nodes N --num_gpus G your_train.py --deepspeed ds_config.json`\n";
  out += "- Megatron-LM: `source megatron_args.sh; torchrun ... pretrain_gpt.py \"${MEGATRON_ARGS[@]}\"` (add data, "
         "tokenizer and optimizer arguments)\n";
  out += "- torchtitan: `CONFIG_FILE=torchtitan.toml ./run_train.sh`\n";
  return out;
}

// ---- the all-or-nothing writer ------------------------------------------------------------------------------------

[[noreturn]] void fail(const std::string& dir, const std::string& what, const std::string& reason) {
  throw InputError(fmt::format("--emit {}: cannot write {}: {}; choose a folder you can write to", dir, what, reason));
}

// Writes one file with open/write/fsync (so that a rename publishes complete contents). Returns "" or the reason.
std::string write_file(const fs::path& path, const EmittedFile& file) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, file.executable ? 0755 : 0644);
  if (fd < 0) return std::strerror(errno);
  const char* data = file.text.data();
  size_t left = file.text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, data, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string reason = std::strerror(errno);
      ::close(fd);
      return reason;
    }
    data += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) return std::strerror(errno);
  return "";
}

std::string temp_suffix() { return fmt::format(".shardplan-tmp-{}", ::getpid()); }

}  // namespace

std::vector<EmittedFile> launch_files(const LaunchPlan& plan) {
  const LaunchFacts f = launch_facts(plan);
  std::vector<EmittedFile> files = {emit_torchrun(plan, f),    emit_fsdp2_script(plan, f), emit_accelerate(plan, f),
                                    emit_deepspeed(plan, f),   emit_megatron(plan, f),     emit_torchtitan(plan, f)};
  EmittedFile doc{"README.md", readme(plan, f, files), false, {}};
  files.push_back(std::move(doc));
  return files;
}

void write_files_atomically(const std::string& dir, const std::vector<EmittedFile>& files) {
  std::error_code ec;
  if (dir.empty()) throw InputError("--emit needs a folder name");
  std::string trimmed = dir;  // "out/" names the folder "out"
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const fs::path target(trimmed);
  const fs::file_status st = fs::status(target, ec);
  if (fs::exists(st) && !fs::is_directory(st)) fail(dir, "into it", "it exists and is not a folder");

  if (!fs::exists(st)) {
    // A new folder: fill a hidden sibling, then rename it into place — one rename publishes every file.
    fs::path parent = target.parent_path();
    if (parent.empty()) parent = ".";
    if (!fs::is_directory(parent, ec)) fail(dir, "into it", fmt::format("the parent folder {} does not exist", parent.string()));
    const fs::path staging = parent / fmt::format(".{}{}", target.filename().string(), temp_suffix());
    if (!fs::create_directory(staging, ec)) fail(dir, staging.string(), ec ? ec.message() : "it already exists");
    for (const EmittedFile& file : files) {
      const std::string reason = write_file(staging / file.name, file);
      if (!reason.empty()) {
        fs::remove_all(staging, ec);
        fail(dir, file.name, reason);
      }
    }
    fs::rename(staging, target, ec);
    if (ec) {
      const std::string reason = ec.message();
      fs::remove_all(staging, ec);
      fail(dir, "the folder", reason);
    }
    return;
  }

  // An existing folder: every file to a hidden temporary name beside its final one, then the renames.
  std::vector<fs::path> temps;
  auto remove_all_of = [&](const std::vector<fs::path>& paths) {
    for (const fs::path& t : paths) fs::remove(t, ec);
  };
  for (const EmittedFile& file : files) {
    if (fs::is_directory(target / file.name, ec)) {
      remove_all_of(temps);
      fail(dir, file.name, "a folder of that name is in the way");
    }
    const fs::path temp = target / fmt::format(".{}{}", file.name, temp_suffix());
    const std::string reason = write_file(temp, file);
    if (!reason.empty()) {
      fs::remove(temp, ec);
      remove_all_of(temps);
      fail(dir, file.name, reason);
    }
    temps.push_back(temp);
  }
  for (size_t i = 0; i < files.size(); ++i) {
    fs::rename(temps[i], target / files[i].name, ec);
    if (ec) {
      const std::string reason = ec.message();
      // Leave no mixed set: the files already renamed go too (they are this run's), with the temporaries.
      std::vector<fs::path> written;
      for (size_t j = 0; j < i; ++j) written.push_back(target / files[j].name);
      remove_all_of(written);
      remove_all_of(std::vector<fs::path>(temps.begin() + static_cast<std::ptrdiff_t>(i), temps.end()));
      fail(dir, files[i].name, reason);
    }
  }
}

}  // namespace shardplan::cli
