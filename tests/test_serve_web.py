"""``eagle3-top serve-web``: the real monitor in a real (headless) browser, through textual-serve;
and the refusals that come before anything binds."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from conftest import HANG_GUARD_S, PATIENCE_S
from eagle3_top.tui.commands.parent_watch import GRACE_S, POLL_S
from eagle3_top.tui.commands.web_server import QUIT_GRACE_S
from headless_chromium import CHROMIUM, Chromium
from stream_samples import write_session

CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]

# textual.js keeps its xterm.js Terminal inside its bundle. Its wrapper object is the one that
# gets a `websocket_url`: catch that assignment and keep the object, to read what the terminal shows.
CATCH_TERMINAL = """
Object.defineProperty(Object.prototype, "websocket_url", {
  configurable: true,
  set(value) {
    Object.defineProperty(this, "websocket_url", {value, writable: true, configurable: true});
    window.__textual = this;
  },
});
"""
TERMINAL_TEXT = """(() => {
  const t = window.__textual && window.__textual.terminal;
  if (!t) return null;
  const b = t.buffer.active, rows = [];
  for (let i = 0; i < b.length; i++) rows.push(b.getLine(i).translateToString(true));
  return rows.join("\\n");
})()"""


FADED_IN = "getComputedStyle(document.querySelector('.textual-terminal')).opacity === '1'"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(proc: subprocess.Popen[str], port: int, timeout: float = PATIENCE_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"serve-web exited: {proc.communicate()[0]}"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError("serve-web did not listen")


def monitors_of(pid: int) -> list[int]:
    """The processes ``pid`` started (the monitors, one per browser tab)."""
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


@pytest.fixture
def recording(tmp_path: Path) -> str:
    path = str(tmp_path / "session.mcap")
    write_session(path)
    return path


@pytest.fixture
def served(recording: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    port = free_port()
    proc = subprocess.Popen(
        [*CLI, "serve-web", "--port", str(port), "--replay", recording],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_listening(proc, port)
        yield proc, port
    finally:
        left = monitors_of(proc.pid)
        proc.terminate()
        try:
            proc.wait(10)
        finally:
            for pid in left:  # a failed test leaves no monitor behind
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.kill()


@pytest.fixture
def chromium() -> None:
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")


async def test_browser_shows_the_monitor(
    chromium: None, served: tuple[subprocess.Popen[str], int], tmp_path: Path
) -> None:
    from PIL import Image

    proc, port = served
    async with Chromium() as page:
        await page.send("Page.addScriptToEvaluateOnNewDocument", source=CATCH_TERMINAL)
        await page.send("Page.navigate", url=f"http://127.0.0.1:{port}/")
        text = ""
        deadline = time.monotonic() + PATIENCE_S
        # The replay's status line and its source's row: the monitor itself has drawn.
        while not ("eagle3-top replay session.mcap" in text and "box:7:r0" in text):
            assert time.monotonic() < deadline, f"the monitor never drew in the page:\n{text}"
            await asyncio.sleep(0.1)
            text = await page.evaluate(TERMINAL_TEXT) or ""
        # textual.js fades the terminal in over the splash screen (0.3 s).
        while await page.evaluate(FADED_IN) is not True:
            assert time.monotonic() < deadline, "the terminal never faded in"
            await asyncio.sleep(0.05)
        png = await page.screenshot()
        (tmp_path / "serve-web.png").write_bytes(png)
        assert len(monitors_of(proc.pid)) == 1, "one monitor for the one tab"

        # Keys typed in the page reach the monitor: space pauses the replay.
        await page.evaluate("window.__textual.terminal.focus()")
        for kind in ("keyDown", "keyUp"):
            await page.send("Input.dispatchKeyEvent", type=kind, key=" ", code="Space", text=" ")
        while "⏸" not in text.splitlines()[0]:
            assert time.monotonic() < deadline, f"space did not pause the replay:\n{text}"
            await asyncio.sleep(0.1)
            text = await page.evaluate(TERMINAL_TEXT) or ""

    # Drawn, not the splash (a dotted dark page, a logo in the middle: about 20 colours at its top
    # and bottom edges): the status line across the top, the key bar across the bottom, as text.
    image = Image.open(io.BytesIO(png)).convert("RGB")
    width, height = image.size
    for edge, box in (("status line", (0, 0, width, 16)), ("key bar", (0, height - 60, width, height))):
        colours = image.crop(box).getcolors(maxcolors=1 << 20) or []
        assert len(colours) > 100, f"the {edge} is not drawn: {len(colours)} colours"

    # The tab is gone: its monitor goes too, and the server still runs.
    deadline = time.monotonic() + PATIENCE_S
    while monitors_of(proc.pid):
        assert time.monotonic() < deadline, "the monitor outlived its browser tab"
        await asyncio.sleep(0.1)
    assert proc.poll() is None


async def test_a_tab_closed_at_once_takes_its_monitor_along(
    served: tuple[subprocess.Popen[str], int],
) -> None:
    # What textual.js sends on opening (a size, a ping), then the tab closes while its monitor is
    # still starting: Textual's web driver loses that quit, and without the server's grace-period
    # kill the monitor would run on, with nobody to see or stop it.
    proc, port = served
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(f"http://127.0.0.1:{port}/ws?width=155&height=42") as ws:
            await ws.send_json(["resize", {"width": 155, "height": 50}])
            await ws.send_json(["ping", "1"])
    deadline = time.monotonic() + QUIT_GRACE_S + 5
    while monitors_of(proc.pid):
        assert time.monotonic() < deadline, "the monitor outlived its browser tab"
        await asyncio.sleep(0.1)
    assert proc.poll() is None


async def test_stopping_the_server_stops_its_monitors(served: tuple[subprocess.Popen[str], int]) -> None:
    proc, port = served
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(f"http://127.0.0.1:{port}/ws?width=120&height=30") as ws:
            await ws.send_json(["resize", {"width": 120, "height": 30}])
            await ws.receive_bytes(timeout=PATIENCE_S)  # the monitor has started drawing
            monitors = monitors_of(proc.pid)
            proc.send_signal(signal.SIGINT)  # Ctrl+C
            while not ws.closed:  # what the browser sees: the drawing, then the end
                await ws.receive(timeout=QUIT_GRACE_S + 5)
    assert await asyncio.to_thread(proc.wait, 10) == 0
    assert len(monitors) == 1 and not Path(f"/proc/{monitors[0]}").exists(), "a monitor outlived the server"


async def test_a_server_killed_outright_leaves_no_monitor(served: tuple[subprocess.Popen[str], int]) -> None:
    proc, port = served
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(f"http://127.0.0.1:{port}/ws?width=120&height=30") as ws:
            await ws.send_json(["resize", {"width": 120, "height": 30}])
            await ws.receive_bytes(timeout=PATIENCE_S)
            monitors = monitors_of(proc.pid)
            proc.kill()  # no quit for anyone
            proc.wait()
    assert len(monitors) == 1
    deadline = time.monotonic() + POLL_S + GRACE_S + 3
    try:
        while Path(f"/proc/{monitors[0]}").exists():
            assert time.monotonic() < deadline, "the monitor outlived its server"
            await asyncio.sleep(0.1)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(monitors[0], signal.SIGKILL)


def serve_web(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "serve-web", *args], capture_output=True, text=True, timeout=HANG_GUARD_S)


def test_non_loopback_host_needs_public(recording: str) -> None:
    out = serve_web("--host", "0.0.0.0", "--port", str(free_port()), "--replay", recording)
    assert out.returncode == 2
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and "--public" in lines[0] and "ssh -N -L" in lines[0], out.stderr


@pytest.mark.parametrize(
    "args, says",
    [
        (["--replay", "REC", "--speed", "7000"], "argument --speed"),
        (["--replay", "MISSING.mcap"], "MISSING.mcap: No such file or directory"),
        (["--replay", "REC", "--once"], "--once"),
        (["statuz"], "'statuz' is not a command nor an endpoint"),
    ],
)
def test_bad_monitor_arg_is_one_line_before_binding(recording: str, args: list[str], says: str) -> None:
    out = serve_web("--port", str(free_port()), *(recording if a == "REC" else a for a in args))
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and says in out.stderr, out.stderr
    assert out.stdout == ""  # no banner: nothing was served


def test_port_in_use_is_one_line(recording: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = serve_web("--port", str(port), "--replay", recording)
    assert out.returncode == 2
    assert (
        out.stderr
        == f"eagle3-top serve-web: port {port} on 127.0.0.1 is in use; choose another with --port\n"
    )
