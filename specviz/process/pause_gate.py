"""A gate between a process that may be stopped (SIGSTOP) while another times something, and the one that stops it.

The app's compile worker is stopped while a Run's clock runs (serving/compile_worker.paused). Stopped while it holds a
lock that the server may wait on (the lock file of a native kernel's build, a file being fetched into the cache), it
would make the server wait for as long as the Run lasts, or for ever if that Run itself waited on the lock. So the two
share a lock file, the gate (`flock`, released by the kernel whatever happens to its holder):

- the worker holds the gate for each stretch in which it may hold such a lock (`critical_section`: a native kernel's
  build, kernels/build.load_library), and waits for the gate before it enters one;
- the server stops the worker only after taking the gate without waiting (`try_hold`), and gives it back once the
  worker runs again (`release`); a worker inside a critical section is not stopped: a timed Run waits for it to
  leave (a kernel's build, about 25 s), and past the longest wait it runs on and the Run is flagged like any other
  load on the machine (process/machine_load.py).

The gate's path reaches the worker in $SPECVIZ_PAUSE_GATE. Anywhere else (the app itself, the CLI, tests) there is
no gate and `critical_section` does nothing. Posix only; elsewhere nobody is stopped.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

ENVIRONMENT = "SPECVIZ_PAUSE_GATE"

_held = 0  # how deep this process is inside critical sections
_handle: IO | None = None  # the gate while this process holds it
_lock = threading.Lock()


@contextlib.contextmanager
def critical_section() -> Iterator[None]:
    """Inside, this process is not stopped by the one that set $SPECVIZ_PAUSE_GATE (nested and threaded sections
    count as one; nothing at all without the variable)."""
    global _held, _handle
    path = os.environ.get(ENVIRONMENT)
    if not path or os.name != "posix":
        yield
        return
    import fcntl

    with _lock:
        if _held == 0:
            _handle = open(path, "a")  # noqa: SIM115  (kept open for the section's length)
            fcntl.flock(_handle, fcntl.LOCK_EX)  # waits only while the server holds it: this process is then stopped
        _held += 1
    try:
        yield
    finally:
        with _lock:
            _held -= 1
            if _held == 0 and _handle is not None:
                fcntl.flock(_handle, fcntl.LOCK_UN)
                _handle.close()
                _handle = None


def try_hold(path: Path) -> IO | None:
    """The gate, held, if the worker is not inside a critical section (then it may be stopped); None where it is."""
    if os.name != "posix":
        return None
    import fcntl

    handle = open(path, "a")  # noqa: SIM115  (held until `release`)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def release(handle: IO) -> None:
    """Give the gate back (after the worker was let go on)."""
    import fcntl

    fcntl.flock(handle, fcntl.LOCK_UN)
    handle.close()
