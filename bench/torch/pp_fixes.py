"""The two corrections pp_mem.py applies so that fake tensors on a CPU free what a GPU run frees (each measured; the
reasons in each docstring): FakeTensor outputs released after their send as plain CUDA tensors are, and the memory
tracker's own multi-grad hooks removed after each micro-batch's backward."""
import torch
import torch.nn as nn


class GradHookJanitor:
    """Removes a tracker artifact. ModTracker's forward pre-hook registers an "all"-mode multi-grad hook on the
    inputs of every module (torch/distributed/_tools/mod_tracker.py _fw_pre_hook -> torch/autograd/graph.py
    register_multi_grad_hook), whose closure keeps the inputs' grad_fn nodes (`grad_fns`) while the hook sits in the
    hook dictionary of those same nodes: a cycle through C++ that Python's gc cannot collect. It keeps each forward's
    autograd graph (its saved tensors are released by backward, the nodes are not), and through the AccumulateGrad
    nodes the leaves: on a non-first stage, every received activation (and, on the last, nothing else of size).
    Measured: with the tracker every recv buffer of every step stays alive; without it none outlives its
    micro-batch's backward. The janitor collects the handles registered during each micro-batch's forward and removes
    them once that micro-batch's backward has run (the hooks have fired by then; recomputation in backward registers
    none, ModTracker skips it when is_bw)."""

    def __init__(self):
        import torch.distributed._tools.mod_tracker as mt
        self.sink = []
        self.by_chunk = {}
        orig = mt.register_multi_grad_hook

        def register(*args, **kwargs):
            handle = orig(*args, **kwargs)
            self.sink.append(handle)
            return handle
        mt.register_multi_grad_hook = register

    def forward_done(self, key) -> None:
        self.by_chunk.setdefault(key, []).extend(self.sink)
        self.sink = []

    def backward_done(self, key) -> None:
        for h in self.by_chunk.pop(key, []):
            h.remove()

    def step_done(self) -> None:
        for key in list(self.by_chunk):
            self.backward_done(key)
        for h in self.sink:
            h.remove()
        self.sink = []


def attach_janitor(stage, janitor) -> None:
    s = stage.stage_index
    fwd, bwd = stage.forward_one_chunk, stage.backward_one_chunk

    def forward_one_chunk(fwd_chunk_id, *args, **kwargs):
        janitor.sink, outer = [], janitor.sink
        try:
            return fwd(fwd_chunk_id, *args, **kwargs)
        finally:
            janitor.forward_done((s, fwd_chunk_id))
            janitor.sink = outer

    def backward_one_chunk(bwd_chunk_id, *args, **kwargs):
        try:
            return bwd(bwd_chunk_id, *args, **kwargs)
        finally:
            janitor.backward_done((s, bwd_chunk_id))
    stage.forward_one_chunk, stage.backward_one_chunk = forward_one_chunk, backward_one_chunk


def release_outputs_like_cuda() -> None:
    """Fake-tensor stand-in fix. _PipelineStageBase._output_slot_is_releasable (stage.py) lets a stage drop its
    reference to a sent output only when `type(output) is torch.Tensor`; a FakeTensor fails that test ("output type
    FakeTensor"), so every non-last stage would keep each in-flight micro-batch's output until its backward, which
    on a GPU (plain tensors) it releases once the send completes (release_fwd_send_outputs). Fake tensors are
    treated as the plain tensors they stand for."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.distributed.pipelining.stage import _PipelineStageBase
    orig = _PipelineStageBase._output_slot_is_releasable
    if getattr(orig, "_cuda_like", False):
        return

    def releasable(self, output):
        if type(output) is FakeTensor and not self.is_last and self.dw_builder is None and not isinstance(
                self.submod, nn.parallel.DistributedDataParallel):
            return True, ""
        return orig(self, output)
    releasable._cuda_like = True
    _PipelineStageBase._output_slot_is_releasable = releasable
