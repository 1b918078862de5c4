"""Progress of a long command: a tqdm bar on a terminal, a line every few seconds otherwise.

A run whose stderr is a file or a pipe (a cron job, ``2> log``, CI) still says
how far it got: one line every :data:`EVERY` seconds, with the elapsed time.
A step that reports nothing while it runs (one large file split, a file
written) is run :func:`ticking`: its bar is redrawn, or its line printed, all
the same. A terminal that reports no size, or an absurd one (a pseudo-terminal
whose size was never set reports 0 x 0, and tqdm then draws nothing), is taken
as :data:`DEFAULT_SIZE`. :class:`Clock` gives the elapsed time and rate for
the command's last line.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TextIO

EVERY = 5.0
"""Seconds between two progress lines when stderr is not a terminal."""
DEFAULT_SIZE = os.terminal_size((80, 24))
"""Columns and rows of a terminal that reports none, or an absurd size."""
COLUMNS = range(20, 1001)
ROWS = range(1, 1001)
"""The sizes taken as the terminal's own."""
REDRAW = 1.0
"""Seconds between two redraws of a terminal's bar while a step reports nothing."""


class Bar(Protocol):
    """What a command calls on its progress: ``update`` as work is done, ``close`` at the end."""

    def update(self, n: int = 1) -> Any:
        """``n`` more units done."""

    def close(self) -> Any:
        """The work is over."""


def bar(total: int, unit: str, desc: str, err: TextIO | None = None) -> Bar:
    """A tqdm bar (with its ETA) on a terminal; progress lines otherwise."""
    stream = sys.stderr if err is None else err
    if total == 0:
        return _Silent()
    if stream.isatty():
        try:
            from tqdm import tqdm
        except ImportError:
            pass
        else:
            columns, rows = screen(stream)
            bar_: Bar = tqdm(
                total=total,
                unit=unit,
                desc=desc,
                file=stream,
                leave=False,
                mininterval=0,
                ncols=columns,
                nrows=rows,
            )
            return bar_
    return _Lines(total, unit, desc, stream)


def screen(stream: TextIO) -> os.terminal_size:
    """The size of the terminal ``stream`` writes to; :data:`DEFAULT_SIZE` for 0, absurd, unknown.

    Each of columns and rows falls back on its own (a terminal may report its
    rows and 0 columns).
    """
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):  # no file descriptor (a StringIO), no terminal
        return DEFAULT_SIZE
    columns = size.columns if size.columns in COLUMNS else DEFAULT_SIZE.columns
    rows = size.lines if size.lines in ROWS else DEFAULT_SIZE.lines
    return os.terminal_size((columns, rows))


@contextmanager
def ticking(bar: Bar) -> Iterator[Bar]:
    """Keep ``bar`` alive while a step that reports nothing runs.

    A terminal's bar is redrawn every :data:`REDRAW` seconds (its elapsed time
    moves); progress lines come every :data:`EVERY` seconds as they do when the
    work is counted.
    """
    refresh = getattr(bar, "refresh", None)
    every = REDRAW if callable(refresh) else EVERY
    if every <= 0:  # a line at every step already
        yield bar
        return
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(every):
            if callable(refresh):
                refresh()
            else:
                bar.update(0)

    thread = threading.Thread(target=tick, name="s2b-progress", daemon=True)
    thread.start()
    try:
        yield bar
    finally:
        stop.set()
        thread.join()


class _Silent:
    def update(self, n: int = 1) -> None:
        """Nothing to show."""

    def close(self) -> None:
        """Nothing to close."""


class _Lines:
    """``s2b: embedding: 1200/5000 vector(s) (24%), 0:42 elapsed`` every :data:`EVERY` seconds."""

    def __init__(self, total: int, unit: str, desc: str, stream: TextIO) -> None:
        self.total, self.unit, self.desc, self.stream = total, unit, desc, stream
        self.done = 0
        self.start = self.last = time.monotonic()
        self._lock = threading.Lock()  # :func:`ticking` updates from its own thread

    def update(self, n: int = 1) -> None:
        """Count ``n`` more; print a line when :data:`EVERY` seconds passed since the last."""
        with self._lock:
            self.done += n
            now = time.monotonic()
            if now - self.last >= EVERY:
                self.last = now
                share = 100 * self.done // self.total
                print(
                    f"s2b: {self.desc}: {self.done}/{self.total} {self.unit}(s) ({share}%), "
                    f"{clock(now - self.start)} elapsed",
                    file=self.stream,
                    flush=True,
                )

    def close(self) -> None:
        """Nothing to close."""


def clock(seconds: float) -> str:
    """``0:42``, ``13:02``, ``1:02:03``."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Clock:
    """Elapsed time of a command, and the rate of its work, for its last line."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def summary(self, count: int, unit: str) -> str:
        """``done in 12.3 s: 100 chunk(s), 8.1 a second`` (without a rate when nothing was done)."""
        seconds = time.monotonic() - self.start
        took = f"{seconds:.1f} s" if seconds < 60 else clock(seconds)
        if count == 0 or seconds <= 0:
            return f"done in {took}"
        return f"done in {took}: {count} {unit}(s), {count / seconds:.1f} a second"
