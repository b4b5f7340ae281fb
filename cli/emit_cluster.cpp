// hostfile and slurm.sbatch: what makes the launch files run as written on many nodes (config.json, the model for
// AutoConfig: emit_model_config.cpp).
//   hostfile      DeepSpeed's "<host> slots=<GPUs>" list (DeepSpeed docs, "Resource Configuration (multi-node)")
//   slurm.sbatch  one srun task per node, each running torchrun.sh with its node rank and a c10d rendezvous on the
//                 job's first node (torchrun docs, "Fault-tolerant / multi-node": --rdzv-backend c10d)
#include <fmt/format.h>

#include "cli/emit_launch.hpp"

namespace shardplan::cli {

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
