"""The suite's guard (tests/conftest.py, tests/process_state.py): a test that leaves its
process changed fails, says what it changed, and the next test finds it put back."""

from __future__ import annotations

import faulthandler
import re
import shutil
import signal
import textwrap
from pathlib import Path

import pytest
from process_state import SignalState, handler_of, raw_handler

TESTS = Path(__file__).resolve().parent

LEAKY = """
import os
import signal
import subprocess
import sys
import threading


def test_leaks_a_sigint_handler():
    signal.signal(signal.SIGINT, lambda signum, frame: None)


def test_finds_sigint_raising_again():
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_leaks_faulthandler_removed_in_c():
    signal.signal(signal.SIGSEGV, signal.SIG_DFL)  # what Lightning's teardown does


def test_leaks_an_environment_variable_and_the_working_directory(tmp_path):
    os.environ["LEAKED_BY_A_TEST"] = "1"
    os.chdir(tmp_path)


def test_finds_them_put_back():
    assert "LEAKED_BY_A_TEST" not in os.environ and os.getcwd() == ROOT


def test_leaks_a_thread():
    threading.Thread(target=RELEASE.wait, args=(30,), name="leaked-thread").start()


def test_leaks_a_child():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_is_clean():
    RELEASE.set()  # the thread may end now


ROOT = os.getcwd()
RELEASE = threading.Event()
"""


@pytest.mark.slow
def test_the_guard_fails_each_test_that_leaks_and_puts_it_back(pytester: pytest.Pytester) -> None:
    """Run with the suite's own guard, tests that leak a SIGINT handler, faulthandler's C
    handler, a variable and the working directory, a thread, a child: each errors naming
    what it left; the tests after them find it put back; a clean one passes."""
    conftest = (TESTS / "conftest.py").read_text()
    # A thread or child gets half a second here to end before it is named, not seconds.
    pytester.makeconftest(conftest + "\nimport process_state\nprocess_state.SETTLE_S = 0.5\n")
    shutil.copy(TESTS / "process_state.py", pytester.path / "process_state.py")
    pytester.makepyfile(test_leaky=textwrap.dedent(LEAKY))
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=8, errors=5)
    errors = {
        "test_leaks_a_sigint_handler": "SIGINT's handler default_int_handler -> "
        "test_leaks_a_sigint_handler.<locals>.<lambda>",
        "test_leaks_faulthandler_removed_in_c": "SIGSEGV's handler in C changed",
        "test_leaks_an_environment_variable_and_the_working_directory": "environment "
        "LEAKED_BY_A_TEST=None -> '1'",
        "test_leaks_a_thread": "non-daemon thread 'leaked-thread' still running",
        "test_leaks_a_child": "still running",
    }
    text = result.stdout.str()
    for test, says in errors.items():
        assert f"ERROR at teardown of {test} " in text, text
        assert says in text, text
    # Each error is the guard's own (the short summary under them may repeat the message or
    # cut it, as the terminal's width decides: only the sections above it are counted).
    errors_section = text.split("short test summary info")[0]
    sections = re.split(r"_+ ERROR at teardown of \S+ _+", errors_section)[1:]
    assert len(sections) == 5, text
    for section in sections:
        assert "AssertionError: the test changed the process and left it so" in section, section
    assert "working directory" in text


def test_signal_state_puts_back_a_handler_python_never_saw() -> None:
    """faulthandler's SIGSEGV handler is set in C: Python's record says SIG_DFL. Setting
    SIG_DFL again (as Lightning's teardown does) removes it; it is seen and put back."""
    assert faulthandler.is_enabled()  # pytest's
    before = SignalState()
    signal.signal(signal.SIGSEGV, signal.SIG_DFL)
    assert handler_of(raw_handler(signal.SIGSEGV)) != handler_of(before.raw[signal.SIGSEGV])
    assert before.put_back() == ["SIGSEGV's handler in C changed (Python's stayed SIG_DFL)"]
    assert handler_of(raw_handler(signal.SIGSEGV)) == handler_of(before.raw[signal.SIGSEGV])
