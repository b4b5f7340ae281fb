"""Tensor parallelism for the cross-check's torchtitan-style decoder (fsdp2_mem.py --tp N): torchtitan's plan, on
fake tensors.

The plan is torchtitan's apply_tp (torchtitan/parallelisms/parallelize_llama.py at 9dec370; the same layouts in
torchtitan/models/llama3/sharding.py today), with the harness's one QKV projection (models.py, current torchtitan's
FusedQKVLinear) where 9dec370 had wq, wk and wv: the token embedding row-wise with a sequence-sharded output, every norm SequenceParallel, each block's
attention and feed-forward inputs all-gathered (PrepareModuleInput Shard(1) -> Replicate), QKV and w1/w3 column-wise,
wo and w2 row-wise with sequence-sharded outputs, the LM head column-wise keeping the vocabulary sharded for
loss_parallel. FSDP then shards over the data-parallel mesh dimension (the 2-D mesh's "dp"), as torchtitan's
apply_fsdp does.
"""
import contextlib

from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.distributed import device_mesh as _device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                               SequenceParallel, loss_parallel, parallelize_module)


def allow_meshes_under_fake_mode() -> None:
    """FSDP2 over a TP-sharded parameter builds a joint mesh at its lazy init (_fsdp_param.py
    _init_sharding_spec_tp -> DeviceMesh._concatenate), inside the fake mode, and DeviceMesh computes rank
    coordinates with nonzero(), which fake tensors cannot answer. Meshes hold real rank tables: build them outside
    the fake mode."""
    if getattr(_device_mesh.DeviceMesh.__init__, "_outside_fake", False):
        return
    original = _device_mesh.DeviceMesh.__init__

    def init(self, *args, **kwargs):
        with unset_fake_temporarily():
            original(self, *args, **kwargs)

    init._outside_fake = True
    _device_mesh.DeviceMesh.__init__ = init


class _Propagation:
    depth = 0  # > 0 while DTensor infers an op's output metadata


def in_sharding_propagation() -> bool:
    return _Propagation.depth > 0


def hide_sharding_propagation() -> None:
    """DTensor infers each op's output shape by running it on tensors of the *global* shape
    (torch/distributed/tensor/_sharding_prop.py ShardingPropagator._propagate_tensor_meta_non_cached ->
    _op_schema.py gen_fake_args). On a GPU those are meta tensors the tracker ignores; under our FakeTensorMode they
    are fake CPU tensors, and the tracker would count a full-vocabulary fp32 logits tensor that never exists. The
    tracker skips what is allocated while it runs (fsdp2_mem.py MomentTracker._track)."""
    from torch.distributed.tensor._sharding_prop import ShardingPropagator
    original = ShardingPropagator._propagate_tensor_meta_non_cached
    if getattr(original, "_hidden", False):
        return

    def propagate(self, *args, **kwargs):
        _Propagation.depth += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            _Propagation.depth -= 1

    propagate._hidden = True
    ShardingPropagator._propagate_tensor_meta_non_cached = propagate


def apply_tp(model, tp_mesh, float8: bool = False) -> None:
    """The whole model's plan, or a pipeline stage's (pp_mem.py StageDecoder: the embedding only on the first stage,
    the final norm and LM head only on the last; torchtitan applies the same plan after the pipeline split, and
    parallelize_module cannot take plan entries for modules set to None)."""
    plan = {}
    if model.tok_embeddings is not None:
        plan["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
    if model.norm is not None:
        plan["norm"] = SequenceParallel()
        plan["lm_head"] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False)
    tied = model.tok_embeddings is not None and model.norm is not None and \
        model.lm_head.weight is model.tok_embeddings.weight
    if plan:
        parallelize_module(model, tp_mesh, plan)
    if tied:
        # Each ParallelStyle registers a new Parameter, which unties the weights; torchtitan shards the one tied
        # weight Shard(0) for both modules (models/common/decoder_sharding.py set_decoder_sharding_config: both
        # state_shardings tp=S(0)) and keeps it tied (decoder.py: tok_embeddings.weight = lm_head.weight). The
        # embedding's Rowwise and the head's Colwise shard the same [vocab, hidden] weight on dim 0: re-tie.
        model.tok_embeddings.weight = model.lm_head.weight
    for block in model.layers.values():
        apply_tp_block(block, tp_mesh, float8)


def apply_tp_block(block, tp_mesh, float8: bool = False) -> None:
    """torchtitan's plan for one decoder block: sequence-parallel norms, the attention and MLP inputs all-gathered,
    column-wise in-projections, row-wise out-projections scattering back over the sequence. With float8 the
    blocks' Float8Linear layers take torchao's float8 variants (parallelize_llama.py apply_tp at 9dec370 with
    enable_float8: PrepareFloat8ModuleInput casts before the gather, Float8Colwise/RowwiseParallel)."""
    colwise, rowwise, prepare = ColwiseParallel, RowwiseParallel, PrepareModuleInput
    kw = {}
    if float8:
        import torch
        from torchao.float8.float8_tensor_parallel import (Float8ColwiseParallel, Float8RowwiseParallel,
                                                           PrepareFloat8ModuleInput)
        colwise, rowwise, prepare = Float8ColwiseParallel, Float8RowwiseParallel, PrepareFloat8ModuleInput
        kw = {"float8_dtype": torch.float8_e4m3fn}
    plan = {
        "attention_norm": SequenceParallel(),
        "attention": prepare(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), **kw),
        "attention.wqkv": colwise(),
        "attention.wo": rowwise(output_layouts=Shard(1)),
        "ffn_norm": SequenceParallel(),
        "feed_forward": prepare(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), **kw),
        "feed_forward.w1": colwise(),
        "feed_forward.w2": rowwise(output_layouts=Shard(1)),
    }
    if hasattr(block.feed_forward, "w3"):
        plan["feed_forward.w3"] = colwise()
    parallelize_module(block, tp_mesh, plan)


def convert_float8(model, fsdp_float8_all_gather: bool) -> None:
    """torchtitan's Float8Handler.convert_to_float8_training (float8.py at 9dec370): every nn.Linear but the LM head
    becomes a torchao Float8Linear with dynamic tensorwise scaling, and with FSDP its weight is all-gathered in FP8
    (enable_fsdp_float8_all_gather)."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    convert_to_float8_training(model, config=Float8LinearConfig(enable_fsdp_float8_all_gather=fsdp_float8_all_gather),
                               module_filter_fn=lambda mod, fqn: "lm_head" not in fqn)


def loss_context(tp: int):
    """torchtitan trains under loss_parallel() with TP (train.py maybe_enable_loss_parallel): the cross-entropy on
    vocabulary-sharded logits."""
    return loss_parallel() if tp > 1 else contextlib.nullcontext()


def local_shapes(model) -> list:
    """Each parameter's shape on this TP rank (before FSDP shards it over dp)."""
    params = {id(p): p for p in model.parameters()}.values()
    return [tuple(p.to_local().shape) if isinstance(p, DTensor) else tuple(p.shape) for p in params]


def check_divisible(shape, tp: int) -> None:
    for name, value in (("heads", shape.heads), ("kv_heads", shape.kv_heads), ("ffn_hidden", shape.ffn_hidden),
                        ("vocab", shape.vocab)):
        if value % tp:
            raise ValueError(f"--tp {tp} must divide the model's {name} ({value})")
