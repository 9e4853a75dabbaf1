"""attnviz.session: everything between a request and its outcome, without Qt.

request.py (Request, Outcome, Failure; the stages a request's run keeps), session.py (Session: the latest-wins
queue of latest.py served by one thread or, sync, by the caller; the pace against the window's paint,
pacing.py; Events, the callbacks it reports through), delivery.py (ScreenQueue: which outcomes reach the
screen, in which turns of the caller's event loop), present.py (present: a result's maps and explaining
extras in one call), threads.py, lanes.py and cpushare.py (the thread policy: how many torch threads a forward
gets and on which lane), memory.py (the reaper, glibc's malloc thresholds, the one gc policy). Its clock, its
lanes and its events are handed to it: the window's worker and delivery (ui/window/worker.py, delivery.py) put
it on Qt's signals and timers; a script or a test drives it synchronously (Session(sync=True), force_sync()),
or waits for it (wait_idle()). The CLI's session runs each forward on the calling thread as it finds it (lanes.py's
caller_lanes, threads.py's as_is) and asks for its result alone (a Request without options: nothing presented).

Imports: attnviz.explain, attnviz.frames, attnviz.core, attnviz.system and what lies below them; never Qt
or attnviz.ui.
"""

from attnviz.session.present import present
from attnviz.session.request import Failure, Outcome, Request, complete_stages, generating, supersedes
from attnviz.session.session import Events, Session

__all__ = ["Events", "Failure", "Outcome", "Request", "Session", "complete_stages", "generating", "present",
           "supersedes"]
