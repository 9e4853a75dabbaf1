"""A lane: one long-lived worker thread at a fixed niceness. The session runs its forwards on two of them, the
`quiet` lane and the `busy` one (threads.py: which one a forward takes); a script's sync session may run them on
its own thread instead (caller_lanes)."""

from __future__ import annotations

import queue
import threading

from attnviz.system import lower_priority, thread_policy


class Lane:
    """One long-lived thread at a fixed niceness that runs the functions handed to it; torch's
    OpenMP pool, started by this thread, inherits its niceness."""

    def __init__(self, name: str, nice_step: int):
        self.nice_step = nice_step
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def call(self, function):
        """Run `function` on the lane and return its result (or raise its exception) here."""
        done, box = threading.Event(), {}
        self._jobs.put((function, done, box))
        done.wait()
        if "error" in box:
            raise box["error"]
        return box.get("value")

    def close(self) -> None:
        self._jobs.put(None)

    def _loop(self) -> None:
        lower_priority(self.nice_step)
        while (job := self._jobs.get()) is not None:
            function, done, box = job
            try:
                box["value"] = function()
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                box["error"] = exc
            finally:
                del function
                done.set()


def policy_lanes() -> dict[str, Lane]:
    """The two lanes of the thread policy in force: `quiet` (every core free) quiet_nice nicer than the caller,
    `busy` (some cores held by other programs) busy_nice nicer (niceness cannot be lowered again without
    privileges, hence two threads)."""
    policy = thread_policy()
    return {"quiet": Lane("attnviz-compute", policy.quiet_nice),
            "busy": Lane("attnviz-compute-shared", policy.busy_nice)}


class CallerLane:
    """A lane that runs each function on the thread that calls it, at that thread's niceness (a script's forward
    as the script would run it)."""

    def call(self, function):
        return function()

    def close(self) -> None:
        pass


def caller_lanes() -> dict[str, CallerLane]:
    """Both lanes on the caller's thread: a sync session (Session(sync=True, lanes=caller_lanes)) that starts no
    thread for its forwards and changes no niceness."""
    lane = CallerLane()
    return {"quiet": lane, "busy": lane}
