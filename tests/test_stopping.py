"""A daemon's main thread sees SIGTERM even when the kernel hands it to another thread."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time

# a main thread asleep for a minute; a worker takes SIGTERM itself (pthread_kill), as the
# kernel may hand a process's signal to any thread that does not block it
SCRIPT = textwrap.dedent("""
    import signal, sys, threading, time
    from scratchkeeper import stopping

    stop = threading.Event()
    if sys.argv[1] == "plain":  # Python's own handling, without this module
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    else:
        stopping.on_stop_signals(stop.set)
    if sys.argv[1] == "lost":
        # the Python-level handler never runs (what CI once saw); the C handler stays, and
        # still writes the signal's number to the wakeup socket
        signal.signal(signal.SIGTERM, lambda *_: None)
    threading.Timer(0.2, lambda: signal.pthread_kill(threading.get_ident(),
                                                     signal.SIGTERM)).start()
    began = time.monotonic()
    if sys.argv[1] == "plain":
        stop.wait(float(sys.argv[2]))
    else:
        stopping.sleep(stop, float(sys.argv[2]) if sys.argv[2] != "forever" else None)
    print(f"{stop.is_set()} {time.monotonic() - began:.2f}")
""")


def _run(how: str, seconds: str) -> tuple[bool, float]:
    out = subprocess.run([sys.executable, "-c", SCRIPT, how, seconds], capture_output=True,
                         text=True, timeout=60, check=True).stdout.split()
    return out[0] == "True", float(out[1])


def test_a_plain_wait_misses_a_signal_taken_by_another_thread():
    """What the module is for: the handler waits until the main thread wakes on its own."""
    stopped, elapsed = _run("plain", "1.5")
    assert elapsed >= 1.4, elapsed
    assert stopped  # the handler ran, but only once the wait had run out


def test_sleep_sees_the_signal_within_a_slice():
    stopped, elapsed = _run("sliced", "60")
    assert stopped and elapsed < 0.2 + 3 * 0.5, elapsed


def test_sleep_forever_sees_the_signal_too():
    stopped, elapsed = _run("sliced", "forever")
    assert stopped and elapsed < 0.2 + 3 * 0.5, elapsed


def test_sleep_returns_false_when_the_time_is_up():
    import threading

    from scratchkeeper import stopping

    began = time.monotonic()
    assert stopping.sleep(threading.Event(), 0.3) is False
    assert 0.25 <= time.monotonic() - began < 1.0
    event = threading.Event()
    event.set()
    assert stopping.sleep(event, 60) is True


def test_sleep_stops_on_the_wakeup_socket_when_the_python_handler_never_runs():
    stopped, elapsed = _run("lost", "60")
    assert stopped and elapsed < 0.2 + 3 * 0.5, elapsed


def test_a_second_signal_does_not_run_the_action_again():
    script = textwrap.dedent("""
        import os, signal, threading
        from scratchkeeper import stopping

        calls = []
        stop = threading.Event()
        stopping.on_stop_signals(lambda: (calls.append(1), stop.set()))
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        stopping.sleep(stop, 5)
        stopping.sleep(threading.Event(), 0.6)  # a slice reads the wakeup socket too
        print(len(calls))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "1"


def test_the_action_runs_from_a_slice_not_inside_the_signal_handler():
    """A handler interrupts the main thread anywhere (in a log line, holding an event's lock):
    the stop's work waits for the next slice's end."""
    script = textwrap.dedent("""
        import os, signal, threading, traceback
        from scratchkeeper import stopping

        where = []
        stop = threading.Event()
        stopping.on_stop_signals(lambda: (where.extend(
            f.name for f in traceback.extract_stack()), stop.set()))
        os.kill(os.getpid(), signal.SIGTERM)  # its handler runs as this call returns
        print("before", stop.is_set())
        stopping.sleep(stop, 5)
        print("after", stop.is_set(), "sleep" in where)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split("\n")
    assert out[0] == "before False" and out[1] == "after True True", out
