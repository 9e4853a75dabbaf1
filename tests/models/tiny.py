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


def wordpiece_tokenizer():
    """BERT-style: lower-cased WordPiece, [CLS] $A [SEP] template, and padding left on (as
    sentence-transformers ships it) so the loader must switch it off."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {t: i for i, t in enumerate(specials + WORDS + [",", ".", "!", ";", "##s", "##ed", "ch", "##ase"])}
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


def make_bert(folder):
    from transformers import BertConfig, BertForMaskedLM

    tok = wordpiece_tokenizer()
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
    model = cls(config)
    if kind == "qwen2":  # random biases, so a dropped bias would show
        import torch

        with torch.no_grad():
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0, 0.5)
    _save(folder, model, tok)


BUILDERS = {"bert": make_bert, "gpt2": make_gpt2, "llama": make_llama,
            "qwen2": lambda f: make_llama(f, "qwen2"), "mistral": lambda f: make_llama(f, "mistral")}
