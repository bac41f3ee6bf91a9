"""Wall-clock budgets for untrusted work (principle 4: bounded time).

Two kinds of limit nest:

* the **derivation budget** of a command (``blr-derive ... --time-limit S``, default
  :data:`DEFAULT_SECONDS`): when it runs out, :class:`BudgetExceeded` is raised wherever the engine is.  It
  derives from ``BaseException`` so that no ``except Exception`` inside sympy or the engine can swallow it,
  and it is re-raised every :data:`REPEAT` seconds until the budget's block has been left; the command line
  turns it into one located error (exit status 2);
* **step limits** (:func:`step_limit`) around single sympy calls that can run away on unusual declarations
  (an integral, a solve): they raise :class:`StepTimeout`, an ordinary exception that the engine catches to
  try another method or report "no closed form".

Both use one ``SIGALRM`` timer armed for the earliest pending deadline, so any number of limits nest.
Signals reach the main thread only: in another thread the limits are not applied (the API documents this).
:func:`where` records what the engine is working on (file and line), so that the error can name it.
"""
from __future__ import annotations

import contextvars
import signal
import sys
import threading
import time
from contextlib import contextmanager

DEFAULT_SECONDS = 120.0
REPEAT = 0.25
#: the longest the timer is set at once (setitimer overflows near 1e9 s); a later deadline re-arms it on the alarm
MAX_TIMER = 1e6

_stack: list = []             # [(deadline, exception factory)], innermost last
_location = contextvars.ContextVar("blr_derive_budget_location", default=(None, None))


class BudgetExceeded(BaseException):
    """The derivation budget ran out (not an Exception: broad handlers must not swallow it)."""

    def __init__(self, seconds, file=None, line=None):
        super().__init__(f"the derivation did not finish within the time limit of {seconds:g} s "
                         "(a larger --time-limit allows more)")
        self.seconds, self.file, self.line = seconds, file, line

    def __reduce__(self):          # pickled by the catalog's worker processes: rebuilt from its own arguments
        return (type(self), (self.seconds, self.file, self.line))


class StepTimeout(Exception):
    """A single sympy step ran longer than its limit (see :func:`step_limit`)."""


def _usable() -> bool:
    return threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")


def _arm():
    if not _stack:
        signal.setitimer(signal.ITIMER_REAL, 0)
        return
    delay = min(d for d, _ in _stack) - time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, min(max(delay, 1e-3), MAX_TIMER))   # a far deadline is re-armed


def _on_alarm(signum, frame):
    now = time.monotonic()
    expired = [(d, make) for d, make in _stack if d <= now]
    if not expired:
        _arm()
        return
    _, make = min(expired, key=lambda x: x[0])
    signal.setitimer(signal.ITIMER_REAL, REPEAT)      # again, in case a handler swallows this one
    raise make()


def _quiet_unraisable(previous):
    """A ``sys.unraisablehook`` that drops this module's exceptions and passes any other to ``previous``.

    The alarm can fire while Python runs code whose exceptions it cannot propagate (a garbage-collection
    callback such as jax's ``_xla_gc_callback``, a ``__del__``): Python then prints "Exception ignored in ..."
    with a traceback and carries on.  The expired limit is raised again every :data:`REPEAT` seconds until its
    block is left, so dropping that report loses nothing and keeps the command's output to its one located
    line."""
    def hook(unraisable):
        if isinstance(unraisable.exc_value, (BudgetExceeded, StepTimeout)):
            return
        previous(unraisable)
    return hook


def seconds_or_none(seconds):
    """A limit in seconds as a float, or None for no limit (None or +inf); anything else that is not a positive
    number (NaN, a negative number, text, a flag) is a ValueError that says what to pass."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
        raise ValueError(f"a time limit must be a positive number of seconds, or None for no limit; got {seconds!r}")
    return None if seconds == float("inf") else float(seconds)


@contextmanager
def _deadline(seconds, make):
    seconds = seconds_or_none(seconds)
    if not _usable() or seconds is None:
        yield
        return
    entry = (time.monotonic() + seconds, make)
    outermost = not _stack
    old = signal.signal(signal.SIGALRM, _on_alarm) if outermost else None
    old_hook = sys.unraisablehook if outermost else None
    if outermost:
        sys.unraisablehook = _quiet_unraisable(old_hook)
    try:
        _stack.append(entry)
        _arm()
        yield
    finally:
        if entry in _stack:
            _stack.remove(entry)
        if outermost:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
            sys.unraisablehook = old_hook
        else:
            _arm()


@contextmanager
def derivation_budget(seconds=DEFAULT_SECONDS):
    """Raise :class:`BudgetExceeded` (located by :func:`where`) if the block runs longer than ``seconds``."""
    def make():
        file, line = _location.get()
        return BudgetExceeded(seconds, file, line)
    token = _location.set((None, None))
    try:
        with _deadline(seconds, make):
            yield
    except (RecursionError, MemoryError) as exc:
        # the input was too deep or too large where the engine worked on it: where, kept on the error (the
        # location is reset below, before the command line's handler reads it)
        if getattr(exc, "blr_location", None) is None:
            exc.blr_location = _location.get()
        raise
    finally:
        _location.reset(token)


@contextmanager
def step_limit(seconds):
    """Raise :class:`StepTimeout` if the block runs longer than ``seconds``."""
    with _deadline(seconds, lambda: StepTimeout(f"timed out after {seconds} s")):
        yield


def where(file=None, line=None):
    """Record what the engine is working on now (a budget error names it)."""
    _location.set((file, line))


def location():
    return _location.get()
