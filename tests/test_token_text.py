"""Tokens as text: a real tokenizer.json (written by the tokenizers library) read with
``--tokenizer`` or found beside the model a source's hello names; the proposals panel, ``--once``
and ``--json`` draw the pieces, accepted green and rejected red; ids when there is no tokenizer."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import HANG_GUARD_S, screen_text, wait_until
from eagle3_top.tracer.reader.recording import RecordingWriter
from eagle3_top.tracer.reader.replay import Timeline
from eagle3_top.tracer.schema import HELLO, STEP, Hello, encode, step_body
from eagle3_top.tracer.serving.publisher import Publisher
from eagle3_top.tui.app import Eagle3TopApp
from eagle3_top.tui.replay_app import ReplayApp
from eagle3_top.tui.token_spans import ACCEPTED_STYLE, REJECTED_STYLE
from eagle3_top.tui.token_text import MAX_PIECE, TokenizerError, TokenText
from rich.text import Text
from stream_samples import T0_NS, hello
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

CLI = [sys.executable, "-m", "eagle3_top.tui.cli"]
WORDS = [
    "<s>",
    "The",
    " quick",
    " brown",
    " fox",
    "\n",
    "\t",
    "jumps",
    "\x1b[2J",
    "supercalifragilistic",
    "!",
]
# one step, two requests: the first accepts " quick" " brown" and rejects " fox", bonus "!";
# the second rejects every draft, bonus "jumps"
DRAFT = [[1, 2, 3, 4], [7, 5, 6, 8]]
ACCEPT_LENS = [3, 1]
TOKENS = [2, 3, 10, 7]


def write_tokenizer(directory: Path, words: list[str] = WORDS) -> Path:
    """A WordLevel tokenizer.json, one word per id, saved by the tokenizers library itself."""
    directory.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<s>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path = directory / "tokenizer.json"
    tok.save(str(path))
    return path


def hello_at(target_path: str) -> Hello:
    h = hello()
    return dataclasses.replace(h, model=dataclasses.replace(h.model, target_path=target_path))


def the_step(i: int = 1) -> dict[str, object]:
    return step_body(
        step=i,
        rids=["req-a", "req-b"],
        draft=np.array(DRAFT, dtype=np.int32),
        accept_lens=np.array(ACCEPT_LENS, dtype=np.int32),
        tokens=np.array(TOKENS, dtype=np.int32),
    )


def write_recording(path: Path, target_path: str) -> str:
    """A hello naming ``target_path`` as the model directory, then the step above."""
    w = RecordingWriter(str(path), flush_interval_s=0.0)
    src, ep = "box:7:r0", "tcp://box:5557"
    w.add(encode(HELLO, src, 0, T0_NS / 1e9, hello_at(target_path).to_body()), ep, T0_NS)
    w.add(encode(STEP, src, 1, T0_NS / 1e9 + 0.1, the_step()), ep, T0_NS + 10**8)
    w.close()
    return str(path)


def spans_of(text: Text) -> dict[str, str]:
    """Each styled piece of a rich Text, by its characters: what colour the user sees it in."""
    return {text.plain[s.start : s.end]: str(s.style) for s in text.spans}


def proposals_text(app: Eagle3TopApp) -> Text:
    shown = app.proposals._shown
    assert isinstance(shown, Text)
    return shown


# -- the pieces ------------------------------------------------------------------------------------


def test_pieces_show_whitespace_and_controls_and_cut_long_ones(tmp_path: Path) -> None:
    tt = TokenText.load(str(write_tokenizer(tmp_path)))
    assert [tt.piece(i) for i in range(8)] == ["<s>", "The", "·quick", "·brown", "·fox", "⏎", "⇥", "jumps"]
    assert tt.piece(8) == "␛[2J"  # an escape sequence in the file never reaches the terminal
    assert tt.piece(9) == "supercalifr…" and len(tt.piece(9)) == MAX_PIECE
    assert tt.piece(11) == "<11>" and tt.piece(-1) == "<-1>"  # outside the vocabulary


def test_sentencepiece_and_byte_level_pieces_keep_their_space_and_bytes(tmp_path: Path) -> None:
    # a Llama-2-like Metaspace vocabulary: decoding one token alone drops its leading space
    sp = Tokenizer(models.WordLevel({"<unk>": 0, "▁Hello": 1, "world": 2, "<0x0A>": 3}, unk_token="<unk>"))
    sp.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()])
    sp.save(str(tmp_path / "sp.json"))
    tt = TokenText.load(str(tmp_path / "sp.json"))
    assert [tt.piece(i) for i in (1, 2, 3)] == ["·Hello", "world", "⏎"]
    # GPT-2 byte level: "Ġ" is a space; "â" alone is the first byte of a three-byte character
    bl = Tokenizer(models.WordLevel({"<unk>": 0, "Ġthe": 1, "â": 2}, unk_token="<unk>"))
    bl.decoder = decoders.ByteLevel()
    bl.save(str(tmp_path / "bl.json"))
    tt = TokenText.load(str(tmp_path / "bl.json"))
    assert [tt.piece(1), tt.piece(2)] == ["·the", "\\xe2"]


def test_loading_failures_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.json").write_text('{"hello": 1}')
    (tmp_path / "binary.json").write_bytes(b"\x00\xff" * 100)
    cases = {
        str(tmp_path / "nope"): "no such file or directory",
        str(tmp_path / "empty"): "no tokenizer.json in this directory",
        str(tmp_path / "notes.json"): "not a tokenizer.json",
        str(tmp_path / "binary.json"): "not a tokenizer.json",
    }
    for path, why in cases.items():
        with pytest.raises(TokenizerError) as err:
            TokenText.load(path)
        assert why in str(err.value) and path in str(err.value) and "\n" not in str(err.value)
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if not installed
    with pytest.raises(TokenizerError, match=r"install eagle3-top\[text\]"):
        TokenText.load(str(write_tokenizer(tmp_path / "model")))


# -- the command line ------------------------------------------------------------------------------


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=HANG_GUARD_S, env=env)


def test_a_bad_tokenizer_path_exits_2_with_one_line(tmp_path: Path) -> None:
    rec = write_recording(tmp_path / "rec.mcap", str(tmp_path / "model"))
    (tmp_path / "notes.json").write_text("[]")
    for args in (
        ["--replay", rec, "--once"],
        ["--replay", rec, "--json"],
        ["--once", "-i", "0.05"],
        [],  # the live monitor: refused before it needs a terminal
    ):
        for bad in (str(tmp_path / "nope"), str(tmp_path / "notes.json")):
            r = run(*args, "--tokenizer", bad)
            lines = r.stderr.strip().splitlines()
            assert r.returncode == 2 and len(lines) == 1, (args, r.stderr)
            assert lines[0].startswith("eagle3-top: --tokenizer ") and bad in lines[0]
            assert not r.stdout


def test_once_and_json_draw_text_with_a_tokenizer_and_ids_without(tmp_path: Path) -> None:
    model = tmp_path / "model"
    write_tokenizer(model)
    found = write_recording(tmp_path / "found.mcap", str(model))  # auto: beside the model
    away = write_recording(tmp_path / "away.mcap", "/on/the/gpu/box")

    text = run("--replay", found, "--once").stdout
    assert "latest proposals (as text)" in text
    assert "req-a [2] The │ ·quick ·brown ✗·fox → !" in text
    assert "req-b [0] jumps │ ✗⏎ ✗⇥ ✗␛[2J → jumps" in text
    given = run("--replay", away, "--once", "--tokenizer", str(model)).stdout
    assert "req-a [2] The │ ·quick ·brown ✗·fox → !" in given
    ids = run("--replay", away, "--once").stdout
    assert "latest proposals (ids)" in ids and "req-a [2] 1 │ 2 3 ✗4 → 10" in ids

    (row,) = [
        p
        for p in json.loads(run("--replay", found, "--json").stdout)["sources"][0]["proposals"]
        if p["rid"] == "req-a"
    ]
    assert row["proposals"] == [2, 3, 4] and row["proposals_text"] == ["·quick", "·brown", "·fox"]
    assert (row["root_text"], row["bonus_text"]) == ("The", "!")
    plain = json.loads(run("--replay", away, "--json").stdout)["sources"][0]["proposals"][0]
    assert plain["proposals"] == [2, 3, 4] and "proposals_text" not in plain


# -- the screen ------------------------------------------------------------------------------------


async def test_replay_with_tokenizer_draws_pieces_accepted_green_rejected_red(tmp_path: Path) -> None:
    model = tmp_path / "model"
    write_tokenizer(model)
    rec = write_recording(tmp_path / "rec.mcap", "/on/the/gpu/box")
    app = ReplayApp(Timeline(rec, speed=None), refresh_hz=20, tokenizer=TokenText.load(str(model)))
    async with app.run_test(size=(120, 34)) as pilot:
        await wait_until(pilot, lambda: "·quick" in screen_text(app), what="the proposals as text")
        screen = screen_text(app)
        assert "The │ ·quick ·brown ·fox → !" in screen
        assert "jumps │ ⏎ ⇥ ␛[2J → jumps" in screen
        styles = spans_of(proposals_text(app))
        assert styles["·quick"] == styles["·brown"] == ACCEPTED_STYLE
        assert styles["·fox"] == styles["⏎"] == styles["⇥"] == styles["␛[2J"] == REJECTED_STYLE


async def test_replay_without_tokenizer_draws_ids(tmp_path: Path) -> None:
    rec = write_recording(tmp_path / "rec.mcap", "/on/the/gpu/box")
    app = ReplayApp(Timeline(rec, speed=None), refresh_hz=20)
    async with app.run_test(size=(120, 34)) as pilot:
        await wait_until(pilot, lambda: "req-a" in screen_text(app), what="the proposals")
        await pilot.pause(0.2)  # a tokenizer looked for in the background would have come by now
        screen = screen_text(app)
        assert "1 │ 2 3 4 → 10" in screen and "ids:" not in screen  # a model not on this machine: silent
        styles = spans_of(proposals_text(app))
        assert styles["2"] == ACCEPTED_STYLE and styles["4"] == REJECTED_STYLE


async def test_a_broken_tokenizer_beside_the_model_falls_back_to_ids_and_says_so(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer.json").write_text("{not json")
    rec = write_recording(tmp_path / "rec.mcap", str(model))
    app = ReplayApp(Timeline(rec, speed=None), refresh_hz=20)
    async with app.run_test(size=(200, 34)) as pilot:
        await wait_until(pilot, lambda: "not a tokenizer.json" in screen_text(app), what="the reason")
        header = next(line for line in screen_text(app).splitlines() if "latest proposals" in line)
        assert "ids: " in header and str(model) in header
        assert "1 │ 2 3 4 → 10" in screen_text(app)


async def test_live_source_gets_the_tokenizer_beside_its_model(publisher: Publisher, tmp_path: Path) -> None:
    model = tmp_path / "model"
    write_tokenizer(model)
    app = Eagle3TopApp([publisher.bound_endpoint], refresh_hz=20)
    async with app.run_test(size=(120, 34)) as pilot:
        publisher.set_hello(hello_at(str(model)))
        await wait_until(pilot, lambda: app.feed.snapshot().sources, what="the hello")
        publisher.publish(STEP, the_step())
        await wait_until(pilot, lambda: "·quick" in screen_text(app), what="the proposals as text")
        assert "The │ ·quick ·brown ·fox → !" in screen_text(app)
        styles = spans_of(proposals_text(app))
        assert styles["·brown"] == ACCEPTED_STYLE and styles["·fox"] == REJECTED_STYLE


# -- the built-in engine ---------------------------------------------------------------------------


def test_the_toy_engine_ships_the_tokenizer_of_its_language() -> None:
    from eagle3_top.hooks.toy.paths import target_dir
    from eagle3_top.hooks.toy.tokenizer import build_tokenizer
    from eagle3_top.hooks.toy.workload import BOS, COUNT_LO, DIGIT0, GRAM_HI, PLUS, SEP

    shipped = Tokenizer.from_file(os.path.join(target_dir(), "tokenizer.json"))
    assert shipped.to_str() == build_tokenizer().to_str()  # the committed file is the generator's
    tt = TokenText.load(target_dir())  # the directory the toy's hello names as its model
    assert [tt.piece(t) for t in (BOS, SEP, PLUS, DIGIT0 + 7, COUNT_LO, GRAM_HI - 1)] == [
        "<bos>", "|", "+", "7", "c20", "g255",
    ]  # fmt: skip
    assert tt.vocab_size == 256
