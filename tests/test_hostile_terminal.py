"""Hostile strings against a real terminal: a publisher puts escape sequences, a bidi override and
Rich markup in every string field of every kind of frame; the monitor, in tmux, visits every view,
and the bytes the terminal received (tmux pipe-pane) hold none of them, only their escaped text."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import zmq
from hostile_strings import FORBIDDEN, SOURCES, frames, write_recording
from patience import HANG_GUARD_S
from tmux_pane import screen, send, wait_for, wait_gone

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")

ROOT = Path(__file__).resolve().parent.parent


def _publish(sock: zmq.Socket, stop: threading.Event) -> None:
    i = 0
    while not stop.is_set():
        for src, algorithm in SOURCES:
            for f in frames(src, 5 * i, time.time(), i, algorithm):
                sock.send(f)
        i += 1
        stop.wait(0.2)


def test_every_view_shows_hostile_wire_strings_escaped_and_sends_the_terminal_none(tmp_path: Path) -> None:
    sock = zmq.Context.instance().socket(zmq.PUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind("tcp://127.0.0.1:0")
    ep = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    stop = threading.Event()
    pub = threading.Thread(target=_publish, args=(sock, stop), daemon=True)
    pub.start()
    raw = tmp_path / "pane.bytes"
    session = f"e3t-{uuid.uuid4().hex[:8]}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "200", "-y", "60", "sh"], check=True)

    def back_to_main() -> None:
        send(session, "Escape")
        wait_for(session, r"latest proposals rid")  # the main screen: the next key is its

    try:
        # capture from before the monitor starts: every byte it ever writes to the terminal
        subprocess.run(["tmux", "pipe-pane", "-o", "-t", session, f"cat >> {raw}"], check=True)
        subprocess.run(["tmux", "set-option", "-t", session, "allow-rename", "on"], check=False)
        # pytest exports COLUMNS/LINES for its own output, and Textual would take them over the pane size
        send(
            session,
            f"env -u COLUMNS -u LINES {sys.executable} -m eagle3_top.tui.cli "
            f"--manifest {ROOT}/examples/demo-manifest.json {ep}; echo EXITED $?",
            "Enter",
        )
        # main screen: sources table, spec panel, findings, proposals (rids), health (engine error)
        wait_for(session, r"evil\\x1b\]0;pwned\\x07\\x1b\[6n\\x1b\]52;c;")
        wait_for(session, r"ENGINE FAILED: .*\\x1b")
        wait_for(session, r"rq1\\x1b\[6n")  # a proposal row
        for _ in SOURCES:  # the other source: its unknown algorithm in the spec panel
            if "ALGO\\x1b" in screen(session):
                break
            send(session, "Tab")
            time.sleep(1.0)
        wait_for(session, r"ALGO\\x1b\]0;pwned")
        # requests view: every rid escaped, the markup one shown as text
        send(session, "Enter")
        wait_for(session, r"rq0\\x1b\]0;pwned\\x07")
        wait_for(session, r"rq3\\u202e")
        wait_for(session, r"rq4\\x9b")
        wait_for(session, r"file:///etc/passwd\]x\[/link\]\[red\]\s+running")  # rq5's tail
        # a request's timeline: its rid in the header, its steps drawn
        send(session, "Enter")
        wait_for(session, r"(?s)request rq.*step by step")
        send(session, "Escape")
        wait_for(session, r"state\s+tokens")
        back_to_main()
        # findings: texts made from the hello's strings
        send(session, "f")
        wait_for(session, r"(?s)LAYER_IDS_NOT_READ.*engine\\x1b\]0;pwned")
        back_to_main()
        send(session, "g")  # plots: the sources named in the legend
        wait_for(session, r"accept length per second.*\[red\]")
        back_to_main()
        send(session, "F")  # fleet: sources, findings by code
        wait_for(session, r"on 1 of 2 sources: evil\\x1b")
        back_to_main()
        send(session, "/")  # the source picker lists the sources by name
        wait_for(session, r"filter: source, engine or model")
        send(session, "Escape")
        wait_gone(session, r"filter: source, engine or model")
        send(session, "?")
        wait_for(session, r"freeze the display")
        send(session, "Escape")
        wait_gone(session, r"freeze the display")
        send(session, "q")
        wait_for(session, r"EXITED 0")
        title = subprocess.run(
            ["tmux", "display-message", "-p", "-t", session, "#{pane_title}"], capture_output=True, text=True
        ).stdout
    finally:
        subprocess.run(["tmux", "pipe-pane", "-t", session], capture_output=True)  # closes the capture
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        stop.set()
        pub.join(2)
        sock.close(0)
    got = raw.read_bytes()
    assert b"\\x1b]0;pwned" in got, "the capture holds what the monitor drew"
    leaked = {name: got.count(seq) for name, seq in FORBIDDEN.items() if seq in got}
    assert not leaked, leaked
    assert "pwned" not in title, title


def test_text_outputs_of_a_hostile_recording_send_no_escape_sequence(tmp_path: Path) -> None:
    """`--once`, `dump`, `check` and `recording info`, text and JSON, on a recording whose every
    string (the endpoint it was recorded from too) is hostile: what they print names the strings,
    escaped, and holds none of the sequences."""
    rec = str(tmp_path / "hostile.mcap")
    write_recording(rec)
    manifest = str(ROOT / "examples/demo-manifest.json")
    runs = (
        (["--replay", rec, "--once", "--manifest", manifest], 0),
        (["--replay", rec, "--once", "--json"], 0),
        (["dump", rec], 0),
        (["dump", rec, "--json"], 0),
        (["check", "--replay", rec, "--manifest", manifest], 1),
        (["check", "--replay", rec, "--json"], 1),
        (["recording", "info", rec], 0),
        (["recording", "info", rec, "--json"], 0),
    )
    for args, rc in runs:
        p = subprocess.run(
            [sys.executable, "-m", "eagle3_top.tui.cli", *args], capture_output=True, timeout=HANG_GUARD_S
        )
        out = p.stdout + p.stderr
        assert p.returncode == rc, (args, out[-2000:])
        assert b"x1b]0;pwned" in out, (args, "the hostile strings are named, escaped")
        leaked = {name: out.count(seq) for name, seq in FORBIDDEN.items() if seq in out}
        assert not leaked, (args, leaked)


async def test_a_table_cell_is_text_never_markup() -> None:
    """Every table of the monitor is a GrowingTable: a str cell holding Rich markup shows as written
    (a DataTable would style it, or send the terminal a hyperlink), added or updated."""
    from conftest import screen_text, wait_until
    from eagle3_top.tui.growing_table import GrowingTable
    from textual.app import App, ComposeResult

    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield GrowingTable()

    app = One()
    async with app.run_test(size=(100, 10)) as pilot:
        table = app.query_one(GrowingTable)
        table.add_column("cell", key="cell")
        table.add_row("[link=file:///etc/passwd]x[/link][red]r", key="a")
        await wait_until(pilot, lambda: "[link=file:///etc/passwd]x[/link][red]r" in screen_text(app))
        table.update_cell("a", "cell", "[b]bold[/b]", update_width=True)
        await wait_until(pilot, lambda: "[b]bold[/b]" in screen_text(app))
