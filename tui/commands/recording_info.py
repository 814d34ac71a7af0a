"""``eagle3-top recording info``: what a recording holds, per source, the frames its sources
numbered that never reached the recorder, and what of the file was lost.

Reads a file cut short or damaged too (a recorder killed, a disk that filled). Exit 0 for a
complete file, 3 when something was unreadable or the summary disagrees with the chunks, 2 for a
file that is missing, not a recording, or of a newer stream version."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from eagle3_top.tracer.reader.ledger import Loss, SourceCounters

from .report import EXIT_OK, EXIT_PARTIAL, fail, parse, safe

PROG = "eagle3-top recording info"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Summarise a recording made by eagle3-top record: sources, drops, losses."
    )
    p.add_argument("file", metavar="FILE", help="an .mcap file")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


@dataclass
class _Source:
    """One channel topic: a source id, or ``undecodable``."""

    first_ns: int
    last_ns: int = 0
    frames: int = 0
    bytes: int = 0
    undecodable: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    endpoints: set[str] = field(default_factory=set)
    # seq gaps per endpoint: the same source through two endpoints repeats its seqs on each
    seqs: dict[str, SourceCounters] = field(default_factory=dict)
    # of those gaps, the ones across a bad chunk or damaged bytes: the recorder had those frames
    in_file: Counter[str] = field(default_factory=Counter)

    def drops(self) -> dict[str, Loss]:
        return {ep: _in_file(c.loss(), self.in_file[ep]) for ep, c in sorted(self.seqs.items())}

    def to_json(self) -> dict[str, Any]:
        return {
            "frames": self.frames,
            "bytes": self.bytes,
            "undecodable": self.undecodable,
            "kinds": dict(sorted(self.kinds.items())),
            "first_ns": self.first_ns,
            "last_ns": self.last_ns,
            "span_s": round((self.last_ns - self.first_ns) / 1e9, 3),
            "endpoints": sorted(self.endpoints),
            "drops": {
                ep: {**dataclasses.asdict(loss), "describe": loss.describe()}
                for ep, loss in self.drops().items()
            },
        }


def _in_file(loss: Loss, n: int) -> Loss:
    """Move the gaps a damaged part of the file explains out of the network's and the tracer's."""
    if not n:
        return loss
    transit = min(n, loss.slow_consumer)
    tracer = min(n - transit, loss.publisher_dropped)
    return dataclasses.replace(
        loss,
        in_file=transit + tracer,
        slow_consumer=loss.slow_consumer - transit,
        publisher_dropped=loss.publisher_dropped - tracer,
    )


def _account(counts: dict[str, int]) -> str:
    """The recorder's own account of the file, as its stop line gave it."""
    parts = [f"{counts['frames']:,} frames written"] if "frames" in counts else []
    not_written = counts.get("not_written")
    if not_written is not None:
        parts.append(
            f"{not_written:,} received and not written"
            + (" (the recorder fell behind: they are among the drops above)" if not_written else "")
        )
    if "missed" in counts:
        parts.append(f"{counts['missed']:,} missed (seq gaps it counted)")
    return ", ".join(parts) or "no counts"


def main(argv: list[str]) -> int:
    ns = parse(build_parser(), argv)
    if isinstance(ns, int):
        return ns
    from eagle3_top.tracer.reader.recording import RecordingReader
    from eagle3_top.tracer.reader.recording.writer import MANY_SOURCES, PROFILE
    from eagle3_top.tracer.schema import HEALTH, KINDS, DecodeError, Event, decode

    from .recording_input import READ_ERRORS, iso, read_error

    reader = RecordingReader(ns.file)
    sources: dict[str, _Source] = {}
    holes = 0  # bad chunks and damaged stretches met so far
    across: set[tuple[str, str]] = set()  # (topic, endpoint) whose next gap spans a hole
    try:
        for rec in reader:
            if len(reader.report.bad_chunks) + len(reader.report.skipped) != holes:
                holes = len(reader.report.bad_chunks) + len(reader.report.skipped)
                across = {(t, ep) for t, src in sources.items() for ep in src.seqs}
            try:
                ev: Event | None = decode(rec.data)
            except DecodeError:
                ev = None
            # the channel shared by the sources past the recorder's bound: each frame names its own
            topic = ev.src if ev is not None and rec.topic == MANY_SOURCES else rec.topic
            s = sources.get(topic)
            if s is None:
                s = sources[topic] = _Source(first_ns=rec.log_time_ns)
            s.frames += 1
            s.bytes += len(rec.data)
            s.first_ns = min(s.first_ns, rec.log_time_ns)
            s.last_ns = max(s.last_ns, rec.log_time_ns)
            if rec.endpoint:
                s.endpoints.add(rec.endpoint)
            if ev is None:
                s.undecodable += 1
                continue
            # a kind of a newer publisher is counted, not named: a file could invent one per frame
            s.kinds[ev.kind if ev.kind in KINDS else "unknown"] += 1
            counters = s.seqs.get(rec.endpoint)
            if counters is None:
                counters = s.seqs[rec.endpoint] = SourceCounters(ev.seq, ev.seq)
            if ev.kind == HEALTH:
                counters.see_health(ev.body)
            gaps = counters.gaps
            counters.see(ev.seq)
            if (topic, rec.endpoint) in across:
                across.discard((topic, rec.endpoint))
                s.in_file[rec.endpoint] += counters.gaps - gaps
    except READ_ERRORS as exc:
        return fail(PROG, read_error(ns.file, exc))
    rep = reader.report
    undecodable = sum(s.undecodable for s in sources.values())
    kinds: Counter[str] = Counter()
    for s in sources.values():
        kinds.update(s.kinds)
    if undecodable:
        kinds["undecodable"] = undecodable
    first = min((s.first_ns for s in sources.values()), default=0)
    last = max((s.last_ns for s in sources.values()), default=0)
    foreign = rep.profile != PROFILE
    if ns.json:
        out = {
            "file": ns.file,
            "profile": rep.profile,
            "schemas": rep.schemas,
            "stream_version": rep.stream_version,
            "frames": rep.frames,
            "span": {
                "first_ns": first, "last_ns": last, "start": iso(first) if rep.frames else None,
                "end": iso(last) if rep.frames else None, "span_s": round((last - first) / 1e9, 3),
            },
            "kinds": dict(sorted(kinds.items())),
            "sources": {k: v.to_json() for k, v in sorted(sources.items())},
            "undecodable": undecodable,
            "recorder": rep.recorder,
            "lost": rep.describe(),
            "report": rep.to_json(),
        }  # fmt: skip
        print(json.dumps(out, indent=1))
    else:
        schemas = ", ".join(rep.schemas) or "no schema"
        print(
            f"{safe(ns.file)}: {rep.frames} frames in {rep.chunks} chunks, {rep.size} bytes ({safe(schemas)})"
        )
        if foreign:
            print(f"  not an eagle3-top recording (profile '{safe(rep.profile)}'): its frames do not decode")
        if rep.frames:
            print(f"  span: {iso(first)} to {iso(last)}, {(last - first) / 1e9:.1f} s")
            print(f"  kinds: {', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}")
        for name, s in sorted(sources.items()):
            counts = sorted(s.kinds.items()) + ([("undecodable", s.undecodable)] if s.undecodable else [])
            print(
                f"  {safe(name)}: {s.frames} frames ({', '.join(f'{k} {n}' for k, n in counts)}), "
                f"{(s.last_ns - s.first_ns) / 1e9:.1f} s, via {safe(', '.join(sorted(s.endpoints)) or '?')}"
            )
            drops = s.drops()
            for ep, loss in drops.items():
                via = f" via {safe(ep)}" if len(drops) > 1 else ""
                print(f"    drops{via}: {loss.describe()}")
        print(f"  undecodable frames: {undecodable}")
        if rep.recorder is not None:
            print(f"  recorder: {_account(rep.recorder)}")
        for line in rep.describe():
            print(f"  integrity: {safe(line)}")
    return EXIT_OK if rep.complete else EXIT_PARTIAL
