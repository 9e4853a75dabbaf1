"""A model's chat template rendered with limits: in its own process (chat_sandbox.py), within TIME_LIMIT_S.

`render_user_turn(tokenizer, text)` gives what transformers' `apply_chat_template([{"role": "user", "content":
text}], tokenize=False, add_generation_prompt=True)` gives, or one ModelError (field `chat`) naming what the
template did: ran past the time limit, wrote or repeated more than a chat turn may hold, needed more memory than
its process may have, failed, or crashed its process. Nothing a template does can stop or fill attnviz's own
process: the child is killed when a render outlives its time, and the next render starts a fresh one.

The child is started on the first render (about 0.1 s) and kept: each render then costs one round trip through
its pipes. Renders from several threads take turns.
"""

from __future__ import annotations

import atexit
import json
import queue
import subprocess
import sys
import threading
from pathlib import Path

from attnviz.models.errors import ModelError

TIME_LIMIT_S = 5.0  # a real template renders one turn in well under a millisecond
START_LIMIT_S = 60.0  # starting the child: Python and jinja2 (0.1 s quiet; far more on a loaded machine)
CHILD = Path(__file__).with_name("chat_sandbox.py")
FIX = "turn the chat template off (untick Chat template, or --no-chat), or use another model"


class TemplateSandbox:
    """One child process rendering templates, started when first needed, one render at a time."""

    def __init__(self):
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._replies: queue.Queue[bytes | None] = queue.Queue()

    def render(self, template: str, variables: dict, limit: float | None = None) -> dict:
        """The child's reply ({"text": ...} or {"error": kind, "message": ...}); kind "time" when it ran past
        `limit` seconds (default TIME_LIMIT_S; the child is killed), "ended" when the child died during it."""
        request = json.dumps({"template": template, "variables": variables}, default=str).encode("ascii") + b"\n"
        limit = TIME_LIMIT_S if limit is None else limit
        with self._lock:
            fresh = self._process is None or self._process.poll() is not None
            if fresh:
                self._start()
            reply = self._exchange(request, limit)
            if reply.get("error") == "ended" and not fresh:  # it died between renders (the OOM killer, say)
                self._start()
                reply = self._exchange(request, limit)
            return reply

    def _exchange(self, request: bytes, limit: float) -> dict:
        try:
            self._process.stdin.write(request)
            self._process.stdin.flush()
            line = self._replies.get(timeout=limit)
        except OSError:  # its pipe broke: it died
            line = None
        except queue.Empty:
            self.close()
            return {"error": "time", "message": f"did not finish within {limit:g} s (a loop far too long, or one "
                    "that never ends)"}
        if line is None:
            self.close()
            return {"error": "ended", "message": "stopped its process (out of memory, or a crash)"}
        return json.loads(line)

    def _start(self) -> None:
        self.close()
        self._process = subprocess.Popen([sys.executable, str(CHILD)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self._replies = queue.Queue()
        threading.Thread(target=_read_lines, args=(self._process.stdout, self._replies), daemon=True,
                         name="attnviz-chat-template").start()
        try:
            ready = self._replies.get(timeout=START_LIMIT_S)
        except queue.Empty:
            ready = None
        if ready is None:
            self.close()
            raise ModelError(True, f"the chat template's own process ({CHILD.name}) did not start within "
                             f"{START_LIMIT_S:g} s", FIX, field_name="chat", suggestions=(False,))

    def close(self) -> None:
        """End the child (a later render starts another)."""
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait()
            process.stdin.close()
            process.stdout.close()


def _read_lines(stream, replies: queue.Queue) -> None:
    for line in stream:
        replies.put(line)
    replies.put(None)  # the child ended


SANDBOX = TemplateSandbox()
atexit.register(SANDBOX.close)


def render_user_turn(tokenizer, text: str) -> str:
    """`text` as one user turn in `tokenizer`'s chat template (a transformers tokenizer), with the generation
    prompt, rendered in the sandbox; ModelError (field `chat`) naming what the template did wrong."""
    try:
        template = tokenizer.get_chat_template()
    except Exception as exc:  # noqa: BLE001 - transformers' ValueError for a set of templates without a default
        reply = {"error": "template", "message": f"{type(exc).__name__}: {exc}"}
    else:  # what transformers passes: the special tokens, then the conversation and its switches
        variables = {**tokenizer.special_tokens_map, "messages": [{"role": "user", "content": text}],
                     "tools": None, "documents": None, "add_generation_prompt": True}
        reply = SANDBOX.render(template, variables)
    if "text" in reply:
        return reply["text"]
    error, message = reply["error"], reply["message"]
    problem = {"template": f"fails on one user turn ({message})", "limit": message}.get(
        error, f"{message} on one user turn")
    raise ModelError(True, f"the model's chat template {problem}", FIX, field_name="chat", suggestions=(False,))
