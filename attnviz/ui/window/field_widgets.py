"""Each config field's widget objectName in the parameter panel.

The names are public: tests and users' scripts find the panel's widgets by them (findChild), so they
never change. Core's field metadata knows nothing of widgets; the panel reads the name here.
"""

from __future__ import annotations

OBJECT_NAMES: dict[str, str] = {
    "variant": "variantCombo", "model": "modelEdit", "weights": "weightsChooser", "text": "textEdit",
    "image": "imageChooser", "chat": "chatCheck", "decoder_text": "decoderTextEdit", "stack": "stackEdit",
    "generate": "generateSpin", "temperature": "temperatureSpin", "sample_top_k": "sampleTopKSpin",
    "ablate": "ablateEdit", "ablation": "ablationCombo", "top_k": "topKSpin", "inputs": "inputsChooser",
    "d_model": "dModelSpin", "d_out": "dOutSpin", "d_cross": "dCrossSpin", "heads": "headsSpin",
    "layer": "layerSpin", "batch": "batchSpin", "seq_q": "seqQSpin", "seq_kv": "seqKvSpin", "mask": "maskCombo",
    "window": "windowSpin", "sinks": "sinksSpin", "kv_lengths": "kvLengthsEdit", "safe_softmax": "safeSoftmaxCheck",
    "kv_heads": "kvHeadsSpin", "position": "positionCombo", "rope_base": "ropeBaseSpin", "qk_scale": "qkScaleSpin",
    "softcap": "softcapSpin", "sink_logit": "sinkLogitSpin", "dropout": "dropoutSpin", "train": "trainCheck",
    "in_bias": "inBiasCheck", "out_bias": "outBiasCheck", "seed": "seedSpin", "pool": "poolCombo",
    "device": "deviceCombo", "dtype": "dtypeCombo", "maps": "mapsChooser",
}


def object_name(field: str) -> str:
    """The objectName of config field `field`'s widget (KeyError for a field the panel has no name for)."""
    return OBJECT_NAMES[field]
