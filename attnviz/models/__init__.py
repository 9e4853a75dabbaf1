"""Pretrained transformers from local Hugging Face folders, run through attnviz's own kernel.

    from attnviz.models import load_model
    m = load_model(folder)                  # config.json + *.safetensors + tokenizer.json
    m.info                                  # model_type, architecture, layers, heads, kv_heads, stages, ...
    enc = m.encode("The cat sat")           # ids and readable token labels
    hidden, traces = m.forward(torch.tensor([enc.ids]), record={"weights"})   # one Trace per layer

Pure torch + numpy (no Qt). Any family transformers runs: its own modelling code, with attnviz's kernel
plugged in as the attention function (hf_attention.py); transformers is imported only when a model opens.
"""

from attnviz.models.folder import ModelError, read_folder
from attnviz.models.loader import ModelInfo, PretrainedModel, clear_cache, load_model
from attnviz.models.tokens import Encoded

__all__ = ["Encoded", "ModelError", "ModelInfo", "PretrainedModel", "clear_cache", "load_model", "read_folder"]
