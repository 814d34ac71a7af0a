"""The rate speculation is compared with, measured from a recording of the same server decoding
without speculation (``--baseline-from FILE``): its committed tokens per second.

Such a server publishes every decode step as a step of width 1 (the input token as root, no drafts,
one committed token per request). The rate is the tokens of those steps over the span of the times
the server stamped on them: the steps after the first one, over first to last (the first step's
tokens were made before the span began). The server's own stamps, not the receive times: a receiver
that fell behind takes many steps in one batch under one receive time, and a loaded recorder made
the rate 6 - 8 % off that way. A stamp past any clock (over 10^299 s) falls back to the receive time. Steps
of any other width are speculative and not counted.

Several sources count together only as ranks of one server (one host, distinct ranks), summed over
the span they all ran; a tensor-parallel rank other than 0 verifies its replica's batch again and is
left out. Anything else is refused: the figure would not be one server's rate.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from eagle3_top.tracer.reader.recording import NotARecording, RecordingReader, UnsupportedRecording
from eagle3_top.tracer.schema import (
    HELLO,
    STEP,
    DecodeError,
    Hello,
    decode,
    printable,
    split_source_key,
    step_columns,
)

MIN_STEPS = 50  # fewer steps than this measure the noise of a few seconds, not a rate


class BaselineError(ValueError):
    """The file gives no baseline; the message says why in one line, naming the file."""


@dataclass(frozen=True)
class Baseline:
    tok_s: float  # committed tokens per second, summed over the sources
    steps: int  # width-1 steps in the span, over all sources
    span_s: float
    mean_batch: float  # requests per step: the load the baseline was measured at
    sources: tuple[str, ...]
    left_out: tuple[str, ...] = ()  # tensor-parallel ranks > 0 (their steps repeat rank 0's)

    def describe(self, path: str) -> str:
        """The one line that says what was taken."""
        label = "source" if len(self.sources) == 1 else "sources"
        out = (
            f"baseline {self.tok_s:,.1f} tok/s from {path} ({self.steps:,} steps over {self.span_s:.1f} s, "
            f"mean batch {self.mean_batch:.1f}, {label} {', '.join(self.sources)}"
        )
        if self.left_out:
            out += f"; left out tensor-parallel ranks {', '.join(self.left_out)}"
        return out + ")"


@dataclass
class _Source:
    times: list[int] = field(default_factory=list)  # the server's times (ns) of its width-1 steps
    tokens: list[int] = field(default_factory=list)  # committed tokens of each
    hello: Hello | None = None


def baseline_from_recording(path: str, min_steps: int = MIN_STEPS) -> Baseline:
    """The baseline a recording of a server without speculation gives; ``BaselineError`` otherwise."""
    sources, widths = _read(path)
    shown = printable(path, 300)
    if not sources:
        if widths:
            n = widths.most_common(1)[0][0]
            raise BaselineError(
                f"{shown}: its steps verify {n - 1} draft tokens: not a run without speculation; "
                "record the server with speculation off"
            )
        raise BaselineError(f"{shown}: no step events: record the server while it serves requests")
    used, left_out = _one_server(shown, sources)
    lo = max(sources[k].times[0] for k in used)
    hi = min(sources[k].times[-1] for k in used)
    steps = tokens = requests = 0
    for k in used:
        t = np.asarray(sources[k].times, dtype=np.int64)
        tok = np.asarray(sources[k].tokens, dtype=np.int64)
        inside = (t >= lo) & (t <= hi)
        steps += int(inside.sum())
        requests += int(tok[inside].sum())
        tokens += int(tok[inside & (t > lo)].sum())
    span_s = (hi - lo) / 1e9
    if steps < min_steps or span_s <= 0:
        together = " run at the same time" if len(used) > 1 else ""
        raise BaselineError(
            f"{shown}: {steps} steps without speculation{together}, too few to measure a rate "
            f"(at least {min_steps}); record longer"
        )
    return Baseline(tokens / span_s, steps, span_s, requests / steps, tuple(used), tuple(left_out))


def _read(path: str) -> tuple[dict[str, _Source], Counter[int]]:
    """Width-1 steps per source (in receive order), and how many steps of each other width."""
    sources: dict[str, _Source] = {}
    hellos: dict[str, Hello] = {}
    widths: Counter[int] = Counter()
    try:
        for rec in RecordingReader(path):
            try:
                ev = decode(rec.data)
                if ev.kind == HELLO:
                    hellos[ev.src] = Hello.from_body(ev.body)
                    continue
                if ev.kind != STEP:
                    continue
                n, accepted, carried = step_columns(ev.body)
            except DecodeError:
                continue  # a frame the monitor would not count either
            if n != 1:
                widths[n] += 1
            elif not accepted.any() and carried == accepted.size and carried:
                s = sources.setdefault(ev.src, _Source())
                stamped = ev.ts * 1e9
                s.times.append(int(stamped) if math.isfinite(stamped) else rec.log_time_ns)
                s.tokens.append(carried)
    except (NotARecording, UnsupportedRecording) as exc:
        raise BaselineError(str(exc)) from None
    except OSError as exc:
        raise BaselineError(f"{printable(path, 300)}: {exc.strerror or exc}") from None
    for key, s in sources.items():
        s.hello = hellos.get(key)
        if any(b < a for a, b in zip(s.times, s.times[1:], strict=False)):
            order = np.argsort(np.asarray(s.times), kind="stable")
            s.times = [s.times[i] for i in order]
            s.tokens = [s.tokens[i] for i in order]
    return sources, widths


def _one_server(shown: str, sources: dict[str, _Source]) -> tuple[list[str], list[str]]:
    """The sources to sum, and the tensor-parallel ranks left out; refuses sources of several servers."""
    keys = sorted(sources)
    if len(keys) > 1:
        parts = [split_source_key(k) for k in keys]
        hosts = {host for host, _, _ in parts}
        ranks = [rank for _, _, rank in parts]
        if len(hosts) > 1 or len(set(ranks)) < len(ranks):
            raise BaselineError(
                f"{shown}: steps without speculation from {', '.join(keys)}, which are not ranks of one "
                "server; record one server"
            )
    left_out = [k for k in keys if (h := sources[k].hello) is not None and (h.tp_rank or 0) > 0]
    used = [k for k in keys if k not in left_out]
    if not used:
        raise BaselineError(
            f"{shown}: only tensor-parallel ranks other than 0 ({', '.join(keys)}), whose steps repeat "
            "rank 0's; record rank 0 too"
        )
    return used, left_out
