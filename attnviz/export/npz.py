"""The NPZ writer: every array the run kept plus its configuration, atomically. No Qt."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from attnviz.atomic import atomic_writer
from attnviz.core.runs.runner import RunResult
from attnviz.export.titles import model_title


def file_arrays(result: RunResult) -> dict[str, np.ndarray]:
    """weights_file, weights_sha256, inputs_file, inputs_sha256 of your own files that produced the run."""
    out = {}
    for record in result.files:
        out[f"{record.field}_file"] = np.array(record.name)
        out[f"{record.field}_sha256"] = np.array(record.sha256)
    return out


def write_npz(result: RunResult, path: str | os.PathLike, all_layers: bool = False, replace_readonly: bool = False,
              **extra: np.ndarray) -> Path:
    """Every stage the run kept (names from core.stages), the mask and row flags, plus `config`
    (the saved-configuration JSON string), `device` (a model's run also `model_name`: what titles say) and any
    `extra` arrays, atomically. Token-labelled runs add `tokens` (str) and `token_ids`; all_layers adds
    `layer_weights`, every layer's weights (layers, H, L, L). core/runs/saved.py reads the file back.
    Runs on your own files add their names and sha256s (file_arrays; also under "files" in `config`); a
    generation adds `prompt_length`, `generated` (bool per token: the model wrote it) and always `layer_weights`, as
    maps opened from a file that holds them do."""
    arrays = {name: np.asarray(a) for name, a in result.arrays().items()} | file_arrays(result) | extra
    arrays["device"] = np.array(result.device)  # the device the maps were computed on, as titles say
    if result.config.spec.backed:
        arrays["model_name"] = np.array(model_title(result))
    if result.tokens:  # token-labelled runs: the labels, the ids and, if asked, every layer's weights
        arrays["tokens"] = np.array(result.tokens, dtype=str)
    if result.key_tokens:  # keys labelled apart from the queries (cross-attention)
        arrays["key_tokens"] = np.array(result.key_tokens, dtype=str)
    if result.token_ids is not None:
        arrays["token_ids"] = np.asarray(result.token_ids)
    if result.key_token_ids is not None:  # keys apart from the queries (an encoder-decoder's cross-attention)
        arrays["key_token_ids"] = np.asarray(result.key_token_ids)
    if result.pool_factor is not None:  # a pooled run: its maps are pooled, its statistics exact
        arrays["weights_pooled"] = arrays.pop("weights", arrays.get("dropped"))
        arrays.pop("dropped", None)
        arrays["pool_factor"] = np.asarray(result.pool_factor)
        arrays |= {f"stats_{name}": values for name, values in result.exact_stats.items()}
        if result.region is not None:
            arrays["region"] = result.region
    if result.prompt_length is not None:  # a generation: where the prompt ends, and every layer's maps
        arrays["prompt_length"] = np.asarray(result.prompt_length)
        arrays["generated"] = result.generated_mask()  # per token: True where the model wrote it
        all_layers = True
    all_layers = all_layers or bool(result.opened)  # maps opened from a file keep every layer the file holds
    if all_layers and result.layer_weights is not None:
        lw = result.layer_weights  # (layers, B, H, L, L); one text: (layers, H, L, L)
        arrays["layer_weights"] = lw[:, 0] if lw.shape[1] == 1 else lw
    with atomic_writer(path, replace_readonly) as f:
        np.savez_compressed(f, config=np.array(_config_json(result)), **arrays)
    return Path(path)


def _config_json(result: RunResult) -> str:
    """The run's configuration as JSON; a pooled run says so (and by how much) beside it."""
    text = result.config.to_json(files=result.file_dicts())
    if result.pool_factor is None:
        return text
    doc = json.loads(text)
    doc["pooled"] = {"factor": list(result.pool_factor), "maps": "weights_pooled (max-pooled)",
                     "exact": ["output", "stats_*", "region"]}
    return json.dumps(doc, indent=2) + "\n"
