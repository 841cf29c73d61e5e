"""World targets of tests/test_user_files.py, kept light: a rank imports only this module.

The user's model file lives in a folder named after the test process, the World's: each
rank finds it among its ancestors (its parent, or its fork server's parent).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import psutil
import torch

STATE = {"w": torch.arange(1000, dtype=torch.float32)}
USERS = Path(tempfile.gettempdir()) / "chaoslight-user-files"
TARGETS = f"{Path(__file__).resolve()}:"


def users_model(pid: int) -> Path:
    """The user's model.pt for the test process ``pid``: an absolute path, outside the World."""
    return USERS / str(pid) / "model.pt"


def test_process() -> int:
    """The nearest ancestor with a user's folder: the test process that made the World."""
    ancestor = psutil.Process().parent()
    while ancestor is not None and not (USERS / str(ancestor.pid)).is_dir():
        ancestor = ancestor.parent()
    assert ancestor is not None, f"no ancestor has a folder in {USERS}"
    return ancestor.pid


def resaves_the_users_model() -> int | None:
    """Rank 0 saves its state over the user's model.pt if that loads, and returns the size
    it found (a restart finding it damaged leaves it alone)."""
    if os.environ["RANK"] != "0":
        return None
    path = users_model(test_process())
    size = path.stat().st_size
    try:
        torch.load(path)
    except Exception:
        return size
    torch.save(STATE, path)
    return size
