"""attnviz.core.kernel.kernel: the one attention call and what runs inside it.

The kernel (Q·Kᵀ -> scale -> bias -> cap -> mask -> softmax -> dropout -> @ V), its stages, position
encodings and score modifiers, masks, and the ways a call is computed when the whole map does not fit: row
blocks, pooling to the view's size, the layer slab, reusable buffers, head ablation and progress.

Imports: torch, NumPy, attnviz.system. Nothing else of attnviz: every other layer builds on this one.
"""
