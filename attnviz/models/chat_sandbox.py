"""The chat template's own process: a model's Jinja template rendered where it cannot take attnviz down.

A chat template is code from the model's files. Jinja's sandbox stops it reaching Python's internals, but not
from running for hours (nested `range(100000)` loops) or asking for gigabytes (`'x' * 10**9`, a text that
tokenizers aborts the whole process on). So chat_render.py runs this file as a child process (stdlib and jinja2 only,
started once and reused) and kills it when a render outlives its time; here the process caps its own memory
(RLIMIT_AS), refuses repetitions and powers whose result would be huge before computing them, and stops a
render whose text grows past OUTPUT_LIMIT characters.

The environment is the one transformers' apply_chat_template builds (chat_template_utils: an immutable
sandbox with trim_blocks and lstrip_blocks, loop controls, the `generation` tag, tojson without HTML
escaping, raise_exception, strftime_now, and dict and namespace that refuse underscore names), so a template
renders here exactly as it does there.

Protocol, one JSON object per line: a `{"ready": true}` line once started, then for each request line
{"template": str, "variables": {...}} one reply line, {"text": str} or {"error": kind, "message": str} (kind:
"limit", "output", "memory" or "template").
"""

from __future__ import annotations

import json
import os
import signal
import sys
from datetime import datetime
from functools import lru_cache

OUTPUT_LIMIT = 1 << 22  # characters a rendered chat turn may have (4 Mi; a real one has a few hundred)
MEMORY_LIMIT = 1 << 30  # bytes the process may add to what it started with
POWER_LIMIT = 1024  # the largest exponent `**` takes (a template has no use for 10 ** 10 ** 8)
MEMORY_REPLY = {"error": "memory", "message": f"needed over {MEMORY_LIMIT >> 20:,} MiB of memory"}


class TemplateLimit(Exception):
    """A step whose result would be too large, refused before it is computed."""


@lru_cache(maxsize=1)
def environment():
    """transformers' chat-template environment, on the bounded sandbox."""
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Bounded(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context, operator, left, right):
            if operator == "*":
                _check_repeat(left, right)
                _check_repeat(right, left)
            elif isinstance(right, int) and abs(right) > POWER_LIMIT and isinstance(left, (int, float)) \
                    and abs(left) > 1:
                raise TemplateLimit(f"raises {left!r} to the power {right:,} (at most {POWER_LIMIT:,} here)")
            return super().call_binop(context, operator, left, right)

    class Generation(Extension):  # transformers' {% generation %}: marks assistant text, renders it unchanged
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    env = Bounded(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals.update(_template_globals(jinja2))
    return env


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _template_globals(jinja2) -> dict:
    """The names transformers gives a chat template: raise_exception, strftime_now, dict, namespace."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    class TemplateDict:
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                _plain_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            _plain_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

    def _plain_name(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a namespace cannot hold the underscore name {name!r}")

    return dict(raise_exception=raise_exception, strftime_now=lambda f: datetime.now().strftime(f),
                dict=TemplateDict(), namespace=TemplateNamespace)


def _check_repeat(sequence, times) -> None:
    if isinstance(sequence, (str, list, tuple)) and isinstance(times, int) and not isinstance(times, bool) \
            and len(sequence) * times > OUTPUT_LIMIT:
        kind, unit = ("a text", "characters") if isinstance(sequence, str) else ("a list", "items")
        raise TemplateLimit(f"repeats {kind} {times:,} times ({len(sequence) * times:,} {unit}, over the "
                            f"{OUTPUT_LIMIT:,} a chat turn may hold)")


@lru_cache(maxsize=8)
def compiled(template: str):
    return environment().from_string(template)


def render(template: str, variables: dict) -> dict:
    """One reply: the rendered text, or the reason there is none."""
    try:
        chunks, size = [], 0
        for chunk in compiled(template).generate(**variables):
            size += len(chunk)
            if size > OUTPUT_LIMIT:
                return {"error": "output", "message": f"wrote over {OUTPUT_LIMIT:,} characters"}
            chunks.append(chunk)
        return {"text": "".join(chunks)}
    except TemplateLimit as exc:
        return {"error": "limit", "message": str(exc)}
    except MemoryError:
        return MEMORY_REPLY
    except Exception as exc:  # noqa: BLE001 - the template's own raise_exception, jinja's errors, Python's
        return {"error": "template", "message": f"{type(exc).__name__}: {str(exc).strip()[:160]}"}


def cap_memory() -> None:
    """At most MEMORY_LIMIT bytes more address space than the process holds now (where the system can say)."""
    try:
        import resource

        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[0])
        limit = pages * os.sysconf("SC_PAGE_SIZE") + MEMORY_LIMIT
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, OSError, ValueError):
        pass  # no RLIMIT_AS or no /proc: the time limit still ends a runaway render


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C in attnviz's terminal is attnviz's; EOF ends this
    environment()  # jinja2 imported before the memory cap
    cap_memory()
    out = sys.stdout.buffer
    out.write(b'{"ready": true}\n')
    out.flush()
    for line in sys.stdin.buffer:
        request = json.loads(line)
        reply = render(request["template"], request["variables"])
        try:
            data = json.dumps(reply).encode("ascii") + b"\n"
        except MemoryError:
            data = json.dumps(MEMORY_REPLY).encode("ascii") + b"\n"
        out.write(data)
        out.flush()


if __name__ == "__main__":
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]  # run as a script: attnviz/models is no package path (its modules would shadow others)
    main()
