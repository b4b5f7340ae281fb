#!/usr/bin/env python3
"""One case of the FSDP2 memory cross-check (issue 15): what PyTorch allocates per rank, without a GPU.

Builds the model on the meta device under FakeTensorMode, shards it with fully_shard over a fake process group of
N ranks, and runs two training steps (forward, cross-entropy, backward, AdamW, zero_grad) under
torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker; step 2 is reported (step 1's lazy optimizer-state init
under fake mode makes full-size DTensor temporaries that a real run does not). Prints one JSON object.

  bench/torch/fsdp2_mem.py --model-yaml llama3-8b.yaml --impl hf --ranks 8 --zero 3 --recompute full --seq 8192

The recipe follows torchtitan's memory estimator (scripts/estimate/estimation.py, removed upstream in 76d5c72;
read at its parent) and torchtitan/distributed/fsdp.py apply_fsdp_to_decoder. README.md beside this file says
where fake CPU tensors stand in for CUDA and how.
"""
import argparse
import contextlib
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed._tools.mem_tracker as mem_tracker  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.distributed._tools.common_utils import get_untyped_storages  # noqa: E402
from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker, _FSDPRefType  # noqa: E402
from torch.distributed.fsdp import FSDPModule  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: E402

import cp_plan  # noqa: E402
import models  # noqa: E402
import tp_plan  # noqa: E402
from recipe import FLASH_OP, apply_fsdp, apply_recompute, make_optimizer, recompute_mode  # noqa: E402

# CUDACachingAllocator round_size(): every block is a multiple of kMinBlockSize = 512 bytes. mem_tracker applies it
# to cuda tensors only (_WeakRefInfo._calculate_mem_consumed); ours are fake cpu tensors standing in for cuda ones.
ALLOC_ROUND = 512


def round_alloc(nbytes: int) -> int:
    return math.ceil(nbytes / ALLOC_ROUND) * ALLOC_ROUND


def _rounded_mem_consumed(self) -> int:
    return round_alloc(self.size * self.element_size)


mem_tracker._WeakRefInfo._calculate_mem_consumed = _rounded_mem_consumed

TOTAL = "Total"
SOFTMAX_OP = torch.ops.aten._softmax.default


class StreamScope:
    """The stream each allocation is made on, for allocator_replay.py (the caching allocator pools blocks by stream).
    Fake CPU tensors carry none, but FSDP2 enters its streams through the device handle (here torch.cpu) as on a GPU:
    _fsdp_collectives.py foreach_all_gather allocates the all-gather input and output under
    `device_handle.stream(all_gather_copy_in_stream)`, foreach_reduce the reduce-scatter output (the new sharded
    gradient) under `stream(reduce_scatter_stream)` and its input on the current stream. Wrapping torch.cpu.stream
    records which stream object is current; "compute" outside any."""
    stack = []
    names = {}

    @classmethod
    def install(cls) -> None:
        if getattr(torch.cpu.stream, "_scoped", False):
            return
        original = torch.cpu.stream

        class Scope:
            def __init__(self, s):
                self.s, self.ctx = s, original(s)

            def __enter__(self):
                cls.stack.append(cls.names.setdefault(id(self.s), f"side stream {len(cls.names) + 1}"))
                return self.ctx.__enter__()

            def __exit__(self, *exc):
                cls.stack.pop()
                return self.ctx.__exit__(*exc)

        def stream(s):
            return Scope(s)

        stream._scoped = True
        torch.cpu.stream = stream

    @classmethod
    def current(cls) -> str:
        return cls.stack[-1] if cls.stack else "compute"


def begin_alloc_trace(tracker, on: bool) -> None:
    """--alloc-replay: the tracker logs allocator events (MomentTracker._update_snap) with their streams."""
    tracker.alloc_trace = [] if on else None
    if on:
        StreamScope.install()


def replay_alloc_trace(tracker, reset_at: int, trace_out: str = None):
    """What the caching allocator would reserve for the logged allocations (allocator_replay.py), the peaks from event
    `reset_at` (the reported step's start), by the default rules and (key `expandable_segments`) under
    expandable_segments:True; None without a trace."""
    if tracker.alloc_trace is None:
        return None
    import allocator_replay
    if trace_out:
        import pickle
        with open(trace_out, "wb") as f:
            pickle.dump({"events": tracker.alloc_trace, "reset_at": reset_at}, f)
    out = allocator_replay.replay(tracker.alloc_trace, reset_at=reset_at)
    out["expandable_segments"] = allocator_replay.replay(tracker.alloc_trace, reset_at=reset_at, expandable=True)
    return out


class MomentTracker(FSDPMemTracker):
    """FSDPMemTracker that also names the moment of every maximum: the training phase the loop is in, the
    innermost FSDP unit and module running (forward, backward or recompute), FSDP's hook state and the op; and
    keeps the bytes of tensors whose last dimension is the vocabulary (logits and their cross-entropy copies)."""

    def __init__(self, mod, optm, vocab: int):
        super().__init__(mod, optm)
        self.phase = "setup"
        self.vocab = vocab
        self.logit_bytes = 0
        self.moments = {}
        self.peak_key = None
        self.current_unit = "-"
        self.units = set()  # FSDP units' ModTracker names, known after the first forward
        self.in_post_backward = False  # inside a unit's FSDPParamGroup.post_backward
        self.recomputing = False  # set by hooks on checkpointed blocks (mark_recompute)
        self.flash_calls = self.flash_masked_calls = self.softmax_calls = 0
        self.flash_kv_heads = set()  # (query heads, key heads) seen: GQA is native when they differ
        self._func = None
        self._max_total = 0

    def begin_step(self) -> dict:
        """Restarts the peak (the global one and each moment's) at the current allocation."""
        self.reset_mod_stats()
        snap = self.get_tracker_snapshot()
        self._peak_mem_snap = snap
        self._peak_mem = {dev: s[TOTAL] for dev, s in snap.items()}
        self._max_total = max(self._peak_mem.values(), default=0)
        self.moments, self.peak_key = {}, None
        self.flash_calls = self.flash_masked_calls = self.softmax_calls = 0
        self.units = {self._mod_tracker.get_known_fqn(m) for m in self._root_mod.modules() if isinstance(m, FSDPModule)}
        self._hook_unsharded_grads()
        return current_device_snapshot(self)

    def _hook_unsharded_grads(self) -> None:
        """FSDPMemTracker names a unit's weight gradients "Unsharded Grad" only at its post-backward; until then
        they count as "Temp". A post-accumulate-grad hook on each unsharded parameter names them when autograd
        writes them (the unsharded parameters persist across steps: FSDPParam.init_unsharded_param)."""
        for m in self._root_mod.modules():
            group = m._get_fsdp_state()._fsdp_param_group if isinstance(m, FSDPModule) else None
            for fsdp_param in group.fsdp_params if group else []:
                param = fsdp_param._unsharded_param
                if not getattr(param, "_moment_tracker_hook", False):
                    param.register_post_accumulate_grad_hook(self._name_unsharded_grad)
                    param._moment_tracker_hook = True

    def _name_unsharded_grad(self, param) -> None:
        if param.grad is not None:
            self._update_and_maybe_create_winfos(param.grad, _FSDPRefType.UNSHARDED_GRAD)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self._func = func
        if func is FLASH_OP or func is cp_plan.FLASH_CUDA_OP:
            # (query [B, H, S, hd], key [B, Hkv, S, hd], value, dropout_p, is_causal, attn_mask, scale); the CUDA
            # op (the ring's, under --cp: one call per ring step) has no mask argument
            self.flash_calls += 1
            q, k = args[0], args[1]
            mask = args[5] if len(args) > 5 and func is FLASH_OP else (kwargs or {}).get("attn_mask")
            self.flash_masked_calls += mask is not None
            self.flash_kv_heads.add((q.shape[1], k.shape[1]))
        elif func is SOFTMAX_OP:
            self.softmax_calls += 1
        return super().__torch_dispatch__(func, types, args, kwargs)

    def _track(self, reftype, t):
        if tp_plan.in_sharding_propagation():
            return  # DTensor's global-shape metadata inference, not an allocation (tp_plan.hide_sharding_propagation)
        if self.in_post_backward and reftype in (_FSDPRefType.TEMP, _FSDPRefType.ACT):
            # foreach_reduce allocates the reduce-scatter input (and output) before the collective that the
            # tracker keys "Reduce Scatter" on: name them at allocation so a peak inside shows them as such
            reftype = _FSDPRefType.REDUCE_SCATTER
        new = [st for st in get_untyped_storages(t) if st not in self._WINFO]
        super()._track(reftype, t)
        if new and t.dim() >= 2 and t.shape[-1] == self.vocab:
            for st in new:
                winfo = self._WINFO[st][0]
                winfo.is_logits = True
                self.logit_bytes += winfo.mem_consumed

    def _update_snap(self, u_type, winfo, old_mem_consumed=None, old_reftype=None):
        """Every change of tracked memory, also as allocator events when `alloc_trace` is a list (allocator_replay.py):
        a new storage, a freed one, and FSDP's storage resizes (free_storage / alloc_storage) as a free and an
        allocation."""
        super()._update_snap(u_type, winfo, old_mem_consumed, old_reftype)
        trace = getattr(self, "alloc_trace", None)
        if trace is None:
            return
        name = u_type.name
        if name in ("DEL", "SIZE") and getattr(winfo, "_alloc_key", None) is not None:
            trace.append(("f", winfo._alloc_key))
            winfo._alloc_key = None
        if name in ("ADD", "SIZE") and winfo.mem_consumed > 0:
            winfo._alloc_key = len(trace)
            trace.append(("a", winfo._alloc_key, winfo.mem_consumed))
            if StreamScope.current() != "compute":
                trace.append(("s", winfo._alloc_key, StreamScope.current()))

    def _delete_callback(self, winfo, w_st):
        if getattr(winfo, "is_logits", False):
            self.logit_bytes -= winfo.mem_consumed
        super()._delete_callback(winfo, w_st)

    # The unit of the moment: the FSDP unit whose hook (pre/post forward, pre/post backward) ran last.
    def _naming(self, fsdp_mod, inner, recompute_ends=False):
        def wrapped(*args, **kwargs):
            self.current_unit = self._mod_tracker.get_known_fqn(fsdp_mod) or "-"
            if recompute_ends:  # a recomputation never spans a unit's backward hooks
                self.recomputing = False
            return inner(*args, **kwargs)
        return wrapped

    def _fsdp_state_pre_forward(self, fsdp_mod, orig):
        return self._naming(fsdp_mod, super()._fsdp_state_pre_forward(fsdp_mod, orig))

    def _fsdp_state_post_forward(self, fsdp_mod, orig):
        return self._naming(fsdp_mod, super()._fsdp_state_post_forward(fsdp_mod, orig))

    def _fsdp_param_group_pre_backward(self, fsdp_mod, orig):
        return self._naming(fsdp_mod, super()._fsdp_param_group_pre_backward(fsdp_mod, orig), recompute_ends=True)

    def _fsdp_param_group_post_backward(self, fsdp_mod, orig):
        inner = self._naming(fsdp_mod, super()._fsdp_param_group_post_backward(fsdp_mod, orig), recompute_ends=True)

        def post_backward(*args, **kwargs):
            self.in_post_backward = True
            try:
                return inner(*args, **kwargs)
            finally:
                self.in_post_backward = False
        return post_backward

    def _unit(self) -> str:
        """In forward ModTracker's parents are exact: the innermost FSDP unit running. In backward they are not
        (a block's entry can outlive its backward): the unit whose FSDP hook ran last."""
        if not self._mod_tracker.is_bw and self.units:
            running = [p for p in self._mod_tracker.parents if p in self.units]
            if running:
                return max(running, key=len)
        return self.current_unit

    def _key(self, unit):
        return (self.phase, unit, self._fsdp_state.name, self.recomputing)

    def _module(self, unit) -> str:
        """The innermost module running inside the unit (ModTracker's parents), else the unit."""
        inside = [p for p in self._mod_tracker.parents if p == unit or p.startswith(unit + ".")]
        return max(inside, key=len) if inside else unit

    def _update_peak_stats(self, peak_state):
        super()._update_peak_stats(peak_state)
        if not self._curr_mem_snap:
            return
        snap = next(iter(self._curr_mem_snap.values()))
        total = snap[TOTAL]
        unit = self._unit()
        key = self._key(unit)
        m = self.moments.get(key)
        if m is None or total > m["total"]:
            self.moments[key] = {"total": total, "breakdown": named(snap), "logits": self.logit_bytes,
                                 "module": self._module(unit), "op": str(self._func)}
        if total > self._max_total:
            self._max_total, self.peak_key = total, key


def named(snap: dict) -> dict:
    return {(k.value if hasattr(k, "value") else str(k)): int(v) for k, v in snap.items()}


def current_device_snapshot(tracker) -> dict:
    snaps = tracker.get_tracker_snapshot()
    return named(next(iter(snaps.values()))) if snaps else {}


def unit_state(snaps) -> dict:
    """A unit's snapshots of one hook state (one per call): the last call's total and activations."""
    last = named(next(iter(snaps[-1].values()))) if snaps and snaps[-1] else {}
    return {"total": last.get(TOTAL, 0), "activation": last.get("Activation", 0)}


def activation_per_token_per_block(unit_stats: dict, blocks: list, tokens: int) -> float:
    """Forward growth of the Activation category from one block's post-forward to the next's, per token (the
    median over the blocks): what a block keeps for its backward."""
    acts = [unit_stats[b]["After Post-Forward"]["activation"] for b in blocks
            if b in unit_stats and "After Post-Forward" in unit_stats[b]]
    deltas = sorted(b - a for a, b in zip(acts, acts[1:]))
    return deltas[len(deltas) // 2] / tokens if deltas else 0.0


def moment_json(key, m) -> dict:
    phase, unit, state, ac = key
    return {"phase": phase, "unit": unit, "fsdp_state": state, "recompute": ac, "module": m["module"],
            "op": m["op"], "bytes": m["total"], "logits": m["logits"], "breakdown": m["breakdown"]}


def mark_recompute(model, tracker) -> None:
    """Checkpointed blocks rerun their inner module inside backward, below FSDP's hooks (which sit on the
    wrapper): hooks on the inner module tell the tracker when a forward is a recomputation."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

    def pre(_mod, _args):
        tracker.recomputing = torch._C._current_graph_task_id() != -1

    def post(_mod, _args, _out):
        tracker.recomputing = False

    for m in model.modules():
        if isinstance(m, CheckpointWrapper):
            m._checkpoint_wrapped_module.register_forward_pre_hook(pre)
            m._checkpoint_wrapped_module.register_forward_hook(post)


def expected_shard_bytes(shapes, ranks: int, elem: int) -> int:
    """Rank 0's dim-0 chunk of every parameter (FSDP2 Shard(0), torch.chunk sizes), each its own allocation."""
    total = 0
    for shape in shapes:
        rows = math.ceil(shape[0] / ranks) if shape else 1
        total += round_alloc(rows * math.prod(shape[1:]) * elem)
    return total


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model-yaml", help="shardplan model YAML (e.g. `shardplan presets show llama3-8b` output)")
    src.add_argument("--hf-config", help="HF config.json (Llama family or GPT-2)")
    p.add_argument("--impl", choices=["hf", "titan"], default="titan")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (titan only; torchtitan's plan, SP, loss_parallel)")
    p.add_argument("--cp", type=int, default=1, help="context-parallel degree (titan only; torch's ring attention "
                   "under torchtitan's (dp_shard, cp) mesh: cp_plan.py)")
    p.add_argument("--kv", choices=["grouped", "repeated"], default="grouped", help="titan: K/V handed to SDPA per "
                   "group, or copied to every query head (torchtitan's repeat_kv until 2026-01)")
    p.add_argument("--rope", choices=["per-layer", "shared"], default="per-layer", help="titan: RoPE tables, one per "
                   "attention layer (torchtitan since 2026-06) or one for the model")
    p.add_argument("--zero", type=int, choices=[2, 3], default=3)
    p.add_argument("--recompute", type=recompute_mode, default="none",
                   help="none | full | selective | layersN (the first N blocks only) | everyK (every K-th block only)")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--wrap", choices=["blocks", "titan"], default="blocks",
                   help="blocks: each block and the root (default); titan: also embedding and [norm, lm_head]")
    p.add_argument("--optimizer", choices=["foreach", "fused", "for-loop"], default="foreach",
                   help="AdamW implementation (foreach: PyTorch's default on CUDA)")
    p.add_argument("--layers", type=int, default=0, help="override the shape's layer count (small checks)")
    p.add_argument("--mtp", type=int, default=-1, help="titan: multi-token-prediction modules (torchtitan's "
                   "MTPDecoder and MTPLoss; -1: the model YAML's mtp_layers)")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step; FSDP2 reduces "
                   "each one's gradients as torchtitan's train step does (no set_requires_gradient_sync)")
    p.add_argument("--hsdp", type=int, default=0, help="hybrid sharding: shard within groups of N ranks, replicate "
                   "across them (a 2-D (replicate, shard) mesh, as torchtitan's dp_replicate × dp_shard)")
    p.add_argument("--alloc-replay", action="store_true", help="also replay the allocations through the caching "
                   "allocator's rules (allocator_replay.py): step 2's max reserved")
    p.add_argument("--alloc-trace", metavar="FILE", help="with --alloc-replay: also write the allocator events and the "
                   "step-2 start to FILE (pickle), for allocator_holes.py")
    p.add_argument("--out", help="also write the JSON here")
    return p.parse_args(argv)


def run(args) -> dict:
    t0 = time.time()
    flag, path = ("--model-yaml", args.model_yaml) if args.model_yaml else ("--hf-config", args.hf_config)
    try:
        shape = models.shape_from_yaml(path) if args.model_yaml else models.shape_from_hf_config(path)
    except OSError as e:
        raise ValueError(f"{flag}: cannot read {path}: {e.strerror}") from e
    except (KeyError, TypeError) as e:
        raise ValueError(f"{flag}: {path} lacks or mistypes the field {e}") from e
    if args.layers:
        shape.layers = args.layers
    if args.mtp >= 0:
        shape.mtp_layers = args.mtp
    if shape.mtp_layers and (args.impl != "titan" or args.tp > 1 or args.cp > 1):
        raise ValueError("MTP modules need --impl titan, --tp 1 and --cp 1 (torchtitan's MTP refuses CP; this "
                         "harness's TP plan has no MTP layer)")
    models.check_shape(shape)
    impl = models.Impl(args.impl, shape, args.seq, kv_repeated=args.kv == "repeated")
    tp, cp = args.tp, args.cp
    if cp > 1 and (args.impl != "titan" or tp > 1):
        raise ValueError(f"--cp {cp} needs --impl titan and --tp 1 (TP × CP: pp_mem.py's 4-D mesh)")
    cp_plan.check(args.seq, cp, args.ranks)
    if tp > 1:
        if args.impl != "titan" or args.ranks % tp:
            raise ValueError(f"--tp {tp} needs --impl titan and --ranks a multiple of it")
        tp_plan.check_divisible(shape, tp)
        tp_plan.allow_meshes_under_fake_mode()
        tp_plan.hide_sharding_propagation()
    if args.hsdp and (tp > 1 or cp > 1 or args.ranks % args.hsdp):
        raise ValueError(f"--hsdp {args.hsdp} needs --tp 1, --cp 1 and --ranks a multiple of it")
    if cp > 1:  # the ring's DTensors: meshes with real rank tables, their metadata inference not counted
        tp_plan.allow_meshes_under_fake_mode()
        tp_plan.hide_sharding_propagation()
    if not dist.is_initialized():
        dist.init_process_group("fake", rank=0, world_size=args.ranks, store=FakeStore())
    from torch.distributed.device_mesh import init_device_mesh
    # Outside FakeTensorMode, as torchtitan's estimator notes; with TP a 2-D (dp, tp) mesh, FSDP over dp; HSDP a 2-D
    # (replicate, shard) mesh, which fully_shard takes as replicate-then-shard.
    mesh2d = init_device_mesh("cpu", (args.ranks // tp, tp), mesh_dim_names=("dp", "tp")) if tp > 1 else None
    cp_mesh = None
    if args.hsdp:
        mesh = init_device_mesh("cpu", (args.ranks // args.hsdp, args.hsdp), mesh_dim_names=("replicate", "shard"))
    elif cp > 1:
        mesh, cp_mesh = cp_plan.meshes(args.ranks, cp)
    else:
        mesh = mesh2d["dp"] if tp > 1 else init_device_mesh("cpu", (args.ranks,))
    dp_ranks = args.hsdp or args.ranks // tp  # the ranks a parameter is sharded over
    torch.manual_seed(0)
    times = {}
    # With TP, DTensor's dispatch reads the meshes' real rank tables: those are the only non-fake inputs.
    with FakeTensorMode(allow_non_fake_inputs=tp > 1 or cp > 1):
        with torch.device("meta"):
            model = impl.build()
        n_params = models.count_params(model)
        if tp > 1:
            tp_plan.apply_tp(model, mesh2d["tp"])
        param_shapes = tp_plan.local_shapes(model)
        apply_recompute(impl, model, args.recompute)
        n_units = apply_fsdp(impl, model, mesh, args.zero, args.wrap)
        model.to_empty(device="cpu")
        if args.rope == "shared":
            models.share_rope_tables(model)
        model.train()
        optimizer = make_optimizer(model.parameters(), args.optimizer)
        tokens = torch.randint(0, shape.vocab, (args.micro_batch, args.seq), dtype=torch.int64)  # [B, S]
        labels = torch.randint(0, shape.vocab, (args.micro_batch, args.seq), dtype=torch.int64)  # [B, S]
        tracker = MomentTracker(model, optimizer, shape.vocab // tp)  # logits are vocabulary-sharded under TP
        begin_alloc_trace(tracker, args.alloc_replay)
        tracker.track_inputs((tokens, labels))
        replay_from = 0
        mark_recompute(model, tracker)
        times["build_s"] = time.time() - t0
        steps = []
        # Only the flash kernel: F.scaled_dot_product_attention raises instead of falling back to the math path.
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]), tracker:
            for step in range(2):
                ts = time.time()
                if step == 1 and args.alloc_replay:
                    replay_from = len(tracker.alloc_trace)
                start = tracker.begin_step() if step == 1 else current_device_snapshot(tracker)
                for micro in range(args.grad_accum):  # torchtitan train.py train_step: forward_backward_step each
                    if micro:
                        tracker.reset_mod_stats()  # the tracker's per-module stats take one forward per step
                    # Under CP each step's buffers are split in place (context_parallel's no_restore_buffers): fresh
                    # copies, as a data loader's batch is.
                    batch = (tokens.clone(), labels.clone()) if cp > 1 else (tokens, labels)
                    with tp_plan.loss_context(tp), (cp_plan.cp_context(cp_mesh, batch) if cp > 1 else
                                                    contextlib.nullcontext()):
                        tracker.phase = "forward"
                        loss = impl.loss(model, *batch)
                        tracker.phase = "backward"
                        loss.backward()
                        del loss
                tracker.phase = "optimizer"
                optimizer.step()
                tracker.phase = "zero_grad"
                optimizer.zero_grad(set_to_none=True)
                tracker.phase = "idle"
                peak = named(next(iter(tracker.get_tracker_snapshot("peak").values())))
                steps.append({"start": start, "peak": peak, "end": current_device_snapshot(tracker),
                              "seconds": round(time.time() - ts, 2)})
        unit_stats = {}
        for mod, st in tracker.memory_tracking.items():
            unit_stats[st.mod_fqn] = {state.value: unit_state(snaps) for state, snaps in st.snapshots.items()}
    times["total_s"] = round(time.time() - t0, 2)
    times["build_s"] = round(times["build_s"], 2)
    s2 = steps[1]
    replayed = replay_alloc_trace(tracker, replay_from, args.alloc_trace)
    moments = sorted(tracker.moments.items(), key=lambda kv: -kv[1]["total"])
    peak_moment = moment_json(tracker.peak_key, tracker.moments[tracker.peak_key]) if tracker.peak_key else None
    shard_bytes = expected_shard_bytes(param_shapes, dp_ranks, 4)
    checks = {
        "sharded_param_bytes": s2["start"].get("Sharded Param", 0),
        "expected_sharded_param_bytes": shard_bytes,
        "opt_state_bytes": s2["start"].get("OptState", 0),
        # Adam exp_avg and exp_avg_sq like each shard, plus each parameter's 0-d fp32 `step` (one 512-byte block)
        "expected_opt_state_bytes": 2 * shard_bytes + ALLOC_ROUND * len(param_shapes),
        "input_bytes": s2["start"].get("Inputs", 0),
        "expected_input_bytes": 2 * round_alloc(args.micro_batch * args.seq * 8),
        "unsharded_at_step_start": s2["start"].get("Unsharded Param", 0) + s2["start"].get("Sharded Grad", 0),
        "end_minus_start": s2["end"].get(TOTAL, 0) - s2["start"].get(TOTAL, 0),
        "flash_attention_calls": tracker.flash_calls,
        "flash_attention_masked_calls": tracker.flash_masked_calls,
        "flash_attention_q_kv_heads": sorted(tracker.flash_kv_heads),
        "softmax_calls": tracker.softmax_calls,
    }
    tokens = args.micro_batch * args.seq // cp  # this rank's: CP keeps seq / cp of each sequence
    blocks = sorted((u for u in unit_stats if u.rsplit(".", 1)[-1].isdigit()), key=lambda u: int(u.rsplit(".", 1)[-1]))
    derived = {
        "activation_bytes_per_token_per_block": activation_per_token_per_block(unit_stats, blocks, tokens),
        "max_logit_bytes_per_element": max((m["logits"] for m in tracker.moments.values()), default=0)
        / (tokens * shape.vocab / tp),
    }
    phase_peaks = {}  # each phase's largest moment
    for key, m in tracker.moments.items():
        if key[0] not in phase_peaks or m["total"] > phase_peaks[key[0]]["bytes"]:
            phase_peaks[key[0]] = moment_json(key, m)
    return {
        "case": {"model": shape.name, "impl": args.impl, "ranks": args.ranks, "tp": tp, "hsdp": args.hsdp,
                 "grad_accum": args.grad_accum, "zero": args.zero,
                 "recompute": args.recompute, "seq": args.seq, "micro_batch": args.micro_batch, "wrap": args.wrap,
                 "optimizer": args.optimizer, "layers": shape.layers},
        "versions": {"torch": torch.__version__, "transformers": _transformers_version()},
        "model": {"params": n_params, "fsdp_units": n_units},
        "peak": {"bytes": s2["peak"][TOTAL], "breakdown": s2["peak"], "moment": peak_moment},
        "phase_peaks": phase_peaks,
        "moments": [moment_json(k, m) for k, m in moments[:16]],
        "allocator_replay": replayed,
        "step1_peak_bytes": steps[0]["peak"][TOTAL],
        "step2": {"start": s2["start"], "end": s2["end"]},
        "units": unit_stats,
        "checks": checks,
        "derived": derived,
        "seconds": {**times, "step1": steps[0]["seconds"], "step2": s2["seconds"]},
    }


def _transformers_version() -> str:
    try:
        from importlib.metadata import version
        return version("transformers")
    except Exception:  # noqa: BLE001 - only reported
        return "absent"


def run_and_print(run_case, args) -> int:
    """Runs one case and prints its JSON (and writes it atomically to --out); bad input: one error line, exit 2."""
    try:
        result = run_case(args)
    except (ValueError, FileNotFoundError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=1)
    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, args.out)
    print(text)
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    for flag, v in (("--ranks", args.ranks), ("--seq", args.seq), ("--micro-batch", args.micro_batch),
                    ("--grad-accum", args.grad_accum)):
        if v < 1:
            print(f"error: {flag} must be at least 1, got {v}", file=sys.stderr)
            return 2
    return run_and_print(run, args)


if __name__ == "__main__":
    sys.exit(main())
