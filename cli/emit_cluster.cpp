// config.json, hostfile and slurm.sbatch: what makes the launch files run as written, on one node or many.
//   config.json   the model for AutoConfig (transformers): the --hf-config file itself, or written from a preset whose
//                 architecture transformers has a class for (Llama, Qwen2), so MODEL can be the emit folder
//   hostfile      DeepSpeed's "<host> slots=<GPUs>" list (DeepSpeed docs, "Resource Configuration (multi-node)")
//   slurm.sbatch  one srun task per node, each running torchrun.sh with its node rank and a c10d rendezvous on the
//                 job's first node (torchrun docs, "Fault-tolerant / multi-node": --rdzv-backend c10d)
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/emit_launch.hpp"
#include "io/input_file.hpp"
#include "planner/error.hpp"

namespace shardplan::cli {

namespace {

// A preset transformers can build: Llama's layout (RMSNorm, gated SiLU MLP, rotary, no biases), or Qwen2's (the same
// with Q/K/V biases). Others (GELU MLPs, LayerNorm, learned positions) map to no one class without guessing.
const char* transformers_family(const ModelSpec& m) {
  if (m.norm != NormKind::rmsnorm || m.mlp != MlpKind::swiglu || m.position != PositionKind::rotary || m.out_bias ||
      m.dropout)
    return nullptr;
  // Experts, latent attention, windows, q/k norms or extra norms are other classes (Mixtral, DeepSeek, Gemma, Qwen3).
  if (m.experts > 0 || m.kv_lora_rank > 0 || m.sliding_window > 0 || m.qk_norm || m.block_norms != 2 ||
      m.mtp_layers > 0 || m.attention_sinks)
    return nullptr;
  return m.qkv_bias ? "qwen2" : "llama";
}

}  // namespace

bool emits_model_config(const LaunchPlan& plan) {
  return plan.hf.has_value() || transformers_family(plan.prediction.model) != nullptr;
}

std::optional<EmittedFile> emit_model_config(const LaunchPlan& plan) {
  if (plan.hf) {
    // The file given, as given: AutoConfig.from_pretrained(folder) looks for folder/config.json, and
    // `--hf-config dir/x.json` has no such file beside it.
    std::string text;
    const std::string why = io::read_file_bounded(plan.hf->source_path, text, std::size_t{64} << 20);
    if (!why.empty()) throw InputError(fmt::format("--hf-config {}: {}", plan.hf->source_path, why));
    return EmittedFile{"config.json", text, false, {}};
  }
  const ModelSpec& m = plan.prediction.model;
  const char* family = transformers_family(m);
  if (family == nullptr) return std::nullopt;
  const bool qwen2 = std::string(family) == "qwen2";
  // Field names of transformers' LlamaConfig / Qwen2Config (configuration_llama.py, configuration_qwen2.py).
  nlohmann::ordered_json c = {{"architectures", {qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
                              {"model_type", family},
                              {"hidden_size", m.hidden},
                              {"intermediate_size", m.ffn_hidden},
                              {"num_hidden_layers", m.layers},
                              {"num_attention_heads", m.heads},
                              {"num_key_value_heads", m.kv_heads},
                              {"head_dim", model_head_dim(m)},
                              {"vocab_size", m.vocab},
                              {"max_position_embeddings", m.seq},
                              {"hidden_act", "silu"},
                              {"rms_norm_eps", m.norm_eps},
                              {"rope_theta", m.rotary_base},
                              {"tie_word_embeddings", m.tied_embeddings}};
  if (!qwen2) c["attention_bias"] = false, c["mlp_bias"] = false;
  EmittedFile file{"config.json", c.dump(2) + "\n", false, {}};
  file.notes.push_back(fmt::format("written from the {} preset as a {} config; the weights are random (train from "
                                   "scratch or point MODEL at a checkpoint)", m.name, qwen2 ? "Qwen2" : "Llama"));
  return file;
}

EmittedFile emit_hostfile(const LaunchFacts& f) {
  EmittedFile file{"hostfile", "", false, {}};
  std::string& out = file.text;
  out += fmt::format("# DeepSpeed hostfile: {} node(s) with {} GPUs each. Replace the names with your hosts (reachable "
                     "by ssh without a password); under Slurm, slurm.sbatch needs none of this.\n",
                     f.nodes, f.procs_per_node);
  for (int64_t n = 0; n < f.nodes; ++n) out += fmt::format("node-{} slots={}\n", n, f.procs_per_node);
  file.notes.push_back("host names node-0 ... are to be replaced with yours");
  return file;
}

EmittedFile emit_slurm(const LaunchPlan& plan, const LaunchFacts& f) {
  EmittedFile file{"slurm.sbatch", "", true, {}};
  std::string& out = file.text;
  out += "#!/usr/bin/env bash\n";
  out += fmt::format("#SBATCH --job-name=shardplan-{}\n", f.model_name);
  out += fmt::format("#SBATCH --nodes={}\n", f.nodes);
  out += "#SBATCH --ntasks-per-node=1\n";
  out += fmt::format("#SBATCH --gpus-per-node={}\n", f.procs_per_node);
  out += "#SBATCH --exclusive\n";
  out += fmt::format("# shardplan: {} on {} GPUs, tp {} pp {} dp {}. Submit with `sbatch {}/slurm.sbatch`.\n",
                     f.model_name, f.gpus, f.tp, f.pp, f.dp, plan.emit_dir);
  out += "set -euo pipefail\n";
  // sbatch runs a copy of this script from its spool folder: the launch files are found by the folder they were
  // written to, not by this script's path.
  out += fmt::format("EMIT_DIR=${{EMIT_DIR:-{}}}\n", shell_quoted(plan.emit_dir));
  out += "export MASTER_ADDR=\"$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\"\n";
  out += "export MASTER_PORT=\"${MASTER_PORT:-29500}\"\n";
  out += "export RDZV_ID=\"${SLURM_JOB_ID}\"\n";
  out += "# One task per node; each starts torchrun.sh with its own node rank.\n";
  out += "srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c 'NODE_RANK=\"$SLURM_NODEID\" exec \"$0/torchrun.sh\"' "
         "\"$EMIT_DIR\"\n";
  return file;
}

}  // namespace shardplan::cli
