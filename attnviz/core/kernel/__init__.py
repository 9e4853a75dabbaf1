"""attnviz.core.kernel.kernel: the one attention call and what runs inside it.

The kernel (Q·Kᵀ -> scale -> bias -> cap -> mask -> softmax -> dropout -> @ V), its stages, position
encodings and score modifiers, masks, and the ways a call is computed when the whole map does not fit: row
blocks, pooling for long runs, the layer slab, reusable buffers, head ablation and progress. One forward's
calls share a ForwardContext (context.py), passed to each, and the analysed masks it holds (block_mask.py).

Imports: torch, NumPy, attnviz.system. Nothing else of attnviz: every other layer builds on this one.
"""
