"""What the scheduler says of this process's threads: asleep, or wanting a CPU.

Linux keeps, per thread, ``/proc/self/task/<tid>/schedstat``: nanoseconds on a CPU,
nanoseconds waiting on a run queue, and how many times it got a CPU; and, in
``/proc/self/task/<tid>/stat``, its state now (``R`` running or runnable, ``S`` asleep,
...). A thread waiting in gloo sleeps: it neither runs nor waits for a CPU, however loaded
the machine is. A computing thread runs; a starved one waits on a run queue. A CPU share
alone cannot tell the sleeper from the starved: both use little CPU. ``wanted_cpu`` tells
them apart over the window between two readings, for the wavefront (``_wavefront``).

The kernel adds a wait to ``schedstat`` when the thread gets its CPU, not while it waits:
a thread runnable at both readings that never got a CPU in between waited all along,
however small its counters moved. Without ``schedstat`` (a kernel built without
``CONFIG_SCHED_INFO``) a runnable thread counts as wanting the CPU and ``stat``'s user and
system time stand in for the CPU clock; without ``/proc`` nothing can be told, and
``read_threads`` says so with ``None``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# A thread runnable (running or waiting for a CPU) this share of a window is computing or
# starved: one that wants a CPU all along comes close to all of it. A sleeper that wakes
# now and then stays far below even when each wake-up waits: gloo's loop thread wakes
# every 10 ms, and its waits came to at most 28 % of a window with 3 busy processes on
# its one core (a waking thread waits about one time slice, whatever the load).
BUSY_FRACTION = 0.5
_NS_PER_TICK = 1e9 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)


@dataclass(frozen=True)
class Reading:
    """One thread, as the scheduler sees it now."""

    state: str  # stat's letter: "R" running or runnable, "S" asleep, "D" in I/O, ...
    cpu_ns: int  # time it ran, ever
    wait_ns: int | None = None  # time it waited on a run queue, ever; None: no schedstat
    slices: int | None = None  # times it got a CPU, ever; None: no schedstat


def read_thread(tid: int) -> Reading | None:
    """Thread ``tid`` of this process now, or None if it is gone or cannot be read."""
    folder = f"/proc/self/task/{tid}"
    try:
        with open(f"{folder}/stat", "rb") as file:
            stat = file.read()
        # After "pid (comm) ": comm may hold spaces and parentheses, the last ")" ends it.
        fields = stat[stat.rindex(b")") + 2 :].split()
        state = fields[0].decode("ascii", "replace")
    except (OSError, ValueError, IndexError):
        return None
    try:
        with open(f"{folder}/schedstat", "rb") as file:
            cpu, wait, slices = (int(word) for word in file.read().split()[:3])
        return Reading(state, cpu, wait, slices)
    except (OSError, ValueError):
        try:  # utime and stime, fields 14 and 15 of stat, in clock ticks
            return Reading(state, round((int(fields[11]) + int(fields[12])) * _NS_PER_TICK))
        except (ValueError, IndexError):
            return None


def read_threads(skip: int) -> dict[int, Reading] | None:
    """Every thread of this process but ``skip`` (the one that looks), by native id; None
    where there is no ``/proc`` to read."""
    try:
        names = os.listdir("/proc/self/task")
    except OSError:
        return None
    found = {}
    for name in names:
        if name.isdigit() and int(name) != skip:
            reading = read_thread(int(name))
            if reading is not None:  # None: it ended meanwhile
                found[int(name)] = reading
    return found


def wanted_cpu(before: Reading | None, after: Reading, window_s: float) -> bool:
    """Whether a thread read as ``before`` and, ``window_s`` later, as ``after`` wanted a
    CPU: it ran or waited for one a ``BUSY_FRACTION`` of the window, or waited all along.
    Without ``before`` (a thread new since), only a runnable thread did. A thread in the
    kernel's uninterruptible wait (``D``: faulting pages in, reclaiming memory for them,
    disk I/O) works for the process, though it accrues neither counter: a copy into fresh
    memory on a machine short of it sat there in a fresh-clone run, and read as asleep."""
    if after.state == "D":
        return True
    if after.state == "R" and (before is None or after.wait_ns is None):
        return True  # runnable, and no wait counter to tell starved from running
    if before is None:
        return False
    ran = after.cpu_ns - before.cpu_ns
    waited = (after.wait_ns or 0) - (before.wait_ns or 0)
    if ran + waited > BUSY_FRACTION * window_s * 1e9:
        return True
    return after.state == before.state == "R" and after.slices == before.slices


def asleep(
    before: dict[int, Reading], after: dict[int, Reading], main: int, window_s: float
) -> bool:
    """Whether the process is waiting, not working: its main thread ``main`` sleeps now, and
    no thread read in ``after`` wanted a CPU since ``before`` (``window_s`` earlier). Other
    threads count because they may hold the work the main thread waits for: gloo's
    threads run the collective itself, torch's intra-op threads their share of an op."""
    now = after.get(main)
    if now is None or now.state != "S":
        return False
    return not any(wanted_cpu(before.get(tid), reading, window_s) for tid, reading in after.items())
