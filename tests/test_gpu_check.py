"""benchmarks/gpu_check.py: without a GPU it says so and checks nothing; its harness runs on
CPU (``--cpu``), so the script a GPU run needs does not rot between lent GPUs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_check.py"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: run the script itself"),
]


def gpu_check(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(SCRIPT), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def test_without_a_gpu_it_checks_nothing_and_says_so() -> None:
    done = gpu_check()
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "gpu_check: no CUDA device here: nothing checked (--cpu runs the harness on CPU)\n"
    )


def test_its_in_process_checks_pass_on_cpu() -> None:
    """The checks that need no World (1-5) on CPU: ok, the CUDA-only one skipped."""
    done = gpu_check("--cpu", "--only", "1,2,3,4,5")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split(" | ") for line in done.stdout.splitlines() if line.startswith("| ")]
    results = {row[0].lstrip("| ")[0]: row[1] for row in rows[1:]}
    assert results == {"1": "ok", "2": "ok", "3": "skipped", "4": "ok", "5": "ok"}, done.stdout
