"""Reads the launch files shardplan wrote for torchtitan with torchtitan's own ConfigManager, then writes the settings
shardplan planned, as torchtitan read them, to the JSON file $PARSED_JSON:
  torchtitan >= 0.3  the arguments torchtitan.sh gives `torchtitan.train` (torchtitan/config/manager.py: the
                     --module/--config function, then every --section.key override through tyro, then validation)
  torchtitan <= 0.2  --job.config_file torchtitan.toml (torchtitan/config/manager.py: TOML into JobConfig; unknown
                     keys are refused)
Run by tests/emit_torchtitan_args.sh."""
import json
import os
import sys

import torch
from torchtitan.config import ConfigManager

if not torch.cuda.is_available() and "--job.config_file" not in sys.argv:
    # 0.3's llama3_405b builds its Float8 converter at config time, which checks for an SM89+ GPU
    # (components/quantization/float8.py): the launch runs on one; this parse has none.
    import torchtitan.components.quantization.float8 as float8

    float8.has_cuda_capability = lambda major, minor: True

cfg = ConfigManager().parse_args(sys.argv[1:])
t, p, c = cfg.training, cfg.parallelism, cfg.compile
if "--job.config_file" in sys.argv:  # 0.2: JobConfig
    model = f"{cfg.model.name}/{cfg.model.flavor}"
    ac_mode = cfg.activation_checkpoint.mode
    async_tp = p.enable_async_tensor_parallel
    hf_assets_path = cfg.model.hf_assets_path
else:  # 0.3: Trainer.Config
    model = f"{cfg.model_spec.name}/{cfg.model_spec.flavor}"
    ac = cfg.activation_checkpoint
    ac_mode = "none" if ac is None else {"FullAC": "full", "SelectiveAC": "selective"}.get(
        type(ac).__qualname__.split(".")[0], type(ac).__qualname__)
    async_tp = c.enable_async_tensor_parallel
    hf_assets_path = cfg.hf_assets_path
out = {
    "model": model, "local_batch_size": t.local_batch_size, "global_batch_size": t.global_batch_size,
    "seq_len": t.seq_len, "steps": t.steps, "dtype": t.dtype, "mixed_precision_param": t.mixed_precision_param,
    "dp_replicate": p.data_parallel_replicate_degree, "dp_shard": p.data_parallel_shard_degree,
    "reshard": p.fsdp_reshard_after_forward, "tp": p.tensor_parallel_degree, "pp": p.pipeline_parallel_degree,
    "cp": p.context_parallel_degree, "ep": p.expert_parallel_degree,
    "etp": getattr(p, "expert_tensor_parallel_degree", None), "schedule": p.pipeline_parallel_schedule,
    "pp_microbatch_size": p.pipeline_parallel_microbatch_size,
    "layers_per_stage": p.pipeline_parallel_layers_per_stage, "compile": c.enable, "async_tp": async_tp,
    "ac": ac_mode, "checkpoint": cfg.checkpoint.enable, "hf_assets_path": hf_assets_path,
}
with open(os.environ["PARSED_JSON"], "w") as f:
    json.dump(out, f)
