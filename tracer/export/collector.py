"""The metric families ``eagle3-top export`` serves on /metrics, written at scrape time from one copy
of the feed (``figures``) straight into Prometheus's text format: no metric object is touched per
event, and none is made per sample.

Counters are restart-safe (``counters``). Metric names and their PromQL are listed in the README
("Prometheus and Grafana"); the alert rules and the dashboard in docs/ use only these names
(tests/test_export.py holds them to it).

Why not prometheus_client's families and ``generate_latest``: a ``Sample`` per value, every label
validated and escaped per sample; at 64 sources (~1,800 samples) that was 4.4 ms of a scrape's CPU,
held against the receive thread for the GIL. Here a source's label set is escaped once and every
line is one f-string: the same text, values formatted as prometheus_client formats them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

import numpy as np
from eagle3_top.tracer.analysis.thresholds import THRESHOLDS
from eagle3_top.tracer.schema import Hello, printable

from .counters import RestartSafe
from .figures import Figures, SourceFigures
from .text import Family, count, escape, number

LABELS = ("source", "host", "rank", "engine")
SPEC_LABELS = (
    "algorithm", "num_steps", "topk", "num_draft_tokens", "capture_canonical", "target_path",
    "draft_path", "engine_version",
)  # fmt: skip
LABEL_CHARS = 256  # wire strings, bounded
_BOOK, _HEALTH, _TRANSPORT = "book", "health", "transport"


def _text(v: object) -> str:
    return "" if v is None else printable(v, LABEL_CHARS)


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    """``k="v",...``, each value escaped."""
    return ",".join(f'{k}="{escape(v)}"' for k, v in pairs)


class _Families:
    """The families of one scrape, in the order they are served, filled source by source."""

    def __init__(self) -> None:
        c, g = "counter", "gauge"
        self.steps = Family("eagle3_verify_steps", c, "Verify steps (batched, of any width)")
        self.drafted = Family(
            "eagle3_drafted_tokens", c, "Draft tokens proposed (positions per request-step)"
        )
        self.accepted = Family(
            "eagle3_accepted_tokens", c, "Draft tokens accepted (the bonus token excluded)"
        )
        self.proposed_at = Family(
            "eagle3_position_proposed", c, "Request-steps whose draft proposed position i"
        )
        self.accepted_at = Family("eagle3_position_accepted", c, "Request-steps that accepted position i")
        self.reached_at = Family(
            "eagle3_position_reached",
            c,
            "Request-steps that accepted position i-1 (every request-step for i = 1): the conditional "
            "rate's denominator",
        )
        self.accept_length = Family(
            "eagle3_accept_length",
            "histogram",
            "Request-steps by accept length (accepted drafts + the bonus token); buckets 1..max",
        )
        self.malformed = Family("eagle3_malformed_events", c, "Events of this source that failed the schema")
        self.dropped = Family(
            "eagle3_tracer_dropped_events", c, "Events the tracer could not queue (its own count)"
        )
        self.hook_errors = Family(
            "eagle3_tracer_hook_errors", c, "Errors in the tracer's hooks (its own count)"
        )
        self.missed = Family(
            "eagle3_missed_events",
            c,
            "Holes in the source's sequence numbers: events dropped by the tracer or lost in transit",
        )
        self.receive_dropped = Family(
            "eagle3_receive_dropped_events",
            c,
            "Of the missed events, those the tracer sent and a full queue on the way dropped: past the "
            "exporter's receive bound while its fold is behind (eagle3_last_event_age_seconds), or a slow link",
        )
        self.restarts = Family("eagle3_source_restarts", c, "New publishers seen under this source id")
        self.finding = Family("eagle3_finding", g, "Findings raised now, by code and severity")
        self.spec = Family("eagle3_spec", "info", "The effective speculative config and the layers served")
        self.age = Family(
            "eagle3_last_event_age_seconds",
            g,
            "Seconds since the newest event of this source that the exporter has folded arrived: its "
            "silence plus how far behind the fold is (eagle3_fold_lag_seconds), a full receive queue included",
        )
        self.lag = Family(
            "eagle3_fold_lag_seconds",
            g,
            "How long the newest folded event of this source waited between its arrival and its fold "
            "(the publisher's clock offset taken out)",
        )
        self.up = Family("eagle3_source_up", g, "1 while the source is heard (not stale, not closed)")
        self.endpoint = Family("eagle3_endpoint_connected", g, "1 while the endpoint is connected")
        self.malformed_frames = Family("eagle3_malformed_frames", c, "Frames that did not decode, any source")
        self.receiving = Family("eagle3_exporter_receiving", g, "1 while the exporter's receive worker runs")
        self.evicted = Family(
            "eagle3_evicted_sources",
            c,
            "Sources forgotten past the 256 held, by kind: unproven (never sent a valid hello and steps) "
            "or proven (a real engine's figures, forgotten)",
        )

    def text(self) -> str:
        return "".join(f.text() for f in vars(self).values())


class EvidenceCollector:
    """``figures``: one copy of the feed per scrape (``ExportFeed.figures``)."""

    def __init__(
        self, figures: Callable[[], Figures], stale_after_s: float = THRESHOLDS.stale_after_s
    ) -> None:
        self._figures = figures
        self.stale_after_s = stale_after_s
        self.counters = RestartSafe()
        # One scrape at a time, copy included: two overlapping scrapes could otherwise hand the
        # counters an older copy after a newer one, and an epoch that went back would be counted twice.
        self._lock = threading.Lock()

    def render(self) -> bytes:
        """The whole of /metrics."""
        with self._lock:
            figs = self._figures()
            fam = _Families()
            for s in figs.sources:
                self._source(fam, s)
            for ep, state in sorted(figs.endpoints.items()):
                fam.endpoint.add(_labels([("endpoint", _text(ep))]), "1.0" if state == "connected" else "0.0")
            raw = np.array([figs.malformed_frames], np.int64)
            (frames,) = self.counters.values(("", "frames"), raw, None, fall_is_restart=False).tolist()
            fam.malformed_frames.add("", count(frames))
            kinds = np.array([figs.evictions.unproven, figs.evictions.proven], np.int64)
            evicted = self.counters.values(("", "evictions"), kinds, None, fall_is_restart=False).tolist()
            for kind, n in zip(("unproven", "proven"), evicted, strict=True):
                fam.evicted.add(_labels([("kind", kind)]), count(n))
            fam.receiving.add("", "1.0" if figs.receiving else "0.0")
        return fam.text().encode()

    def _source(self, fam: _Families, s: SourceFigures) -> None:
        lv = _labels(zip(LABELS, (_text(s.key), _text(s.host), _text(s.rank), _text(s.engine)), strict=True))
        m = s.counts.size
        book = self.counters.values(
            (s.key, _BOOK),
            np.concatenate(
                [
                    s.counts,
                    s.proposed,
                    np.array([s.verify_steps, s.drafted, s.accepted, s.committed, s.malformed]),
                ]
            ).astype(np.int64),
            s.evidence,
            fall_is_restart=False,
        )
        nz_counts, nz_proposed = np.flatnonzero(book[:m]), np.flatnonzero(book[m : 2 * m])
        last = int(nz_proposed[-1]) if nz_proposed.size else 0  # the deepest position proposed
        deepest = int(nz_counts[-1]) if nz_counts.size else 0  # the most drafts any request-step accepted
        counts, proposed = book[:m].tolist(), book[m : 2 * m].tolist()
        steps, drafted, accepted, committed, malformed = book[2 * m :].tolist()
        fam.steps.add(lv, count(steps))
        fam.drafted.add(lv, count(drafted))
        fam.accepted.add(lv, count(accepted))
        fam.malformed.add(lv, count(malformed))
        # at_least[i]: request-steps that accepted position i (accepted drafts >= i)
        at_least = np.cumsum(book[:m][::-1])[::-1].tolist()
        for i in range(1, last + 1):
            pl = f'{lv},position="{i}"'
            fam.proposed_at.add(pl, count(proposed[i]))
            fam.accepted_at.add(pl, count(at_least[i]))
            fam.reached_at.add(pl, count(at_least[i - 1]))
        if at_least[0]:
            # buckets le = 1..L, L the longest accept length proposed or seen: exact for integers
            top = max(last, deepest) + 1
            hist, cum = fam.accept_length, 0
            for j in range(1, top + 1):
                cum += counts[j - 1]
                hist.add(f'{lv},le="{j}"', count(cum), "_bucket")
            hist.add(f'{lv},le="+Inf"', count(at_least[0]), "_bucket")
            hist.add(lv, count(at_least[0]), "_count")
            hist.add(lv, count(committed), "_sum")
        h = s.health
        if h is not None:
            dropped, hook_errors = self.counters.values(
                (s.key, _HEALTH),
                np.array([h.dropped or 0, h.hook_errors or 0], np.int64),
                h.started,
                fall_is_restart=True,
            ).tolist()
            fam.dropped.add(lv, count(dropped))
            fam.hook_errors.add(lv, count(hook_errors))
        if s.transport is not None:
            missed, receive_dropped, restarts = self.counters.values(
                (s.key, _TRANSPORT),
                np.array([s.missed, s.receive_dropped, s.restarts], np.int64),
                s.transport,
                fall_is_restart=False,
            ).tolist()
            fam.missed.add(lv, count(missed))
            fam.receive_dropped.add(lv, count(receive_dropped))
            fam.restarts.add(lv, count(restarts))
        for (code, severity), n in sorted(s.findings.items()):
            fam.finding.add(
                f'{lv},code="{escape(_text(code))}",severity="{escape(_text(severity))}"', count(n)
            )
        if s.hello is not None:
            fam.spec.add(f"{lv},{_labels(_spec_labels(s.hello).items())}", "1.0")
        fam.age.add(lv, number(s.age_s))
        fam.lag.add(lv, number(s.lag_s))
        closed = h is not None and h.final
        # heard lately (a fold behind its arrivals is no silence of the source's: the age says it)
        fam.up.add(lv, "1.0" if s.silent_s <= self.stale_after_s and not closed else "0.0")


def _spec_labels(hello: Hello) -> dict[str, str]:
    eff = hello.effective
    capture = hello.aux.capture_canonical if hello.aux is not None else None
    return {
        "algorithm": _text(eff.algorithm if eff else None),
        "num_steps": _text(eff.num_steps if eff else None),
        "topk": _text(eff.topk if eff else None),
        "num_draft_tokens": _text(eff.num_draft_tokens if eff else None),
        "capture_canonical": _text(",".join(map(str, capture))) if capture else "",
        "target_path": _text(hello.model.target_path),
        "draft_path": _text(hello.model.draft_path),
        "engine_version": _text(hello.engine_version),
    }
