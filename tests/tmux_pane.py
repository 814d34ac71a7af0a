"""A real terminal for end-to-end tests: a tmux pane, read back from the screen."""

from __future__ import annotations

import re
import subprocess
import time

from conftest import PATIENCE_S


def screen(session: str) -> str:
    return subprocess.run(
        ["tmux", "capture-pane", "-t", session, "-p"], capture_output=True, text=True
    ).stdout


def wait_for(session: str, pattern: str, timeout: float = PATIENCE_S) -> str:
    """The screen once ``pattern`` is on it; ``timeout`` only bounds a test that would hang."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = screen(session)
        if re.search(pattern, text):
            return text
        time.sleep(0.5)
    raise AssertionError(f"{pattern!r} not on screen after {timeout}s:\n{text}")


def send(session: str, *keys: str) -> None:
    subprocess.run(["tmux", "send-keys", "-t", session, *keys], check=True)


def wait_gone(session: str, pattern: str, timeout: float = PATIENCE_S) -> str:
    """The screen once ``pattern`` has left it (a dialog closed)."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = screen(session)
        if not re.search(pattern, text):
            return text
        time.sleep(0.5)
    raise AssertionError(f"{pattern!r} still on screen after {timeout}s:\n{text}")
