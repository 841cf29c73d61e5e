"""Writing a fault's one-line text form (reading it back is ``_textform``'s job).

    oom@lightning.training_step rank=1 step=3
    raise@lightning.load_checkpoint rank=1 run=2

Values are JSON, or bare words; fields at their defaults are left out.
"""

from __future__ import annotations

import json
import re
from dataclasses import MISSING, fields
from typing import Any

BARE = re.compile(r"^[A-Za-z0-9_.:,\-]+$")
TRIGGER_DEFAULTS: dict[str, Any] = {
    "rank": None,
    "step": None,
    "nth": None,
    "times": 1,
    "run": None,
}


def encode_value(value: Any) -> str:
    if value is None:
        return "*"
    if isinstance(value, str) and BARE.match(value) and not _is_json(value):
        return value
    if isinstance(value, tuple):
        value = list(value)
    return json.dumps(value, separators=(",", ":"))


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def fault_to_text(fault: Any) -> str:
    parts = [f"{fault.kind}@{fault.site}"]
    for name, default in TRIGGER_DEFAULTS.items():
        value = getattr(fault, name)
        if value != default:
            parts.append(f"{name}={encode_value(value)}")
    defaults = {f.name: f.default for f in fields(fault) if f.default is not MISSING}
    for name, value in fault.params().items():
        if name not in defaults or defaults[name] != value:
            parts.append(f"{name}={encode_value(value)}")
    return " ".join(parts)
