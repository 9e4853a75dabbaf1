"""attnviz.core.analysis: what heads do, computed from runs: head types and ablation effects, per-head
statistics and rollout, QK/OV circuits and composition, direct logit attribution, activation patching,
and one cell's path through the stages.

Imports: attnviz.core.runs and below.
"""
