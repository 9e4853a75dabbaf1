"""One ForwardContext per forward: everything a forward's attention calls share, made once by whoever runs the
forward and passed to every kernel call (`attention(..., ctx=ctx)`), then reset when the forward ends.

It says which of the kernel's paths a call takes and where its results go: the ablation plan, the pooling of a
long run, the slab a model's weights are written into, the progress watch (and Cancel), the analysed masks the
calls share, and the recording a model layer keeps its traces in. Without
one (None) a call is a plain attention call: whole maps, nothing ablated, nothing reported.

How it reaches the kernel: a seed module's forward takes it as `ctx=`, a toy's forward passes it to its
seed modules, and transformers carries it to attnviz's attention function in the keyword arguments every
family hands through to its attention interface (CONTEXT_KWARG; models/hf_attention.py). Like TransformerLens'
hooks it lives only while its forward runs: `with ForwardContext(...) as ctx:` resets it on exit (the
analysed masks and their biases, the pooled path's scratch memory are let go).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from torch import Tensor

from attnviz.core.kernel.block_mask import BlockMask, BlockMasks
from attnviz.core.kernel.progress import Cancelled

if TYPE_CHECKING:
    from attnviz.core.kernel.ablation import Plan
    from attnviz.core.kernel.pooling import Pooling
    from attnviz.core.kernel.progress import Watch
    from attnviz.core.kernel.slab import MapSlab

CONTEXT_KWARG = "attnviz_context"  # the keyword a transformers forward carries the context in


@dataclass
class ForwardContext:
    """What one forward's attention calls share (see the module docstring); every field is optional."""

    plan: Plan | None = None  # heads knocked out, per attention call (ablation.py)
    pooling: Pooling | None = None  # a long run: maps pooled in blocks of rows, nothing of H x L x L held
    slab: MapSlab | None = None  # a model's forward: each layer's weights written into one tensor (slab.py)
    watch: Watch | None = None  # progress per finished call, and Cancel between blocks (progress.py)
    recording: Any = None  # where a model layer's traces go (models.hf_attention.Recording): the calls' sink
    masks: BlockMasks = field(default_factory=BlockMasks, repr=False)  # the masks the calls analysed, shared

    def __enter__(self) -> ForwardContext:
        return self

    def __exit__(self, *exc) -> None:
        self.reset()

    def reset(self) -> None:
        """Let go of what the forward held for its calls: the analysed masks, the pooled path's scratch."""
        self.masks.clear()
        if self.pooling is not None:
            self.pooling.release_scratch()

    def block_mask(self, mask: Tensor | None, lkv: int) -> BlockMask:
        """The mask analysed for the blocks, shared by every call of this forward given that very mask."""
        return self.masks.of(mask, lkv)

    def checkpoint(self) -> None:
        """Raise Cancelled if the watch's cancel says so (between blocks, between calls)."""
        watch = self.watch
        if watch is not None and watch.cancel is not None and watch.cancel():
            raise Cancelled

    def finished(self, context: Tensor) -> Tensor:
        """One attention call finished: tell the watch, then knock out the plan's heads of this call (on the
        head's context, before any output projection)."""
        watch = self.watch
        if watch is not None:
            watch.calls += 1
            if watch.on_call is not None:
                watch.on_call(watch.calls)
        return self.knock_out(context)

    def knock_out(self, context: Tensor) -> Tensor:
        """context (B, H, Lq, dv) with this call's heads knocked out (unchanged without a plan)."""
        return context if self.plan is None else self.plan.knock_out(context)

    def keeps_tokens(self, done: bool = False) -> bool:
        """Whether the call now running (done: the one just returned) keeps its per-token stages: always but in
        a pooled forward that keeps them for some calls only (Pooling.token_calls)."""
        return self.pooling is None or self.pooling.keeps_tokens(done)


def context_of(context: ForwardContext | None) -> ForwardContext:
    """The context a kernel call runs under: the forward's, or a fresh plain one."""
    return context if context is not None else ForwardContext()
