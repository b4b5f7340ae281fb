"""What Megatron-LM makes of a megatron_args.sh: its own parse_args and validate_args (megatron/training/arguments.py)
over the MEGATRON_ARGS array the file sets, with the environment it exports. Writes one JSON object of the fields
tests/emit_megatron_args.sh compares with the plan to OUT.json (Megatron prints its own lines), or exits 1 with
Megatron's refusal.

  python tests/megatron_parse.py MEGATRON_LM_DIR megatron_args.sh WORLD_SIZE OUT.json

No GPU: the device queries validate_args makes are answered as an H100 (compute capability 9.0), which is what the
CUDA_DEVICE_MAX_CONNECTIONS rules of arguments.py branch on.
"""
import json
import os
import shlex
import subprocess
import sys
import typing

megatron_dir, args_file, world, out_json = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
if not hasattr(typing, "override"):  # Python 3.11: Megatron imports typing.override (3.12)
    typing.override = lambda f: f
sys.path.insert(0, megatron_dir)
import torch  # noqa: E402

torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
import megatron.training.arguments as arguments  # noqa: E402
import megatron.training.utils as training_utils  # noqa: E402

training_utils.get_device_arch_version = lambda: 9
arguments.get_device_arch_version = lambda: 9
# Transformer Engine is not installed here; the checks validate_args makes of its version are answered as the TE of
# the recipes shardplan's Megatron flags follow (Megatron-Bridge's containers ship TE >= 2.8).
if hasattr(arguments, "is_te_min_version"):
    arguments.is_te_min_version = lambda *a, **k: True

# The array and the environment exactly as bash sees them after `source megatron_args.sh`.
shown = subprocess.run(["bash", "-c", 'source "$1"; for a in "${MEGATRON_ARGS[@]}"; do printf "%s\\0" "$a"; done; '
                        'printf "%s" "${CUDA_DEVICE_MAX_CONNECTIONS-unset}"', "_", args_file],
                       capture_output=True, text=True, check=True).stdout.split("\0")
connections = shown.pop()
argv = []
for item in shown:  # each array element is "--flag" or "--flag value" (the value may hold spaces: quoted there)
    argv += shlex.split(item) if item.startswith("--") else [item]
if connections == "unset":
    os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
else:
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = connections
os.environ.update(WORLD_SIZE=str(world), RANK="0", LOCAL_RANK="0")
sys.argv = ["pretrain_gpt.py"] + argv + ["--mock-data", "--lr", "1e-4"]
try:
    args = arguments.parse_args()
    arguments.validate_args(args, {})
    # A pipeline layout is checked against the model when TransformerConfig is built (validate_layer_layout); the
    # blocks each rank's chunks build are read from the parsed layout (what get_num_layers_to_build counts).
    layout_blocks = None
    if args.pipeline_model_parallel_layout:
        from megatron.core.transformer.enums import LayerType
        from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout
        layout = PipelineParallelLayerLayout(args.pipeline_model_parallel_layout, args.pipeline_model_parallel_size)
        layout.validate_layer_layout(args.num_layers, args.mtp_num_layers)
        layout_blocks = [[chunk.count(LayerType.decoder) for chunk in rank] for rank in layout.layout]
except BaseException as e:  # validate_args asserts, raises ValueError, or argparse exits
    print(f"refused: {type(e).__name__}: {e}", file=sys.stderr)
    sys.exit(1)
json.dump({
    "tp": args.tensor_model_parallel_size, "pp": args.pipeline_model_parallel_size,
    "cp": args.context_parallel_size, "ep": args.expert_model_parallel_size, "dp": args.data_parallel_size,
    "etp": args.expert_tensor_parallel_size,
    "ep_comm_overlap": bool(getattr(args, "overlap_moe_expert_parallel_comm", False)),
    "cuda_graphs": getattr(args, "cuda_graph_impl", "none") or "none",
    "capacity_factor": args.moe_expert_capacity_factor if args.moe_pad_expert_input_to_capacity else None,
    # The token dispatcher as shardplan names it: alltoall, or the flex dispatcher's backend (deepep, hybridep).
    "precision_aware_optimizer": bool(args.use_precision_aware_optimizer),
    "loss_fusion": bool(args.cross_entropy_loss_fusion),
    "offload_activation_layers": args.cpu_offloading_num_layers or 0,
    # Selective recomputation's modules (TransformerConfig defaults an unset list to ["core_attn"]).
    "recompute_modules": ",".join(sorted(args.recompute_modules or ["core_attn"])),
    "adam_moments": "bf16" if str(args.exp_avg_dtype).endswith("bfloat16") and str(args.exp_avg_sq_dtype).endswith("bfloat16")
                    else "fp32",
    "dispatcher": (args.moe_flex_dispatcher_backend if args.moe_token_dispatcher_type == "flex"
                   else args.moe_token_dispatcher_type),
    "vpp": args.virtual_pipeline_model_parallel_size or 1, "micro_batch": args.micro_batch_size,
    "global_batch": args.global_batch_size, "seq": args.seq_length, "layers": args.num_layers,
    # Muon with --use-distributed-optimizer: validate_args turns it into the layer-wise distributed optimizer.
    "distributed_optimizer": bool(args.use_distributed_optimizer or getattr(args, "use_layer_wise_distributed_optimizer", False)),
    "megatron_fsdp": bool(args.use_megatron_fsdp), "optimizer": args.optimizer,
    "muon_tp_mode": getattr(args, "muon_tp_mode", None),
    "sharding": args.data_parallel_sharding_strategy, "sp": bool(args.sequence_parallel),
    "experts": args.num_experts or 0, "recompute": args.recompute_granularity or "none",
    "fp8": args.fp8_recipe if args.fp8 else "off", "fp8_param_gather": bool(args.fp8_param_gather),
    "reuse_grad_buf_for_mxfp8_param_ag": bool(getattr(args, "reuse_grad_buf_for_mxfp8_param_ag", False)),
    "offload_optimizer": bool(args.optimizer_cpu_offload),
    "layout_blocks": layout_blocks,
}, open(out_json, "w"))
