// torchrun.sh and train_fsdp2.py: the plan as a plain PyTorch FSDP2 job (torch >= 2.6, transformers >= 4.45).
// FSDP2 API: torch.distributed.fsdp.fully_shard / MixedPrecisionPolicy (PyTorch docs, "torch.distributed.fsdp.
// fully_shard"); one fully_shard per transformer block then the root, as torchtitan's apply_fsdp does.
#include <fmt/format.h>

#include "cli/emit_launch.hpp"

namespace shardplan::cli {

std::string torchrun_command(const LaunchFacts& f) {
  if (f.nodes == 1) return fmt::format("torchrun --standalone --nnodes 1 --nproc-per-node {} \\\n", f.procs_per_node);
  // A c10d rendezvous on node 0 (torchrun docs, "Usage: multi-node"); Slurm's node index when under srun.
  std::string out = fmt::format("torchrun --nnodes {} --nproc-per-node {} \\\n", f.nodes, f.procs_per_node);
  out += "  --node-rank \"${NODE_RANK:-${SLURM_NODEID:?set NODE_RANK to the index of this node, 0 to nodes-1}}\" \\\n";
  out += "  --rdzv-backend c10d \\\n";
  out += "  --rdzv-endpoint \"${MASTER_ADDR:?set MASTER_ADDR to the address of node 0}:${MASTER_PORT:-29500}\" \\\n";
  out += "  --rdzv-id \"${RDZV_ID:-shardplan}\" \\\n";
  return out;
}

EmittedFile emit_torchrun(const LaunchPlan& plan, const LaunchFacts& f) {
  EmittedFile file{"torchrun.sh", "", true, {}};
  std::string& out = file.text;
  out += "#!/usr/bin/env bash\n";
  out += fmt::format("# shardplan: {} on {} GPUs ({} node(s) x {}), tp {} pp {} dp {}, ZeRO-{}.\n", f.model_name,
                     f.gpus, f.nodes, f.procs_per_node, f.tp, f.pp, f.dp, f.zero);
  out += "# Run on every node; NODE_RANK is the node's index, MASTER_ADDR the address of node 0.\n";
  out += "set -euo pipefail\n";
  out += "HERE=\"$(cd \"$(dirname \"${BASH_SOURCE[0]}\")\" && pwd)\"\n";
  // The allocator the plan's fit test assumed (planner/memory.hpp fit_bytes).
  if (f.expandable_segments)
    out += "export PYTORCH_CUDA_ALLOC_CONF=\"${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}\"\n";
  // The model is this folder's config.json when one was written: relative to the script, wherever it is run from.
  out += f.config_json ? "export MODEL=\"${MODEL:-${HERE}}\"\n"
                       : fmt::format("export MODEL=\"${{MODEL:-{}}}\"  # set to a Hugging Face id or folder\n", f.model_ref);
  out += "export SHARDPLAN_STEPS=\"${SHARDPLAN_STEPS:-${HERE}/shardplan_steps.jsonl}\"\n";
  out += torchrun_command(f);
  out += "  \"${HERE}/train_fsdp2.py\" \"$@\"\n";
  if (f.gpus % f.procs_per_node != 0)
    file.notes.push_back(fmt::format("{} GPUs do not fill {} nodes of {}: torchrun needs the same count on every node",
                                     f.gpus, f.nodes, f.procs_per_node));
  (void)plan;
  return file;
}

namespace {

const char* torch_dtype(bool bf16, bool fp16) { return bf16 ? "torch.bfloat16" : fp16 ? "torch.float16" : "torch.float32"; }

// The loop itself: the same for every plan; the constants above it carry the plan.
constexpr const char* kFsdp2Body = R"PY(

def transformer_blocks(model):
    """The ModuleList holding the decoder layers (model.model.layers, transformer.h, gpt_neox.layers)."""
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) == NUM_LAYERS:
            return module
    raise RuntimeError(f"no ModuleList of {NUM_LAYERS} blocks in {type(model).__name__}")


def apply_tensor_parallel(blocks, tp_mesh):
    """Megatron-style TP on Llama-family projections: column-parallel Q/K/V and gate/up, row-parallel O and down."""
    plan = {
        "self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
        "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
        "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(), "mlp.down_proj": RowwiseParallel(),
    }
    for block in blocks:
        names = {name for name, _ in block.named_modules()}
        missing = [name for name in plan if name not in names]
        if missing:
            raise NotImplementedError(f"tensor parallelism here expects Llama-style module names; missing {missing}")
        parallelize_module(block, tp_mesh, plan)


def end_modules(model):
    """(embedding, final norm, LM head) of an untied decoder, or None where they are tied or not found: then they stay
    in the root unit, which is what a tied model's single unit of all three amounts to."""
    if getattr(model.config, "tie_word_embeddings", False):
        return None
    norm = getattr(getattr(model, "model", None), "norm", None)
    embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
    if norm is None or embedding is None or head is None:
        return None
    return embedding, norm, head


def recomputes(i):
    """Whether block i (0-based) is checkpointed: all of them, or the first RECOMPUTE_LAYERS (Megatron-Core's block
    method), or every RECOMPUTE_EVERY-th counted from 1 (torchtitan's layer SAC)."""
    if RECOMPUTE_LAYERS > 0:
        return i < RECOMPUTE_LAYERS
    if RECOMPUTE_EVERY > 0:
        return (i + 1) % RECOMPUTE_EVERY == 0
    return True


def apply_activation_checkpointing(blocks):
    """full: recompute each block (or those recomputes() picks) in backward; selective: keep matmul and attention
    outputs, recompute the rest."""
    if RECOMPUTE == "none":
        return
    save = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default,
            torch.ops.aten._scaled_dot_product_flash_attention.default,
            torch.ops.aten._scaled_dot_product_efficient_attention.default}

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in save else CheckpointPolicy.PREFER_RECOMPUTE

    for i, block in enumerate(blocks):
        if not recomputes(i):
            continue
        if RECOMPUTE == "full":
            blocks[i] = checkpoint_wrapper(block, preserve_rng_state=False)
        else:
            blocks[i] = checkpoint_wrapper(
                block, preserve_rng_state=False,
                context_fn=functools.partial(create_selective_checkpoint_contexts, policy))


def reset_rotary_buffers(model):
    """Buffers computed in __init__ are lost on the meta device; recompute the rotary frequencies."""
    for module in model.modules():
        if hasattr(module, "inv_freq") and hasattr(module, "rope_init_fn"):
            inv_freq, _ = module.rope_init_fn(module.config, module.inv_freq.device)
            module.inv_freq = inv_freq
            module.original_inv_freq = inv_freq


def build_model(mesh, device):
    config = AutoConfig.from_pretrained(MODEL)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, torch_dtype=MODEL_DTYPE)
    blocks = transformer_blocks(model)
    if TP > 1:
        apply_tensor_parallel(blocks, mesh["tp"])
    apply_activation_checkpointing(blocks)
    # ZeRO-0 (DDP) is fully_shard over a (replicate = dp, shard = 1) mesh: replicated weights, all-reduced grads.
    dp_mesh = mesh["replicate", "shard"] if REPLICATE > 1 else mesh["shard"]
    mp_policy = MixedPrecisionPolicy(param_dtype=PARAM_DTYPE, reduce_dtype=REDUCE_DTYPE)
    offload = CPUOffloadPolicy() if OFFLOAD else OffloadPolicy()
    ends = end_modules(model) if END_UNITS_OWN else None
    if ends is not None:
        # torchtitan's units for the ends (torchtitan/distributed/fsdp.py apply_fsdp_to_decoder): the embedding
        # resharded after forward as the blocks, the final norm with the LM head kept gathered after forward.
        fully_shard(ends[0], mesh=dp_mesh, mp_policy=mp_policy, reshard_after_forward=RESHARD_AFTER_FORWARD,
                    offload_policy=offload)
        fully_shard(list(ends[1:]), mesh=dp_mesh, mp_policy=mp_policy, reshard_after_forward=False,
                    offload_policy=offload)
    for block in blocks:
        fully_shard(block, mesh=dp_mesh, mp_policy=mp_policy, reshard_after_forward=RESHARD_AFTER_FORWARD,
                    offload_policy=offload)
    fully_shard(model, mesh=dp_mesh, mp_policy=mp_policy, reshard_after_forward=RESHARD_AFTER_FORWARD,
                offload_policy=offload)
    model.to_empty(device="cpu" if OFFLOAD else device)
    model.init_weights()
    reset_rotary_buffers(model)
    return model


def device_type():
    """cuda when a GPU is there; cpu (gloo) otherwise or with SHARDPLAN_DEVICE=cpu, e.g. to try the loop first."""
    if os.environ.get("SHARDPLAN_DEVICE", "") == "cpu" or not torch.cuda.is_available():
        return "cpu"
    return "cuda"


def peak_memory(device):
    """(in use, max allocated, max reserved) bytes on this rank. On CPU the process's peak resident set, as
    getrusage reports it (Linux: KiB), stands for all three."""
    if device == "cpu":
        rss = float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
        return rss, rss, rss
    free, total = torch.cuda.mem_get_info()
    return float(total - free), float(torch.cuda.max_memory_allocated()), float(torch.cuda.max_memory_reserved())


def batches(vocab_size, device):
    """Synthetic tokens; replace with your data loader (MICRO_BATCH sequences of SEQ tokens per rank)."""
    while True:
        tokens = torch.randint(0, vocab_size, (MICRO_BATCH, SEQ + 1), device=device)
        yield tokens[:, :-1], tokens[:, 1:]


def main():
    device = device_type()
    dist.init_process_group("nccl" if device == "cuda" else "gloo")
    if device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if dist.get_world_size() != GPUS:
        raise SystemExit(f"this plan needs {GPUS} ranks, torchrun started {dist.get_world_size()}")
    if PP > 1:
        raise SystemExit("this plan pipelines the layers (pp > 1), which this FSDP2 loop does not do; "
                         "launch torchtitan.sh or megatron_args.sh instead")
    if CP > 1:
        raise SystemExit("this plan splits each sequence over ranks (cp > 1), which this FSDP2 loop does not do; "
                         "launch torchtitan.sh or megatron_args.sh instead")
    if EP > 1:
        raise SystemExit("this plan spreads the experts over ranks (ep > 1), which this FSDP2 loop does not do; "
                         "launch torchtitan.sh or megatron_args.sh instead")
    mesh = init_device_mesh(device, (REPLICATE, SHARD, TP), mesh_dim_names=("replicate", "shard", "tp"))
    model = build_model(mesh, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    data = batches(model.config.vocab_size, device)
    rank = dist.get_rank()
    # The whole model's parameters (a DTensor's numel is its global size), to hold against shardplan's count.
    params = sum(p.numel() for p in model.parameters())
    # One JSON line per step for `shardplan validate --measurements` (io/measurements.hpp schema).
    log = open(os.environ.get("SHARDPLAN_STEPS", os.path.join(HERE, "shardplan_steps.jsonl")), "w") if rank == 0 else None
    for step in range(STEPS):
        start = time.perf_counter()
        for micro in range(GRAD_ACCUM):
            last = micro == GRAD_ACCUM - 1
            if SYNC_EVERY_STEP_ONLY:
                model.set_requires_gradient_sync(last)
            inputs, labels = next(data)
            logits = model(input_ids=inputs).logits
            loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), labels.flatten()) / GRAD_ACCUM
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        # The busiest rank's step: the slowest time, and the most device memory in use (CUDA context, NCCL
        # buffers and the caching allocator's pool, which keeps the step's peak reserved).
        figures = torch.tensor([seconds, *peak_memory(device)], device=device, dtype=torch.float64)
        dist.all_reduce(figures, op=dist.ReduceOp.MAX)
        if rank == 0:
            seconds, used, allocated, reserved = figures.tolist()
            print(f"step {step}: loss {loss.item() * GRAD_ACCUM:.3f}, {seconds:.3f} s, "
                  f"peak {allocated / 1e9:.1f} GB allocated, {used / 1e9:.1f} GB in use", flush=True)
            log.write(json.dumps({"step": step, "warmup": step == 0, "param_count": params, "step_s": seconds,
                                  "peak_bytes": int(used),
                                  "max_allocated_bytes": int(allocated), "max_reserved_bytes": int(reserved),
                                  "loss": loss.item() * GRAD_ACCUM}) + "\n")
            log.flush()
    if rank == 0:
        log.close()
    # Every rank leaves together. Without it, 2 of 8 runs of a tiny Mixtral on 2 CPU ranks (gloo) aborted at exit
    # after their last step ("terminate called without an active exception"); with it, none of 10.
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
)PY";

}  // namespace

EmittedFile emit_fsdp2_script(const LaunchPlan& plan, const LaunchFacts& f) {
  EmittedFile file{"train_fsdp2.py", "", false, {}};
  std::string& out = file.text;
  const Strategy& s = plan.prediction.strategy;
  out += "#!/usr/bin/env python3\n";
  out += fmt::format("\"\"\"shardplan: PyTorch FSDP2 training loop for {} ({} GPUs, tp {}, dp {}, ZeRO-{}).\n\n",
                     f.model_name, f.gpus, f.tp, f.dp, f.zero);
  out += "Launched by torchrun.sh. Needs torch >= 2.6 and transformers >= 4.45; the model is built from MODEL's\n"
         "config.json with random weights, and the data are synthetic tokens: swap in your loader and checkpoint.\n"
         "\"\"\"\n";
  out += "import functools\nimport json\nimport os\nimport resource\nimport time\n\n";
  out += "import torch\nimport torch.distributed as dist\nfrom torch import nn\n";
  out += "from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper\n";
  out += "from torch.distributed.device_mesh import init_device_mesh\n";
  out += "from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard\n";
  out += "from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module\n";
  out += "from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts\n";
  out += "from transformers import AutoConfig, AutoModelForCausalLM\n\n";
  out += "# ---- the plan -------------------------------------------------------------------------------------\n";
  out += "HERE = os.path.dirname(os.path.abspath(__file__))\n";
  if (f.config_json)
    out += "MODEL = os.environ.get(\"MODEL\", HERE)  # this folder's config.json, or a Hugging Face id or folder\n";
  else
    out += fmt::format("MODEL = os.environ.get(\"MODEL\", {})  # set to a Hugging Face model id or folder\n",
                       double_quoted(f.model_ref));
  out += fmt::format("NUM_LAYERS = {}\n", f.layers);
  out += fmt::format("GPUS, TP, PP, CP, EP = {}, {}, {}, {}, {}\n", f.gpus, f.tp, f.pp, f.cp, f.ep);
  out += fmt::format("SHARD, REPLICATE = {}, {}  # data-parallel ranks sharding model states, and their replicas\n",
                     f.shard, f.replicate);
  out += fmt::format("ZERO = {}\n", f.zero);
  out += fmt::format("RESHARD_AFTER_FORWARD = {}  # True: ZeRO-3 (FULL_SHARD); False: ZeRO-2 (SHARD_GRAD_OP)\n",
                     f.zero >= 3 ? "True" : "False");
  out += fmt::format("OFFLOAD = {}\n", f.offload ? "True" : "False");
  out += fmt::format("END_UNITS_OWN = {}  # the embedding and [final norm, LM head] as FSDP units of their own "
                     "(--fsdp-end-units)\n", f.end_units_own ? "True" : "False");
  out += fmt::format("MICRO_BATCH, GRAD_ACCUM, SEQ = {}, {}, {}\n", f.micro_batch, f.grad_accum, f.seq);
  out += fmt::format("SYNC_EVERY_STEP_ONLY = {}  # reduce gradients once per step (no_sync) rather than per micro-batch\n",
                     effective_grad_sync(s) == GradSync::per_step ? "True" : "False");
  out += fmt::format("RECOMPUTE = {}\n", double_quoted(to_string(f.recompute)));
  out += fmt::format("RECOMPUTE_LAYERS, RECOMPUTE_EVERY = {}, {}  # full recomputation of some blocks only (0, 0: all)\n",
                     f.recompute_layers, f.recompute_every);
  // pure-bf16: the weights themselves are bf16; amp: fp32 weights, bf16 compute through the mixed-precision policy.
  out += fmt::format("MODEL_DTYPE = {}\n", f.fp32_master ? "torch.float32" : torch_dtype(f.bf16, f.fp16));
  out += fmt::format("PARAM_DTYPE = {}\n", torch_dtype(f.bf16, f.fp16));
  out += fmt::format("REDUCE_DTYPE = {}\n", f.fp32_master ? "torch.float32" : torch_dtype(f.bf16, f.fp16));
  out += fmt::format("STEPS = int(os.environ.get(\"STEPS\", {}))\n", f.steps.value_or(100));
  out += kFsdp2Body;
  if (f.pp > 1) file.notes.push_back("pipeline parallelism is not in this loop: it stops and points to torchtitan/Megatron");
  if (f.cp > 1) file.notes.push_back("context parallelism is not in this loop: it stops and points to torchtitan/Megatron");
  if (f.ep > 1) file.notes.push_back("expert parallelism is not in this loop: it stops and points to torchtitan/Megatron");
  if (f.tp > 1) {
    file.notes.push_back("tensor parallelism assumes Llama-style projection names (q_proj ... down_proj)");
    if (f.sp) file.notes.push_back("sequence parallelism is not applied here (torchtitan.toml and Megatron apply it)");
  }
  if (f.zero == 1) file.notes.push_back("FSDP2 has no ZeRO-1: ZeRO-2 (reshard_after_forward=False) is used");
  if (f.offload)
    file.notes.push_back("FSDP2's CPUOffloadPolicy offloads parameters and gradients too, not only the optimizer");
  if (f.fp16) file.notes.push_back("fp16 needs a gradient scaler, which this loop does not add");
  if (!f.steps) file.notes.push_back("STEPS = 100 (give --tokens to set it from the training budget)");
  return file;
}

}  // namespace shardplan::cli
