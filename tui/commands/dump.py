"""``eagle3-top dump``: what a recording holds, per source, and what of it was lost.

Reads a file cut short or damaged too (a recorder killed, a disk that filled). Exit 0 for a
complete file, 3 when something was unreadable, 2 for a file that is missing or not a recording."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .report import EXIT_OK, EXIT_PARTIAL, fail, parse, safe

PROG = "eagle3-top dump"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Summarise a recording made by eagle3-top record.")
    p.add_argument("file", metavar="FILE", help="an .mcap file")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


@dataclass
class _Source:
    frames: int = 0
    bytes: int = 0
    undecodable: int = 0
    first_ns: int = 0
    last_ns: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    endpoints: set[str] = field(default_factory=set)

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
        }


def main(argv: list[str]) -> int:
    ns = parse(build_parser(), argv)
    if isinstance(ns, int):
        return ns
    from eagle3_top.tracer.recording.reader import NotARecording, RecordingReader
    from eagle3_top.tracer.schema import DecodeError, decode

    reader = RecordingReader(ns.file)
    sources: dict[str, _Source] = {}
    try:
        for rec in reader:
            s = sources.setdefault(rec.topic, _Source(first_ns=rec.log_time_ns))
            s.frames += 1
            s.bytes += len(rec.data)
            s.first_ns = min(s.first_ns, rec.log_time_ns)
            s.last_ns = max(s.last_ns, rec.log_time_ns)
            if rec.endpoint:
                s.endpoints.add(rec.endpoint)
            try:
                s.kinds[decode(rec.data).kind] += 1
            except DecodeError:
                s.undecodable += 1
    except (OSError, NotARecording) as exc:
        return fail(PROG, str(exc) if isinstance(exc, NotARecording) else f"{ns.file}: {exc.strerror or exc}")
    rep = reader.report
    undecodable = sum(s.undecodable for s in sources.values())
    if ns.json:
        out = {
            "file": ns.file,
            "sources": {k: v.to_json() for k, v in sorted(sources.items())},
            "undecodable": undecodable,
            "lost": rep.describe(),
            "report": rep.to_json(),
        }
        print(json.dumps(out, indent=1))
    else:
        print(f"{safe(ns.file)}: {rep.frames} frames in {rep.chunks} chunks, {rep.size} bytes")
        for name, s in sorted(sources.items()):
            counts = sorted(s.kinds.items()) + ([("undecodable", s.undecodable)] if s.undecodable else [])
            kinds = ", ".join(f"{k} {n}" for k, n in counts)
            print(
                f"  {safe(name)}: {s.frames} frames ({kinds}), "
                f"{(s.last_ns - s.first_ns) / 1e9:.1f} s, via {safe(', '.join(sorted(s.endpoints)) or '?')}"
            )
        print(f"  undecodable frames: {undecodable}")
        for line in rep.describe():
            print(f"  lost: {safe(line)}")
    return EXIT_OK if rep.complete else EXIT_PARTIAL
