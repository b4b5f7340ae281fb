#!/usr/bin/env python3
"""What one pipeline-parallel rank allocates under torch.distributed.pipelining + FSDP2, without a GPU.

One pipeline rank (default pp rank 0) of a torchtitan-style Llama (models.py `titan`), split the way torchtitan's
pipeline_llama_manual_split does (the embedding only on the first stage, the final norm and LM head only on the
last), each block wrapped in full activation checkpointing (ptd_checkpoint_wrapper), then fully_shard on each block
and on the stage root over the dp mesh with MixedPrecisionPolicy(bf16 params, fp32 reduce) and
reshard_after_forward=False (torchtitan under PP). Optionally TP with sequence parallelism (tp_plan.py's plan,
restricted to the modules the stage holds). A PipelineStage with static input/output metadata and a
Schedule1F1B (or ScheduleInterleaved1F1B with --vpp stages per rank) run two training steps (schedule.step,
AdamW foreach step, zero_grad(set_to_none=True)) under FakeTensorMode over a fake process group; the fake
group's isend/irecv/batch_isend_irecv return completed works, so pipelining's communication is used as is (the
metadata is static: a fake group cannot carry the objects of shape inference).

Two corrections, each measured and documented where it is made (pp_fixes.py): FakeTensor outputs are released after
their send as plain CUDA tensors are (release_outputs_like_cuda), and the tracker's own multi-grad hooks, which would
keep every received activation alive, are removed after each micro-batch's backward (GradHookJanitor). `--cp N` adds
context parallelism as torchtitan ran it beside PP and TP: a (pp, dp, cp, tp) mesh, FSDP over dp × cp, torch's ring
(cp_plan.py) around each step; `--kv repeated` and `--rope shared` give torchtitan's Llama of 2024.

Step 2 is reported (see fsdp2_mem.py / README.md): its peak, the tracker's categories at the peak, the pipeline
action (forward / backward of which micro-batch) and FSDP unit of the moment, and the list of every live
allocation of at least --min-mb MiB at the peak moment with shape, dtype, category, the action and module that
created it and a short Python stack.

  build/shardplan presets show llama3-8b > /tmp/l8.yaml
  .venv-torch/bin/python bench/torch/pp_mem.py --model-yaml /tmp/l8.yaml --pp 4 --dp 2 --layers-per-stage 4 \
      --seq 2048 --micro-batch 1                                        # a few seconds
  build/shardplan presets show llama3-405b > /tmp/l405.yaml             # torchtitan's Table 5 layout, ~40 s a rank
  .venv-torch/bin/python bench/torch/pp_mem.py --model-yaml /tmp/l405.yaml --pp 8 --pp-rank 0 --dp 8 --tp 8 \
      --layers-per-stage 15 --seq 8192 --micro-batch 4 --n-microbatches 8
"""
import argparse
import collections
import contextlib
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.distributed._tools.common_utils import get_untyped_storages  # noqa: E402
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: E402
from torch.utils.weak import WeakIdKeyDictionary  # noqa: E402

import cp_plan  # noqa: E402
from pp_fixes import GradHookJanitor, attach_janitor, release_outputs_like_cuda  # noqa: E402
import fsdp2_mem  # noqa: E402  (also installs the 512-byte allocation rounding in mem_tracker)
import models  # noqa: E402
import recipe  # noqa: E402
import tp_plan  # noqa: E402

MiB = 2**20
GiB = 2**30
TOTAL = "Total"


# ---- the stage module ------------------------------------------------------------------------------------------
class StageDecoder(models.TitanDecoder):
    """torchtitan's pipeline_llama_manual_split: a deep copy of the whole model with the layers of other stages
    deleted, tok_embeddings set to None off the first stage and norm/output set to None off the last;
    Transformer.forward then skips what is None (h = tokens when there is no embedding)."""

    def __init__(self, s: models.Shape, seq: int, layer_ids, first: bool, last: bool, kv_repeated: bool = False):
        stage_shape = models.Shape(**{**s.__dict__, "layers": len(layer_ids)})
        super().__init__(stage_shape, seq, kv_repeated)
        blocks = list(self.layers.values())
        self.layers = nn.ModuleDict({str(i): b for i, b in zip(layer_ids, blocks)})  # keep the global ids
        if not first:
            self.tok_embeddings = None
            if hasattr(self, "pos_embeddings"):
                self.pos_embeddings = None
        if not last:
            self.norm = None
            self.lm_head = None

    def forward(self, x):
        h = self.tok_embeddings(x) if self.tok_embeddings is not None else x
        if getattr(self, "pos_embeddings", None) is not None:
            h = h + self.pos_embeddings(torch.arange(x.shape[1], device=x.device))
        for layer in self.layers.values():
            h = layer(h)
        if self.norm is not None:
            h = self.norm(h)
        if self.lm_head is not None:
            h = self.lm_head(h)
        return h


def apply_recompute_stage(impl, model, mode: str, early_stop: bool) -> None:
    """recipe.apply_recompute, whose full AC passes early_stop=False (torchtitan since 25413d2, Aug 2025: the
    recomputation reruns the whole block). torchtitan 9dec370 (the Dec 2024 405B runs) called
    ptd_checkpoint_wrapper(module, preserve_rng_state=False): torch.utils.checkpoint's default early_stop=True,
    which stops the recomputation once the last tensor the backward needs is recomputed (the block's last
    projection, its reduce-scatter and the residual add are not rerun)."""
    if mode != "full" or not early_stop:
        recipe.apply_recompute(impl, model, mode)
        return
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    blocks = impl.block_container(model)
    for name, block in list(blocks.named_children()):
        blocks.register_module(name, checkpoint_wrapper(block, preserve_rng_state=False, early_stop=True))


def apply_fsdp_stage(model: StageDecoder, dp_mesh, reshard_after_forward: bool) -> int:
    """torchtitan apply_fsdp (parallelize_llama.py at 9dec370): each block, then the stage root, with
    reshard_after_forward = not pp_enabled."""
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.layers.values():
        fully_shard(block, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward)
    return len(model.layers) + 1


def torchtitan_loss(pred, labels):
    """torchtitan 9dec370 train.py loss_fn: cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))."""
    return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


# ---- the tracker -----------------------------------------------------------------------------------------------
STACK_KEEP = ("pipelining", "fsdp", "pp_mem.py", "models.py", "checkpoint", "optim", "tensor/parallel",
              "nn/functional", "nn/modules", "autograd")
STACK_SKIP = ("_tools/", "fsdp2_mem.py", "fsdp2_mem_tracker", "mem_tracker", "_subclasses", "weak.py",
              "utils/_python_dispatch", "_ops.py", "tensor/_dispatch", "tensor/_api")


TRACKER_FRAMES = {"short_stack", "_note", "_track", "_update_and_maybe_create_winfos", "_update_peak_stats", "wrapped",
                  "compute_loss", "pre_forward"}


def short_stack(limit: int = 6) -> list:
    frames = traceback.StackSummary.extract(traceback.walk_stack(None), limit=80, lookup_lines=False)
    out = []
    for fr in frames:  # innermost first
        fn = fr.filename.replace("\\", "/")
        if any(s in fn for s in STACK_SKIP) or not any(k in fn for k in STACK_KEEP):
            continue
        if fn.endswith("pp_mem.py") and fr.name in TRACKER_FRAMES:
            continue
        rel = fn.split("site-packages/")[-1] if "site-packages/" in fn else os.path.basename(fn)
        out.append(f"{rel}:{fr.name}:{fr.lineno}")
        if len(out) >= limit:
            break
    return out


class PPTracker(fsdp2_mem.MomentTracker):
    """MomentTracker (fsdp2_mem.py) for pipeline stages:
    - a stage root runs forward once per micro-batch: FSDPMemTracker refuses a second root forward in one step
      ("multiple iterative calls"), so the root's module statistics are restarted at each of its forwards;
    - several stage roots per rank (interleaved): the tracker's root is a ModuleList of them;
    - `phase` is the pipeline action running (F/B, stage, micro-batch), set by wrappers on the stage;
    - every storage of at least `threshold` bytes is remembered with its creation context, and the live ones are
      listed at each new peak of step 2."""

    def __init__(self, roots, optm, vocab: int, threshold: int):
        super().__init__(roots[0], optm, vocab)
        self.stage_roots = list(roots)
        if len(roots) > 1:
            self._root_mod = nn.ModuleList(roots)
        self.threshold = threshold
        self.big = WeakIdKeyDictionary()  # UntypedStorage -> creation info
        self.record_live = False
        self.peak_live = []
        self.peak_phase = None
        self.step_no = 0  # the training step (1, 2) during which a storage was created; 0: setup

    def _fsdp_state_pre_forward(self, fsdp_mod, orig):
        inner = super()._fsdp_state_pre_forward(fsdp_mod, orig)
        is_root = any(fsdp_mod is r for r in self.stage_roots)

        def pre_forward(*args, **kwargs):
            if is_root and not self._mod_tracker.is_bw:
                self.memory_tracking.pop(fsdp_mod, None)  # one root forward per micro-batch
            return inner(*args, **kwargs)
        return pre_forward

    # -- creation context of large storages
    def _note(self, t, how: str) -> None:
        for st in get_untyped_storages(t):
            if st in self.big or st not in self._WINFO:
                continue
            n = st.nbytes()
            if 0 < n < self.threshold:
                continue  # size 0: an FSDP all-gather output that is resized (kept: it grows)
            parents = [p for p in self._mod_tracker.parents if p != "Global"]
            local = getattr(t, "_local_tensor", t)  # a DTensor registered by the tracker: its local shard
            self.big[st] = {
                "shape": list(local.shape), "dtype": str(t.dtype).replace("torch.", ""),
                "created_as": self._WINFO[st][0].reftype.value if hasattr(self._WINFO[st][0].reftype, "value")
                else str(self._WINFO[st][0].reftype),
                "op": str(self._func) if how == "dispatch" else how,
                "action": self.phase, "module": max(parents, key=len) if parents else "-",
                "recompute": self.recomputing, "step": self.step_no, "stack": short_stack(),
            }

    def _track(self, reftype, t):
        super()._track(reftype, t)
        if not tp_plan.in_sharding_propagation():
            self._note(t, "dispatch")

    def _update_and_maybe_create_winfos(self, t, reftype, update_existing=False):
        out = super()._update_and_maybe_create_winfos(t, reftype, update_existing)
        self._note(t, f"tracker:{reftype.value if hasattr(reftype, 'value') else reftype}")
        return out

    def _update_peak_stats(self, peak_state):
        before = self._max_total
        super()._update_peak_stats(peak_state)
        if self.record_live and self._max_total > before:
            live = []
            for st, info in self.big.items():
                w = self._WINFO.get(st)
                if w is None:
                    continue
                winfo = w[0]
                if winfo.mem_consumed >= self.threshold:
                    live.append((info, winfo.mem_consumed, winfo.reftype))
            self.peak_live = live
            self.peak_phase = self.phase
            self.peak_func = str(self._func)
            self.peak_module = self._module(self._unit())


def instrument_stage(stage, schedule, tracker) -> None:
    """Names the pipeline action running, for the tracker's moments and the live-tensor list."""
    s = stage.stage_index

    def wrap(obj, name, label):
        orig = getattr(obj, name)

        def wrapped(*args, **kwargs):
            prev = tracker.phase
            mb = args[0] if args and isinstance(args[0], int) else kwargs.get("fwd_chunk_id",
                                                                                kwargs.get("bwd_chunk_id", ""))
            tracker.phase = label.format(s=s, mb=mb)
            try:
                return orig(*args, **kwargs)
            finally:
                tracker.phase = prev if label.startswith("recv") else f"after {tracker.phase}"
        setattr(obj, name, wrapped)

    wrap(stage, "forward_one_chunk", "F s{s} mb{mb}")
    wrap(stage, "backward_one_chunk", "B s{s} mb{mb}")
    wrap(stage, "get_fwd_recv_ops", "recv-act s{s} mb{mb}")
    wrap(stage, "get_bwd_recv_ops", "recv-grad s{s} mb{mb}")
    wrap(stage, "perform_reduce_grad", "reduce-grad s{s}")


def instrument_schedule(schedule, tracker) -> None:
    orig = schedule._compute_loss

    def compute_loss(*args, **kwargs):
        prev = tracker.phase
        tracker.phase = f"loss ({prev})"
        try:
            return orig(*args, **kwargs)
        finally:
            tracker.phase = prev
    schedule._compute_loss = compute_loss


# ---- the run -----------------------------------------------------------------------------------------------------
def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-yaml", required=True, help="shardplan model YAML (`shardplan presets show NAME`)")
    p.add_argument("--pp", type=int, default=4, help="pipeline degree (pipeline ranks)")
    p.add_argument("--pp-rank", type=int, default=0, help="the pipeline rank simulated")
    p.add_argument("--dp", type=int, default=2, help="FSDP degree")
    p.add_argument("--tp", type=int, default=1, help="tensor parallel degree (torchtitan's plan with SP)")
    p.add_argument("--cp", type=int, default=1, help="context-parallel degree: torch's ring (cp_plan.py); FSDP over "
                   "dp × cp, as torchtitan's dp_shard_cp")
    p.add_argument("--kv", choices=["grouped", "repeated"], default="grouped",
                   help="K/V copied to every query head before SDPA (torchtitan until 2026-01) or not")
    p.add_argument("--rope", choices=["per-layer", "shared"], default="per-layer",
                   help="RoPE tables: one per attention layer (torchtitan since 2026-06) or one for the model")
    p.add_argument("--schedule", choices=["1f1b", "interleaved"], default="1f1b")
    p.add_argument("--vpp", type=int, default=1, help="stages per rank (interleaved)")
    p.add_argument("--layers-per-stage", type=int, default=0,
                   help="blocks in each stage this rank holds (default: the model's layers / (pp × vpp))")
    p.add_argument("--n-microbatches", type=int, default=0, help="default: pp")
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--recompute", choices=["none", "full", "selective"], default="full")
    p.add_argument("--ac-early-stop", action="store_true",
                   help="full AC with torch.utils.checkpoint's early stop (torchtitan 9dec370's default); default: "
                        "early_stop=False as fsdp2_mem.py and current torchtitan")
    p.add_argument("--reshard-after-forward", action="store_true",
                   help="fully_shard(reshard_after_forward=True) (torchtitan without PP); default False as under PP")
    p.add_argument("--no-return-outputs", action="store_true",
                   help="schedule.step(return_outputs=False); default: torch's default True, as torchtitan 9dec370 "
                        "called step")
    p.add_argument("--float8", action="store_true", help="torchao float8 tensorwise linears, their TP plan, FP8 "
                   "all-gather (torchtitan's Table 5/6 runs; tp_plan.convert_float8)")
    p.add_argument("--no-fp8-all-gather", action="store_true", help="with --float8: bf16 all-gather")
    p.add_argument("--alloc-replay", action="store_true", help="also replay the allocations through the caching "
                   "allocator's rules (allocator_replay.py): step 2's max reserved")
    p.add_argument("--alloc-trace", metavar="FILE", help="with --alloc-replay: also write the allocator events and the "
                   "step-2 start to FILE (pickle), for allocator_holes.py")
    p.add_argument("--optimizer", choices=["foreach", "fused", "for-loop"], default="foreach")
    p.add_argument("--min-mb", type=float, default=1.0, help="list live allocations of at least this many MiB")
    p.add_argument("--top", type=int, default=60, help="live allocations listed one by one")
    p.add_argument("--out", help="also write the JSON here")
    return p.parse_args(argv)


def named(snap) -> dict:
    return fsdp2_mem.named(snap)


def classify(info, reftype: str) -> str:
    """A coarse name for a live allocation, from its category and creation stack."""
    stack = " ".join(info["stack"])
    if "_recv_buffers.py:allocate_buffer" in stack:
        return "pipelining recv buffer (act)" if info["action"].startswith("recv-act") else "pipelining recv buffer (grad)"
    if reftype == "Sharded Param":
        return "fp32 parameter shard"
    if reftype == "OptState":
        return "optimizer state"
    if reftype in ("Unsharded Param", "All Gather"):
        return "gathered bf16 parameter"
    if reftype in ("Unsharded Grad",):
        return "unsharded gradient"
    if reftype in ("Sharded Grad", "Reduce Scatter"):
        return "sharded gradient / reduce-scatter"
    if reftype == "Inputs":
        return "step inputs"
    if reftype == "Buffer":
        return "module buffer"
    if info["action"].startswith("F ") and not info["recompute"]:
        if info["shape"] and info["shape"][-1] == info.get("_vocab"):
            return "logits (forward)"
        return "forward activation (saved / stage output)"
    if info["action"].startswith("loss"):
        return "loss temporaries (logits fp32 / log-softmax)"
    return "backward / recompute temporary"


def run(args) -> dict:
    t0 = time.time()
    shape = models.shape_from_yaml(args.model_yaml)
    models.check_shape(shape)
    pp, dp, tp, vpp, cp = args.pp, args.dp, args.tp, args.vpp, args.cp
    cp_plan.check(args.seq, cp, dp * cp, tp)
    if args.schedule == "1f1b" and vpp != 1:
        raise ValueError("--vpp needs --schedule interleaved")
    if args.schedule == "interleaved" and vpp < 2:
        vpp = 2
    n_stages = pp * vpp
    if not 0 <= args.pp_rank < pp:
        raise ValueError(f"--pp-rank must be in [0, {pp})")
    n_mb = args.n_microbatches or pp
    lps = args.layers_per_stage or max(1, shape.layers // n_stages)
    stage_ids = [args.pp_rank + i * pp for i in range(vpp)]  # torchtitan's "loop" style stage ids per rank
    world = pp * dp * cp * tp
    # torchtitan's mesh order (pp, dp, cp, tp): this rank is dp, cp and tp rank 0 of pipeline rank pp_rank
    rank = args.pp_rank * dp * cp * tp
    if tp > 1 or cp > 1:
        tp_plan.check_divisible(shape, tp)
        tp_plan.allow_meshes_under_fake_mode()
        tp_plan.hide_sharding_propagation()
        if args.seq % (tp * cp):
            raise ValueError("--seq must be a multiple of --tp × --cp (sequence parallelism of each CP rank's tokens)")
    release_outputs_like_cuda()
    dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
    from torch.distributed.device_mesh import init_device_mesh
    # built outside FakeTensorMode (tp_plan.py: DeviceMesh computes rank coordinates with real tensors)
    cp_mesh = None
    if cp > 1:  # FSDP over dp × cp flattened, as torchtitan's dp_shard_cp
        mesh = init_device_mesh("cpu", (pp, dp, cp, tp), mesh_dim_names=("pp", "dp", "cp", "tp"))
        dp_mesh, cp_mesh = mesh["dp", "cp"]._flatten("dp_cp"), mesh["cp"]
    elif tp > 1:
        mesh = init_device_mesh("cpu", (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))
    else:
        mesh = init_device_mesh("cpu", (pp, dp), mesh_dim_names=("pp", "dp"))
    pp_group = mesh["pp"].get_group()
    if cp == 1:
        dp_mesh = mesh["dp"]
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleInterleaved1F1B

    mb, seq = args.micro_batch, args.seq
    act_seq = seq // cp // tp  # stage boundary tensor: [mb, S / cp / tp, D] (CP's share, split by SP)
    impl = models.Impl("titan", shape, seq)
    device = torch.device("cpu")
    with FakeTensorMode(allow_non_fake_inputs=tp > 1 or cp > 1):
        parts, stages = [], []
        n_units = 0
        for sid in stage_ids:
            first, last = sid == 0, sid == n_stages - 1
            layer_ids = range(sid * lps, (sid + 1) * lps)
            with torch.device("meta"):
                part = StageDecoder(shape, seq, layer_ids, first, last, kv_repeated=args.kv == "repeated")
            if args.float8:
                tp_plan.convert_float8(part, fsdp_float8_all_gather=not args.no_fp8_all_gather)
            if tp > 1:
                tp_plan.apply_tp(part, mesh["tp"], args.float8)
            apply_recompute_stage(impl, part, args.recompute, args.ac_early_stop)
            n_units += apply_fsdp_stage(part, dp_mesh, args.reshard_after_forward)
            part.to_empty(device="cpu")
            if args.rope == "shared":
                models.share_rope_tables(part)
            part.train()
            parts.append(part)
            with torch.device("meta"):
                inp = (torch.empty(mb, seq // cp, dtype=torch.int64) if first
                       else torch.empty(mb, act_seq, shape.hidden, dtype=torch.bfloat16, requires_grad=True))
                out = (torch.empty(mb, seq, shape.vocab // tp, dtype=torch.bfloat16, requires_grad=True) if last
                       else torch.empty(mb, act_seq, shape.hidden, dtype=torch.bfloat16, requires_grad=True))
            stages.append(PipelineStage(part, sid, n_stages, device, input_args=(inp,), output_args=(out,),
                                        group=pp_group))
        n_params = sum(models.count_params(p) for p in parts)
        params = [q for p in parts for q in p.parameters()]
        optimizer = recipe.make_optimizer(params, args.optimizer)
        if args.schedule == "1f1b":
            schedule = Schedule1F1B(stages[0], n_microbatches=n_mb, loss_fn=torchtitan_loss)
        else:
            schedule = ScheduleInterleaved1F1B(stages, n_microbatches=n_mb, loss_fn=torchtitan_loss)
        has_first = any(s.is_first for s in stages)
        has_last = any(s.is_last for s in stages)
        tokens = torch.randint(0, shape.vocab, (mb * n_mb, seq), dtype=torch.int64)  # the local batch
        labels = torch.randint(0, shape.vocab, (mb * n_mb, seq), dtype=torch.int64)
        tracker = PPTracker(parts, optimizer, shape.vocab // tp, int(args.min_mb * MiB))
        fsdp2_mem.begin_alloc_trace(tracker, args.alloc_replay)
        tracker.track_inputs((tokens, labels))
        replay_from = 0
        for part in parts:
            fsdp2_mem.mark_recompute(part, tracker)
        janitor = GradHookJanitor()
        for stage in stages:
            attach_janitor(stage, janitor)
            instrument_stage(stage, schedule, tracker)
        instrument_schedule(schedule, tracker)
        build_s = time.time() - t0
        steps = []
        return_outputs = not args.no_return_outputs
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]), tracker:
            for step in range(2):
                ts = time.time()
                tracker.step_no = step + 1
                if step == 1:
                    replay_from = len(tracker.alloc_trace) if args.alloc_replay else 0
                    start = tracker.begin_step()
                    tracker.record_live = True
                else:
                    start = fsdp2_mem.current_device_snapshot(tracker)
                tracker.phase = "zero_grad"
                optimizer.zero_grad(set_to_none=True)
                tracker.phase = "schedule.step"
                # Under CP the step's batch is split in place (context_parallel's buffers): fresh copies each step.
                batch = (tokens.clone(), labels.clone()) if cp > 1 else (tokens, labels)
                with tp_plan.loss_context(tp), (cp_plan.cp_context(cp_mesh, batch) if cp > 1 else
                                                contextlib.nullcontext()):
                    losses = [] if has_last else None
                    step_args = (batch[0],) if has_first else ()
                    result = schedule.step(*step_args, target=batch[1] if has_last else None, losses=losses,
                                           return_outputs=return_outputs)
                    del result, losses
                janitor.step_done()
                tracker.phase = "optimizer"
                optimizer.step()
                tracker.phase = "idle"
                tracker.record_live = False
                peak = named(next(iter(tracker.get_tracker_snapshot("peak").values())))
                steps.append({"start": start, "peak": peak, "end": fsdp2_mem.current_device_snapshot(tracker),
                              "seconds": round(time.time() - ts, 2)})
    s2 = steps[1]
    replayed = fsdp2_mem.replay_alloc_trace(tracker, replay_from, args.alloc_trace)
    peak_key = tracker.peak_key
    peak_moment = fsdp2_mem.moment_json(peak_key, tracker.moments[peak_key]) if peak_key else None
    live = []
    for info, nbytes, reftype in tracker.peak_live:
        rt = reftype.value if hasattr(reftype, "value") else str(reftype)
        info = dict(info, _vocab=shape.vocab // tp)
        live.append({"bytes": nbytes, "category": rt, "what": classify(info, rt),
                     **{k: v for k, v in info.items() if k != "_vocab"}})
    live.sort(key=lambda e: -e["bytes"])
    groups = collections.OrderedDict()
    for e in live:
        key = (e["what"], e["category"], tuple(e["shape"]), e["dtype"], e["step"])
        g = groups.setdefault(key, {"what": e["what"], "category": e["category"], "shape": e["shape"],
                                    "dtype": e["dtype"], "created_in_step": e["step"], "count": 0, "bytes": 0,
                                    "example": e})
        g["count"] += 1
        g["bytes"] += e["bytes"]
    by_what = collections.Counter()
    for e in live:
        by_what[e["what"]] += e["bytes"]
    listed = sum(e["bytes"] for e in live)
    phase_peaks = {}
    for key, m in tracker.moments.items():
        kind = key[0].split(" mb")[0]
        if kind not in phase_peaks or m["total"] > phase_peaks[kind]["bytes"]:
            phase_peaks[kind] = fsdp2_mem.moment_json(key, m)
    return {
        "case": {"model": shape.name, "pp": pp, "pp_rank": args.pp_rank, "dp": dp, "tp": tp, "cp": cp, "kv": args.kv,
                 "rope": args.rope,
                 "schedule": args.schedule, "vpp": vpp, "stages": stage_ids, "n_stages": n_stages,
                 "layers_per_stage": lps, "n_microbatches": n_mb, "micro_batch": mb, "seq": seq,
                 "recompute": args.recompute, "float8": args.float8, "ac_early_stop": args.ac_early_stop,
                 "reshard_after_forward": args.reshard_after_forward,
                 "return_outputs": return_outputs, "optimizer": args.optimizer, "world": world, "rank": rank},
        "versions": {"torch": torch.__version__},
        "model": {"params_on_rank_before_sharding": n_params, "fsdp_units": n_units},
        "peak": {"bytes": s2["peak"][TOTAL], "gib": round(s2["peak"][TOTAL] / GiB, 3), "breakdown": s2["peak"],
                 "moment": peak_moment, "action": tracker.peak_phase,
                 "op": getattr(tracker, "peak_func", None), "module": getattr(tracker, "peak_module", None)},
        "live_at_peak": {
            "min_bytes": int(args.min_mb * MiB), "listed_bytes": listed, "unlisted_bytes": s2["peak"][TOTAL] - listed,
            "by_what": dict(sorted(by_what.items(), key=lambda kv: -kv[1])),
            "groups": [{k: v for k, v in g.items() if k != "example"} | {"example_stack": g["example"]["stack"],
                       "example_action": g["example"]["action"], "example_module": g["example"]["module"],
                       "example_op": g["example"]["op"]} for g in sorted(groups.values(), key=lambda g: -g["bytes"])],
            "tensors": live[: args.top],
        },
        "phase_peaks": dict(sorted(phase_peaks.items(), key=lambda kv: -kv[1]["bytes"])),
        "allocator_replay": replayed,
        "flash_attention_calls": tracker.flash_calls,  # both steps; under --cp one per ring step
        "step1_peak_bytes": steps[0]["peak"][TOTAL],
        "step2": {"start": s2["start"], "end": s2["end"]},
        "seconds": {"build": round(build_s, 2), "step1": steps[0]["seconds"], "step2": s2["seconds"],
                    "total": round(time.time() - t0, 2)},
    }


def main(argv=None) -> int:
    return fsdp2_mem.run_and_print(run, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
