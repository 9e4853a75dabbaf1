"""Vision transformers from local folders: an image's patches through attnviz's kernel.

    model = load_vision_model(folder)        # vit, deit, dinov2(_with_registers), clip, siglip ...
    view = model.view(stack="vision", image="cat.png")
    enc = view.encode("")                    # tokens: [CLS], reg0.., r0c0 r0c1 ... one per patch
    hidden, traces = view.forward(torch.tensor([enc.ids]), {"weights"})

The folder holds config.json, the weights and preprocessor_config.json: transformers' own image processor
(AutoImageProcessor, local files only, no remote code) resizes, crops and normalises the picture Pillow read.
The family's own modelling code runs; every attention layer calls the kernel through the attention interface
(hf_attention.py), as text models do. A text-image model (clip, siglip) has two towers, each its own stack:
`vision` reads the image, `text` the text (the folder's tokenizer).

The view follows core/runs/backed.py's protocol: `encode` reads the image (ids are the token positions; the pixels
and the picture as the model saw it stay on the view for its forward), `forward` runs every tower that has an
input; the shown one's traces are returned, the others go to `other_stacks` (the model view).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import Tensor, nn

from attnviz.core.kernel.context import ForwardContext
from attnviz.core.kernel.kernel import Trace
from attnviz.core.kernel.masks import is_causal
from attnviz.core.kernel.stages import ALL_STAGES, STAGE_NAMES
from attnviz.core.runs.backed import Encoded
from attnviz.core.runs.config import ConfigError
from attnviz.core.runs.lru import LRU
from attnviz.models.folder import ModelError, ModelFolder, model_name, read_json, weight_files, weights_within_budget
from attnviz.models.hf import ModelInfo
from attnviz.models.hf_attention import ATTN_NAME, recording, transformers
from attnviz.models.image_input import Picture
from attnviz.models.layers import HOOKED, hook_tokens, trace_modules

PREPROCESSOR = "preprocessor_config.json"
# Families whose vision code calls the attention interface (transformers 5.24); a folder of one is read here
VISION_TYPES = frozenset({"vit", "deit", "dinov2", "dinov2_with_registers", "clip", "siglip", "clip_vision_model",
                          "siglip_vision_model", "beit", "vit_msn", "ijepa"})
NO_TEXT = "reads an image, not a text"
_cache: LRU[VisionModel] = LRU(2)


@dataclass
class Tower:
    """One stack: its module, the attention modules it calls (in order), its shape."""

    name: str  # "vision" or "text"
    module: nn.Module
    attention: list[nn.Module]
    info: ModelInfo


def is_vision_folder(folder: str | os.PathLike) -> bool:
    """Whether `folder` holds a vision (or text-image) model's config.json."""
    config = Path(folder).expanduser() / "config.json"
    try:  # checked as read_folder checks it (a FIFO, /dev/zero or 5 GB is never read): the loader then says why
        return config.is_file() and _model_type(read_json(config)) in VISION_TYPES
    except (ModelError, AttributeError, OSError, ValueError):  # the loader says what is wrong with the folder
        return False


def _read_vision_folder(path: Path) -> ModelFolder:
    config = read_json(path / "config.json")
    if not isinstance(config, dict):
        raise ModelError(path / "config.json", "config.json is not a JSON object", "restore the file")
    if not (path / PREPROCESSOR).is_file():
        raise ModelError(path, f"a {config.get('model_type')} model folder without {PREPROCESSOR} (it says how to "
                         "resize, crop and normalise the image)", "save the model's image processor into the folder "
                         "(AutoImageProcessor(...).save_pretrained(folder))")
    tokenizer = path / "tokenizer.json"
    return ModelFolder(path, config, weight_files(path), tokenizer if tokenizer.is_file() else path / PREPROCESSOR)


def _image_processor(folder: ModelFolder):
    tf = transformers()
    try:
        return tf.AutoImageProcessor.from_pretrained(str(folder.path), local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - an unknown processor type, a broken JSON, a missing backend
        raise ModelError(folder.path / PREPROCESSOR, f"transformers cannot build the image processor "
                         f"({type(exc).__name__}: {str(exc).strip()[:140]})",
                         "restore the preprocessor_config.json saved with the model") from exc


def _image_size(config) -> tuple[int, int]:
    size = getattr(config, "image_size", 224)
    return (size, size) if isinstance(size, int) else tuple(size)


def _discover(name: str, module: nn.Module, inputs: dict) -> tuple[list[nn.Module], list[Trace]]:
    """The attention modules one forward of a tower calls (hooked to keep their input and output)."""
    with torch.inference_mode(), recording(ALL_STAGES) as rec:
        module(**inputs, **rec.kwargs)
    modules, traces = [m for m, _ in rec.calls], [t for _, t in rec.calls]
    if not modules:
        raise ModelError(name, f"the {name} tower ran no attention layer through attnviz's kernel",
                         "choose a model whose family calls transformers' attention interface", field_name="stack")
    hook_tokens(modules)
    return modules, traces


def _tower_info(name: str, config, traces: list[Trace], base: ModelInfo) -> ModelInfo:
    first = traces[0]
    heads = first.weights.shape[1]
    stages = tuple(s for s in STAGE_NAMES if s in first or s in HOOKED)
    positions = first.weights.shape[-1] if name == "vision" else getattr(config, "max_position_embeddings", 77)
    return replace(base, layers=len(traces), heads=heads, kv_heads=first["k"].shape[1] if "k" in first else heads,
                   d_model=int(getattr(config, "hidden_size", 0) or first.weights.shape[-1]),
                   vocab_size=int(getattr(config, "vocab_size", 0) or 0), max_positions=int(positions),
                   causal=is_causal(first["mask"][0, 0]), stacks=(name,), stages=stages)


def _towers(model: nn.Module, name: str, size: int) -> list[Tower]:
    """The vision tower (and a text-image model's text tower), each found by one forward of its own."""
    config = model.config
    vision_config = getattr(config, "vision_config", None) or config
    height, width = _image_size(vision_config)
    found = [("vision", getattr(model, "vision_model", None) or model, vision_config,
              {"pixel_values": torch.zeros(1, getattr(vision_config, "num_channels", 3), height, width)})]
    text = getattr(model, "text_model", None)
    if text is not None:
        found.append(("text", text, config.text_config, {"input_ids": torch.tensor([[0, 1]])}))
    base = ModelInfo(model_type=config.model_type, architecture=type(model).__name__, layers=0, heads=0, kv_heads=0,
                     d_model=0, vocab_size=0, max_positions=0, causal=False, parameter_bytes=size, name=name)
    towers = []
    for stack, module, tower_config, inputs in found:
        modules, traces = _discover(stack, module, inputs)
        towers.append(Tower(stack, module, modules, _tower_info(stack, tower_config, traces, base)))
    return towers


def _build(folder: ModelFolder, memory_budget: int | None) -> VisionModel:
    from attnviz.models import hf
    from attnviz.models.tokens import TextTokenizer

    size = weights_within_budget(folder, memory_budget)
    tf = transformers()
    config = hf._config(folder)
    cls = tf.AutoModel._model_mapping[type(config)]
    module = hf._from_pretrained(cls, folder, config, ATTN_NAME)
    processor = _image_processor(folder)
    name = model_name(folder.path)
    towers = _towers(module, name, size)
    tokenizer = None
    if any(t.name == "text" for t in towers):
        tokenizer = TextTokenizer(folder.tokenizer) if folder.tokenizer.name == "tokenizer.json" else \
            _auto_text_tokenizer(folder)
    return VisionModel(folder, module, processor, towers, tokenizer)


def _auto_text_tokenizer(folder: ModelFolder):
    """A text tower's tokenizer from vocab.json + merges.txt or a sentencepiece file (None: the folder has none)."""
    from attnviz.models.folder import VOCABULARY_FILES
    from attnviz.models.hf import auto_tokenizer
    from attnviz.models.tokens import TextTokenizer

    if not any((folder.path / n).is_file() for n in VOCABULARY_FILES):
        return None
    hf_tokenizer = auto_tokenizer(folder)
    return TextTokenizer.of(hf_tokenizer.backend_tokenizer, folder.path)


def load_vision_model(folder: str | os.PathLike, *, memory_budget: int | None = None) -> VisionModel:
    """The vision model in `folder`, cached (the last two) while its files are unchanged."""
    path = Path(folder).expanduser()
    checked = _read_vision_folder(path)
    key = (str(path.resolve()), checked.stamp(), (path / PREPROCESSOR).stat().st_mtime_ns)
    return _cache.get_or_make(key, lambda: _build(checked, memory_budget))


class VisionModel:
    """A loaded vision (or text-image) model: its towers, image processor and text tokenizer (if any)."""

    reads_images = True

    def __init__(self, folder: ModelFolder, module: nn.Module, processor, towers: list[Tower], tokenizer):
        self.folder, self.module, self.processor, self.tokenizer = folder, module, processor, tokenizer
        self.towers = {t.name: t for t in towers}
        self.stacks = tuple(self.towers)
        self.info = replace(towers[0].info, stacks=self.stacks)
        self.prefix = self._prefix_tokens()

    def _prefix_tokens(self) -> tuple[str, ...]:
        """Labels of the tokens before the patches ([CLS], deit's [DIST], dinov2's registers)."""
        vision = self.towers["vision"]
        config = getattr(self.module.config, "vision_config", None) or self.module.config
        height, width = _image_size(config)
        patch = getattr(config, "patch_size", 16)
        count = vision.info.max_positions - (height // patch) * (width // patch)
        registers = int(getattr(config, "num_register_tokens", 0) or 0) if count > 1 else 0
        named = ["[CLS]", "[DIST]"] if config.model_type == "deit" else ["[CLS]"]
        named = named[:max(count - registers, 0)]
        named += [f"reg{i}" for i in range(registers)]
        return tuple(named + [f"[T{i}]" for i in range(len(named), count)])

    def view(self, stack: str = "", decoder_text: str = "", chat: bool = False, image: str = "") -> VisionView:
        """This model as one run sees it (ConfigError for a stack it lacks, a decoder text or the chat switch)."""
        name = self.info.name
        if stack and stack not in self.stacks:
            raise ConfigError("stack", stack, f"{name} has the stacks {', '.join(self.stacks)}",
                              f"choose one of {', '.join(self.stacks)}, or leave it empty", suggestions=self.stacks)
        if decoder_text.strip():
            raise ConfigError("decoder_text", decoder_text, f"{name} is not an encoder-decoder",
                              "clear the decoder text", suggestions=("",))
        if chat:
            raise ConfigError("chat", chat, f"{name} has no chat template", "turn the chat template off",
                              suggestions=(False,))
        if not stack:
            stack = "vision" if image.strip() or "text" not in self.stacks else "text"
        return VisionView(self, stack, image)

    def read_pixels(self, image: str) -> tuple[Tensor, Picture]:
        """The image file through the model's processor -> (pixel_values (1, 3, H, W), the picture)."""
        from attnviz.models.image_input import picture_of, process, read_image

        pixels = process(self.processor, read_image(image), image)
        config = getattr(self.module.config, "vision_config", None) or self.module.config
        expected, got = _image_size(config), tuple(pixels.shape[-2:])
        if got != expected and config.model_type not in ("dinov2", "dinov2_with_registers"):
            raise ConfigError("image", image, f"the image processor gives {got[1]}x{got[0]} pixels but "
                              f"{self.info.name} reads {expected[1]}x{expected[0]}",
                              "use the preprocessor_config.json saved with the model")
        patch = getattr(config, "patch_size", 16)
        return pixels, picture_of(self.processor, pixels, (got[0] // patch, got[1] // patch), self.prefix, image)


class VisionView:
    """A VisionModel with one run's stack and image (the protocol of core/runs/backed.py)."""

    has_head = False

    def __init__(self, model: VisionModel, stack: str, image: str):
        self.model, self.stack, self.image = model, stack, image
        self.module = model.module
        self.info = model.towers[stack].info
        self.notes: tuple[str, ...] = ()
        self.other_stacks: dict | None = None
        self.residuals = None
        self.picture: Picture | None = None
        self._inputs: dict[str, dict[str, Tensor]] = {}  # stack -> its tower's inputs, after encode
        self.decoder_length = 0

    @property
    def forward_layers(self) -> int:
        return sum(self.model.towers[s].info.layers for s in (self._inputs or {self.stack: None}))

    def encode(self, text: str):
        """The shown stack's tokens; every tower with an input gets it (ConfigError for a missing or bad one)."""

        self._inputs = {}
        name = self.model.info.name
        if "text" not in self.model.stacks and text.strip():
            raise ConfigError("text", text, f"{name} {NO_TEXT}", "clear the text and choose an image",
                              suggestions=("",))
        if self.image.strip() or self.stack == "vision":
            pixels, self.picture = self.model.read_pixels(self.image)
            self._inputs["vision"] = {"pixel_values": pixels}
        if "text" in self.model.stacks and (text.strip() or self.stack == "text"):
            ids, tokens = self._encode_text(text)
            self._inputs["text"] = {"input_ids": torch.tensor([list(ids)], dtype=torch.long)}
            self.text_tokens = tokens
        if self.stack == "vision":
            tokens = self.picture.tokens
            others = [len(i["input_ids"][0]) for s, i in self._inputs.items() if s == "text"]
            self.decoder_length = max(others, default=0)
            return Encoded(tuple(range(len(tokens))), tokens)
        self.decoder_length = len(self.picture.tokens) if self.picture is not None else 0
        return Encoded(tuple(int(i) for i in self._inputs["text"]["input_ids"][0]), self.text_tokens)

    def _encode_text(self, text: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
        tokenizer, info = self.model.tokenizer, self.model.towers["text"].info
        if tokenizer is None:
            raise ConfigError("text", text, f"{self.model.info.name}'s folder has no tokenizer for its text tower",
                              "save the model's tokenizer into the folder, or clear the text", suggestions=("",))
        if not text.strip():
            raise ConfigError("text", text, "the text is empty", "type a sentence, or show the vision stack")
        encoded = tokenizer.encode(text, True)
        if len(encoded.ids) > info.max_positions:
            raise ConfigError("text", f"{text[:40]}…", f"{len(encoded.ids)} tokens, but the text tower reads at most "
                              f"{info.max_positions}", "shorten the text",
                              suggestions=(tokenizer.decode_prefix(text, info.max_positions),))
        if encoded.ids and info.vocab_size and max(encoded.ids) >= info.vocab_size:
            raise ConfigError("text", text, f"the tokenizer gives id {max(encoded.ids)} but the text tower has "
                              f"{info.vocab_size} token embeddings", "use the tokenizer saved with this model")
        return tuple(encoded.ids), tuple(encoded.tokens)

    def forward(self, ids: Tensor, record=(), ctx: ForwardContext | None = None):
        """Every tower with an input, in the model's order -> the shown stack's (hidden, traces), under the
        forward's context `ctx` (one for every tower: the ablation plan counts their calls in order)."""
        record, device = frozenset(record), next(self.module.parameters()).device
        by_stack, notes = {}, []
        for name in self.model.stacks:
            if name not in self._inputs:
                continue
            tower = self.model.towers[name]
            inputs = {k: v.to(device) for k, v in self._inputs[name].items()}
            with torch.inference_mode(), recording(record, ctx) as rec:
                out = tower.module(**inputs, **rec.kwargs)
            traces = trace_modules(rec)
            if len(traces) != tower.info.layers:
                raise RuntimeError(f"the {name} tower ran {len(traces)} attention calls, not {tower.info.layers}")
            by_stack[name] = (out.last_hidden_state, traces)
            notes += [n for n in rec.notes if n not in notes]
        self.notes = tuple(notes)
        self.info = replace(self.info, stacks=tuple(by_stack))
        self.other_stacks = {n: t for n, (_, t) in by_stack.items() if n != self.stack} or None
        return by_stack[self.stack]

    def call_index(self, layer: int) -> int:
        """The attention call of the shown stack's layer in the whole forward (the towers run in order)."""
        before = [s for s in self.model.stacks if s in self._inputs]
        before = before[:before.index(self.stack)] if self.stack in before else []
        return sum(self.model.towers[s].info.layers for s in before) + layer

    def logits(self, hidden: Tensor) -> None:
        return None

    def label(self, token_id: int) -> str:
        tokens = self.picture.tokens if self.picture is not None else ()
        return tokens[token_id] if 0 <= token_id < len(tokens) else str(token_id)


def _model_type(config) -> str:
    """config.json's model_type where it is text (anything else is the text loader's to refuse)."""
    kind = config.get("model_type") if isinstance(config, dict) else None
    return kind if isinstance(kind, str) else ""
