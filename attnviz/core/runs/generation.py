"""A causal model writing after the text: one token at a time, each step's attention kept as it ran.

The model (core/runs/backed.py's protocol) offers `step(ids (1, n), state, record) -> (hidden (1, n, d), traces,
state, residuals or None)`: the forward of the n new tokens over its cache (`state`, None at first), one
Trace per layer whose maps are (1, H, n, Lk) with the keys right-aligned (the last Lk positions: a sliding
window's cache keeps only the most recent). The first step reads the prompt, each later one the token the
last step chose; one more step reads the last token, so every token has its row. The rows are put together
into (1, H, L, L) maps: a generated token's row is what its step computed over the cache (equal to a full
forward over the whole sequence, which the tests check against transformers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz.core.kernel.ablation import Plan
from attnviz.core.kernel.context import ForwardContext
from attnviz.core.kernel.kernel import Trace
from attnviz.core.kernel.stages import KEY_TOKEN_STAGES, QUERY_TOKEN_STAGES
from attnviz.core.runs.result import Cancelled
from attnviz.system import cpu_sample, free_cores, others_cores, set_torch_threads

# Stages a step computes whole: the maps after the mask (a cache holds no future key to fill qk with) and the
# per-token ones; k, v and k_proj come from the last step's cache where it holds every position.
MAP_FILL = {"scores": float("-inf"), "weights": 0.0, "dropped": 0.0, "value_weighted": 0.0}
PER_TOKEN = QUERY_TOKEN_STAGES
KEYED = KEY_TOKEN_STAGES
GENERATED_STAGES = frozenset(MAP_FILL) | PER_TOKEN | KEYED


@dataclass
class Ran:
    """What one forward (or a generation's steps) produced, before it becomes NumPy."""

    traces: list  # one Trace per layer of the shown stack
    hidden: torch.Tensor  # (1, L, d) the last hidden state (a toy: its logits)
    residuals: list | None  # per layer (1, L, d), or None
    ids: list[int]
    tokens: tuple[str, ...]
    layer_tokens: tuple | None = None
    prompt_length: int | None = None  # a generation: where the prompt ends
    pooled: tuple = ()  # a pooled forward: each layer's pooling.PooledCall
    slab: torch.Tensor | None = None  # every layer's weights, where the kernel wrote them into one (slab.py)
    layer_ids: tuple | None = None  # per layer: (row ids, column ids), where not `ids` (an encoder-decoder)


@dataclass
class Generated:
    ids: list[int]  # prompt + generated
    prompt_length: int
    traces: list[Trace]  # per layer, (1, H, L, L) maps
    hidden: Tensor  # (1, L, d)
    residuals: list[Tensor] | None  # per layer (1, L, d)


def choose(logits: Tensor, temperature: float, top_k: int, generator: torch.Generator) -> int:
    """The next token: the most likely (temperature 0), else sampled at that temperature among the top k."""
    logits = logits.float().cpu()
    if temperature <= 0:
        return int(torch.argmax(logits))
    if top_k:
        cut = torch.topk(logits, min(top_k, logits.numel())).values[-1]
        logits = logits.masked_fill(logits < cut, float("-inf"))
    probs = torch.softmax(logits / temperature, dim=-1)
    if not torch.isfinite(probs).all():  # a temperature so small (1e-40) that logits / temperature overflow:
        return int(torch.argmax(logits))  # the sampling's limit is the greedy token (multinomial refuses NaN)
    return int(torch.multinomial(probs, 1, generator=generator))


class StepThreads:
    """The torch threads of a generation's one-token steps: the caller's, or no more than the cores other
    programs leave free, measured over the first steps (the prompt's). A one-token step is a chain of a few
    hundred small ops; with more threads than free cores, OpenMP's idle threads spin on the core the step
    needs and each op waits for a descheduled one (SmolLM2-135M on 2 cores with other programs running:
    250-700 ms a step at 2 threads, 60-95 ms at 1; benchmarks/README.md, "Generation")."""

    def __init__(self) -> None:
        self.own = torch.get_num_threads()
        self.start = cpu_sample()
        self.decided = self.own == 1 or self.start is None

    def after_step(self) -> None:
        if self.decided:
            return
        others = others_cores(self.start, cpu_sample())
        if others is not None:  # else the window is still too short to say
            self.decided = True
            set_torch_threads(min(self.own, free_cores(others)))

    def restore(self) -> None:
        set_torch_threads(self.own)


def generate(model, prompt: list[int], count: int, *, temperature: float = 0.0, top_k: int = 0, seed: int = 0,
             record=frozenset(), plan: Plan | None = None, cancel: Callable[[], bool] | None = None,
             on_step: Callable[[int, Callable[[], Generated]], None] | None = None, device="cpu") -> Generated:
    """`count` tokens after `prompt` (stopping early at the model's end-of-text tokens), every step recorded.
    on_step(tokens so far, build) after each token; build() assembles what has run so far (costly: call it at
    most as often as it is shown). cancel() is polled between steps. The steps run on StepThreads' threads."""
    generator = torch.Generator().manual_seed(seed)
    stops = set(getattr(model, "stop_ids", ()))
    ids, steps, state, new, done = list(prompt), [], None, list(prompt), False
    threads = StepThreads()
    try:
        while True:
            if cancel is not None and cancel():
                raise Cancelled
            if plan is not None:
                plan.calls = 0  # the plan names each layer's call within one forward
            with torch.inference_mode(), ForwardContext(plan=plan) as ctx:  # one per step: each step is a forward
                hidden, traces, state, residuals = model.step(torch.tensor([new], device=device), state, record, ctx)
            steps.append((hidden, traces, residuals))
            threads.after_step()
            if done:  # the last token has its row now
                return assemble(steps, ids, len(prompt))
            with torch.inference_mode():
                token = choose(model.logits(hidden[:, -1:])[0, -1], temperature, top_k, generator)
            ids.append(token)
            new = [token]
            done = len(ids) - len(prompt) >= count or token in stops
            if on_step is not None:
                on_step(len(ids) - len(prompt), lambda: assemble(steps, ids, len(prompt)))
    finally:
        threads.restore()


def assemble(steps: list, ids: list[int], prompt_length: int) -> Generated:
    """Each layer's step traces -> one Trace over all L positions (see the module docstring)."""
    length = sum(hidden.shape[1] for hidden, _, _ in steps)
    layers = len(steps[0][1])
    traces = [_layer(length, [traces[i] for _, traces, _ in steps]) for i in range(layers)]
    hidden = torch.cat([h for h, _, _ in steps], dim=1)
    residuals = None
    if all(r for _, _, r in steps):
        residuals = [torch.cat([r[i] for _, _, r in steps], dim=1) for i in range(len(steps[0][2]))]
    return Generated(ids[:length], prompt_length, traces, hidden, residuals)  # a partial build: rows run so far


def _layer(length: int, rows: list[Trace]) -> Trace:
    """One layer's step traces (maps (1, H, n, Lk), keys right-aligned) -> (1, H, L, L) and its mask."""
    kept = set.intersection(*(set(t) for t in rows)) & GENERATED_STAGES
    trace = Trace(kept)
    heads = rows[0]["weights"].shape[1]
    mask = torch.zeros(1, 1, length, length, dtype=torch.bool)
    maps = {name: torch.full((1, heads, length, length), MAP_FILL[name]) for name in kept & MAP_FILL.keys()}
    start = 0
    for t in rows:
        n, keys = t["weights"].shape[-2:]
        first = start + n - keys  # the cache's first key's position
        allowed = torch.broadcast_to(t["mask"].cpu(), (1, 1, n, keys))
        mask[..., start:start + n, first:start + n] = allowed
        for name, full in maps.items():
            full[..., start:start + n, first:start + n] = t[name].float().cpu()
        start += n
    for name in kept & PER_TOKEN:
        trace[name] = torch.cat([t[name] for t in rows], dim=-2)
    for name in kept & KEYED:
        if rows[-1][name].shape[-2] == length:  # a full cache: every position's key (a window's is not)
            trace[name] = rows[-1][name]
    trace.update(maps)
    trace["mask"] = mask
    trace.recipe = rows[0].recipe  # every step of a layer makes its scores alike
    return trace


def cannot_generate(info, steps: bool = True) -> str:
    """Why a model with this info cannot write after its text ("" when it can): an encoder, or the decoder side of
    an encoder-decoder, reads its whole input at once. `steps`: whether the model has a generation step."""
    if getattr(info, "causal", False) and steps:
        return ""
    name = getattr(info, "name", "") or "the model"
    return f"{name} is not a causal language model (it reads its whole input at once, so it cannot write after it)"


def generate_count(config, model, prompt_length: int) -> int:
    """config.generate, checked against the model: ConfigError for a model that cannot write (an encoder, the
    decoder side of an encoder-decoder, a model without its head) or a count past its positions (the
    largest that fits is offered)."""
    from attnviz.core.runs.config import ConfigError

    count = config.generate if config.applies("generate") else 0
    if not count:
        return 0
    info, name = model.info, getattr(model.info, "name", "the model")
    problem = cannot_generate(info, getattr(model, "step", None) is not None)
    if problem:
        raise ConfigError("generate", count, problem, "set generate to 0, or choose a causal model", suggestions=(0,))
    if not getattr(model, "has_head", False):
        raise ConfigError("generate", count, f"{name} has no trained output head to choose tokens with",
                          "set generate to 0, or use a checkpoint with its language-model head", suggestions=(0,))
    room = info.max_positions - prompt_length
    if count > room:
        raise ConfigError("generate", count, f"the text's {prompt_length} tokens and {count} more exceed the "
                          f"{info.max_positions} positions {name} reads", f"generate at most {max(room, 0)} tokens",
                          suggestions=(max(room, 0),))
    return count


def generated_run(config, model, encoded, count: int, keep, plan, device, cancel, on_step, build):
    """The generation as a Ran (prompt tokens, then the generated ones labelled by the model)."""
    prompt = list(encoded.ids)

    def ran_of(gen: Generated) -> Ran:
        tokens = tuple(encoded.tokens) + tuple(model.label(i) for i in gen.ids[len(prompt):])
        return Ran(gen.traces, gen.hidden, gen.residuals, gen.ids, tokens, None, gen.prompt_length)

    stream = None if on_step is None else (lambda n, partial: on_step(n, lambda: build(ran_of(partial()))))
    gen = generate(model, prompt, count, temperature=config.temperature, top_k=config.sample_top_k, seed=config.seed,
                   record=keep, plan=plan, cancel=cancel, on_step=stream, device=device)
    return ran_of(gen)


def at_step(result, step: int):
    """A generation's RunResult as it stood after `step` generated tokens (0: the prompt alone): every map,
    token stage and label cut to the first prompt_length + step positions, and the output head's predictions
    to theirs (the last position's target not yet written)."""
    import dataclasses

    from attnviz.core.runs.config import ConfigError

    total = len(result.tokens) - result.prompt_length
    if not 0 <= step <= total:
        raise ConfigError("step", step, f"this generation has steps 0..{total}", f"choose a step from 0 to {total}",
                          suggestions=(total,))
    n = result.prompt_length + step

    def cut(name: str, a):
        if name in KEYED or name in PER_TOKEN:
            return a[..., :n, :]
        return a[..., :n, :n]  # a map, the mask
    stages = {name: cut(name, a) for name, a in result.stages.items()}
    return dataclasses.replace(
        result, stages=stages, mask=result.mask[..., :n, :n], fully_masked_rows=result.fully_masked_rows[..., :n],
        tokens=result.tokens[:n], token_ids=result.token_ids[:n], config=result.config.replace(seq_q=n, seq_kv=n),
        layer_weights=None if result.layer_weights is None else result.layer_weights[..., :n, :n],
        outputs=None if result.outputs is None else result.outputs.prefix(n))
