"""Tiny random checkpoints written with transformers (test-only) plus tokenizer.json files built with
`tokenizers`, one folder per family."""

from __future__ import annotations

CORPUS = [
    "The cat sat on the mat.", "A dog chased the cat around the garden!", "Attention is all you need.",
    "Hello world, hello attention maps; the quick brown fox jumps over the lazy dog.",
    "Café naïve — résumé 😀 tokens",
]
SENTENCE = "The cat sat on the mat, and the dog chased it."
WORDS = sorted({w.strip(".,!;").lower() for s in CORPUS + [SENTENCE] for w in s.split()})


# the pieces all-MiniLM-L6-v2's vocabulary splits "attnviz" into (at ##t ##n ##vi ##z)
MINILM_PIECES = ["at", "##t", "##n", "##vi", "##z"]


def wordpiece_tokenizer(extra: tuple[str, ...] = ()):
    """BERT-style: lower-cased WordPiece, [CLS] $A [SEP] template, and padding left on (as
    sentence-transformers ships it) so the loader must switch it off. `extra`: more pieces, at the end."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    pieces = [",", ".", "!", ";", "##s", "##ed", "ch", "##ase", *extra]
    vocab = {t: i for i, t in enumerate(specials + WORDS + pieces)}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.decoder = decoders.WordPiece()
    tok.enable_padding(length=32, pad_id=0, pad_token="[PAD]")
    return tok


def bytelevel_tokenizer(bos: str | None = None):
    """GPT-2 / Llama style: byte-level BPE trained on the corpus (optionally a BOS template)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>"] + ([bos] if bos else [])
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 3, trainer)
    if bos:
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, 1)])
    return tok


def _save(folder, model, tokenizer) -> None:
    model.save_pretrained(folder)
    tokenizer.save(str(folder / "tokenizer.json"))


def make_bert(folder, extra: tuple[str, ...] = ()):
    from transformers import BertConfig, BertForMaskedLM

    tok = wordpiece_tokenizer(extra)
    config = BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=40, initializer_range=0.3)
    _save(folder, BertForMaskedLM(config), tok)  # keys under "bert."


def make_gpt2(folder):
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = bytelevel_tokenizer()
    config = GPT2Config(vocab_size=tok.get_vocab_size(), n_embd=32, n_layer=3, n_head=4, n_positions=64,
                        initializer_range=0.3)
    _save(folder, GPT2LMHeadModel(config), tok)  # keys under "transformer."


def make_llama(folder, kind: str = "llama"):
    import transformers

    tok = bytelevel_tokenizer(bos="<s>")
    common = dict(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, initializer_range=0.3,
                  rope_theta=1000.0)
    if kind == "llama":
        config, cls = transformers.LlamaConfig(**common), transformers.LlamaForCausalLM
    elif kind == "qwen2":
        config, cls = transformers.Qwen2Config(**common), transformers.Qwen2ForCausalLM
    else:
        config, cls = transformers.MistralConfig(**common, sliding_window=4), transformers.MistralForCausalLM
    import torch

    torch.manual_seed(0)  # the same weights every run: a sampled generation of them is the same every run
    model = cls(config)
    if kind == "qwen2":  # random biases, so a dropped bias would show

        with torch.no_grad():
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0, 0.5)
    _save(folder, model, tok)


def make_family(folder, model_type: str, **overrides):
    """A tiny random checkpoint of any family transformers builds from a config: width 32, 2 layers,
    4 heads (2 kv heads where the family has them), initialised wide so the maps are not uniform."""
    import torch
    import transformers

    encoder = model_type in ENCODERS
    tok = wordpiece_tokenizer() if encoder else bytelevel_tokenizer(bos=None if model_type in NO_BOS else "<s>")
    settings = dict(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                    num_attention_heads=4, max_position_embeddings=64, initializer_range=0.3, pad_token_id=0)
    settings.update(FAMILY_SETTINGS.get(model_type, {}), **overrides)
    config = transformers.AutoConfig.for_model(model_type, **settings)
    auto = transformers.AutoModelForMaskedLM if encoder else transformers.AutoModelForCausalLM
    torch.manual_seed(0)
    model = auto.from_config(config)
    with torch.no_grad():  # random biases and norm gains, so a dropped one would show
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name or "sinks" in name:
                p.normal_(1.0 if "norm" in name and name.endswith("weight") else 0.0, 0.3)
    _save(folder, model, tok)


ENCODERS = {"bert", "roberta", "distilbert", "electra", "xlm-roberta", "modernbert", "albert", "mpnet"}
NO_BOS = {"gpt_neox", "gpt_neo"}
KV = dict(num_key_value_heads=2)
FAMILY_SETTINGS = {
    "roberta": dict(max_position_embeddings=80),  # positions start at padding_idx + 1
    "distilbert": dict(hidden_dim=48, sinusoidal_pos_embds=False),
    "gpt_neox": dict(rotary_pct=0.25, use_parallel_residual=True),
    "llama3": {},
    "mistral": dict(**KV, sliding_window=4),
    "qwen2": dict(**KV),
    "qwen3": dict(**KV, head_dim=16),
    "gemma2": dict(**KV, head_dim=8, attn_logit_softcapping=2.0, final_logit_softcapping=None, sliding_window=4,
                   query_pre_attn_scalar=8),
    "gemma3_text": dict(**KV, head_dim=8, sliding_window=4, layer_types=["sliding_attention", "full_attention"],
                        query_pre_attn_scalar=8),
    "phi3": dict(**KV),
    "olmo2": dict(**KV),
    "gpt_oss": dict(**KV, head_dim=8, num_local_experts=2, num_experts_per_tok=1, sliding_window=4,
                    layer_types=["sliding_attention", "full_attention"]),
    "gpt_neo": dict(attention_types=[[["global", "local"], 1]], window_size=4, num_layers=2),
    "mixtral": dict(**KV, num_local_experts=2, num_experts_per_tok=1),
    "qwen2_moe": dict(**KV, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16,
                      shared_expert_intermediate_size=16),
    "smollm3": dict(**KV),
    "gpt_bigcode": dict(multi_query=True),
    "opt": dict(ffn_dim=48, word_embed_proj_dim=32),
    "gptj": dict(rotary_dim=4),
    "electra": dict(embedding_size=32),
    "xlm-roberta": dict(max_position_embeddings=80),
    "modernbert": dict(global_attn_every_n_layers=2, local_attention=4),  # passes flash's `deterministic`
    "albert": dict(embedding_size=16, num_hidden_groups=1),  # every layer shares one set of weights
}
INTERFACE_FAMILIES = ["bert", "roberta", "distilbert", "gpt2", "gpt_neox", "llama", "llama3", "mistral", "qwen2",
                      "qwen3", "gemma2", "gemma3_text", "phi3", "olmo2", "gpt_oss", "mixtral", "qwen2_moe", "smollm3",
                      "gpt_bigcode", "opt", "phi", "gptj", "electra", "xlm-roberta", "modernbert", "albert"]
WEIGHTS_ONLY_FAMILIES = ["gpt_neo", "bloom", "mpnet"]


def make_seq2seq(folder, model_type: str):
    """A tiny T5 or BART: two encoder and two decoder layers of four heads."""
    import torch
    import transformers

    tok = bytelevel_tokenizer()
    settings = SEQ2SEQ_SETTINGS[model_type]
    config = transformers.AutoConfig.for_model(model_type, vocab_size=tok.get_vocab_size(), pad_token_id=0,
                                               decoder_start_token_id=0, **settings)
    torch.manual_seed(0)
    model = transformers.AutoModelForSeq2SeqLM.from_config(config)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8.0 if model_type == "t5" else 1.0)  # T5 initialises with tiny factors: make the maps show
    _save(folder, model, tok)


SEQ2SEQ_SETTINGS = {
    "t5": dict(d_model=32, d_kv=8, num_heads=4, num_layers=2, num_decoder_layers=2, d_ff=48,
               relative_attention_num_buckets=8, relative_attention_max_distance=16, initializer_factor=1.0),
    "bart": dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                 encoder_ffn_dim=48, decoder_ffn_dim=48, max_position_embeddings=64, init_std=0.3),
}
SEQ2SEQ_FAMILIES = list(SEQ2SEQ_SETTINGS)


def make_llama3(folder):
    make_family(folder, "llama", **KV, rope_parameters={"rope_type": "llama3", "rope_theta": 1000.0, "factor": 8.0,
                                                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                         "original_max_position_embeddings": 8})


BUILDERS = {"bert": make_bert, "bert-minilm-pieces": lambda f: make_bert(f, tuple(MINILM_PIECES)),
            "gpt2": make_gpt2, "llama": make_llama, "qwen2": lambda f: make_llama(f, "qwen2"),
            "mistral": lambda f: make_llama(f, "mistral"), "llama3": make_llama3}
for _family in INTERFACE_FAMILIES + WEIGHTS_ONLY_FAMILIES:
    BUILDERS.setdefault(_family, lambda f, t=_family: make_family(f, t))
for _family in SEQ2SEQ_FAMILIES:
    BUILDERS[_family] = lambda f, t=_family: make_seq2seq(f, t)


def _permute_for_gguf(w, heads: int):
    """llama.cpp's converter permutes q and k rows for its RoPE layout; transformers undoes it on load."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_llama_gguf(folder, path, architecture: str = "llama", qtype: str = "F32") -> None:
    """The tiny llama in `folder` (safetensors, config.json, tokenizer.json) as a GGUF file, written with the
    gguf package's own writer: llama.cpp's tensor names and metadata, the BPE vocabulary and merges. `qtype`
    (Q8_0, Q4_0 ...): its matrices quantised with gguf's own quantize where their rows hold whole blocks."""
    import json

    import gguf
    from safetensors.numpy import load_file

    config = json.loads((folder / "config.json").read_text())
    state = load_file(str(folder / "model.safetensors"))
    tok = json.loads((folder / "tokenizer.json").read_text())
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    w = gguf.GGUFWriter(str(path), architecture)
    w.add_block_count(config["num_hidden_layers"])
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_dimension_count(config["hidden_size"] // heads)
    w.add_rope_freq_base(config["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    w.add_vocab_size(config["vocab_size"])
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv_: kv_[1])
    added = {t["id"]: t["content"] for t in tok["added_tokens"]}
    tokens = [added.get(i, t) for t, i in vocab]
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([3 if i in added else 1 for i in range(len(tokens))])  # 3: control, 1: normal
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]])
    w.add_bos_token_id(1)
    w.add_add_bos_token(True)
    w.add_eos_token_id(0)
    names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    kind = gguf.GGMLQuantizationType[qtype]
    block = gguf.GGML_QUANT_SIZES[kind][0]

    def add(name, t):
        if qtype == "F32" or t.ndim != 2 or t.shape[-1] % block:
            w.add_tensor(name, t)
        else:
            w.add_tensor(name, gguf.quants.quantize(t, kind), raw_dtype=kind)

    add("token_embd.weight", state["model.embed_tokens.weight"])
    add("output_norm.weight", state["model.norm.weight"])
    add("output.weight", state["lm_head.weight"])
    for i in range(config["num_hidden_layers"]):
        for theirs, ours in names.items():
            t = state[f"model.layers.{i}.{theirs}.weight"]
            if ours in ("attn_q", "attn_k"):
                t = _permute_for_gguf(t, heads if ours == "attn_q" else kv)
            add(f"blk.{i}.{ours}.weight", t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
