"""The timeline page of a real 2-rank failure, rendered by a real browser (headless
Chromium): the screenshot is not blank, and the DOM has a lane per rank and the labels."""

from __future__ import annotations

import html
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest

import chaoslight

BROWSER = next(
    (
        found
        for name in ("chromium", "chromium-browser", "google-chrome")
        if (found := shutil.which(name))
    ),
    None,
)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        BROWSER is None,
        reason="no chromium, chromium-browser or google-chrome on PATH: the timeline's browser "
        "test needs one (Debian: apt-get install chromium; CI installs it in .ci/run)",
    ),
]

EXAMPLE = f"{Path(__file__).resolve().parents[1]}/examples/ddp_train.py:train"
FAULT = "raise@lightning.training_step rank=1 step=1"
WIDTH, HEIGHT = 1280, 720


@pytest.fixture(scope="module")
def page(world2: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The timeline of a real traced run in which the fault fails rank 1, and its verdict."""
    outcome = world2.run(EXAMPLE, FAULT, timeout=20, trace=True)
    assert outcome.status == "failed", outcome.report()
    verdict = chaoslight.judge(outcome)
    path = tmp_path_factory.mktemp("timeline") / "timeline.html"
    outcome.to_html(path, verdict_text=verdict.reason, replay_command="chaoslight replay f.json")
    return path, verdict.reason


def browse(path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium on the page (no sandbox: CI containers run as root)."""
    assert BROWSER is not None
    command = [
        BROWSER,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={path.parent / 'profile'}",
        f"--window-size={WIDTH},{HEIGHT}",
        *options,
        path.as_uri(),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)


def test_screenshot_is_not_blank(page: tuple[Path, str]) -> None:
    """The rendered page has the many colours of lanes, spans and markers, not a blank one."""
    path, _ = page
    shot = path.parent / "timeline.png"
    result = browse(path, f"--screenshot={shot}")
    assert shot.exists(), result.stderr[-2000:]
    width, colours = png_colours(shot.read_bytes(), rows=HEIGHT)
    assert width == WIDTH
    assert len(colours) >= 12, sorted(colours)[:20]


def test_dom_has_a_lane_per_rank_and_the_labels(page: tuple[Path, str]) -> None:
    """The browser's DOM holds two lanes, the fault, a collective label and the verdict."""
    path, reason = page
    dom = browse(path, "--dump-dom").stdout
    assert len(re.findall(r'<g class="lane"', dom)) == 2, dom[:2000]
    assert FAULT in dom
    assert re.search(r"#\d+ (all_reduce|barrier|broadcast)", dom)
    verdict = re.search(r'<p id="verdict">(.*?)</p>', dom, re.S)
    assert verdict is not None and html.escape(reason[:80], quote=False) in verdict.group(1)
    assert "rank 1 raised: RuntimeError: injected by chaoslight" in dom


def png_colours(data: bytes, rows: int) -> tuple[int, set[bytes]]:
    """The width and the distinct colours of the first ``rows`` rows of an 8-bit RGB or
    RGBA PNG, decoded with the standard library (zlib and the five scanline filters)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    position, compressed = 8, b""
    width = height = channels = 0
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position : position + 8])
        body = data[position + 8 : position + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and not interlace, (depth, colour)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            compressed += body
        position += 12 + length
    raw = zlib.decompress(compressed)
    stride = width * channels
    previous = bytearray(stride)
    colours: set[bytes] = set()
    for y in range(min(rows, height)):
        start = y * (stride + 1)
        line = unfilter(
            raw[start], bytearray(raw[start + 1 : start + 1 + stride]), previous, channels
        )
        colours.update(bytes(line[x : x + 3]) for x in range(0, stride, channels * 4))
        previous = line
    return width, colours


def unfilter(kind: int, line: bytearray, above: bytearray, bpp: int) -> bytearray:
    """Undo one scanline's PNG filter (None, Sub, Up, Average, Paeth)."""
    if kind == 2:
        return bytearray((a + b) & 255 for a, b in zip(line, above, strict=True))
    for i in range(len(line)):
        left = line[i - bpp] if i >= bpp else 0
        if kind == 1:
            line[i] = (line[i] + left) & 255
        elif kind == 3:
            line[i] = (line[i] + (left + above[i]) // 2) & 255
        elif kind == 4:
            corner = above[i - bpp] if i >= bpp else 0
            guess = left + above[i] - corner
            near = min(
                (abs(guess - left), 0, left),
                (abs(guess - above[i]), 1, above[i]),
                (abs(guess - corner), 2, corner),
            )
            line[i] = (line[i] + near[2]) & 255
    return line
