"""The metric families ``eagle3-top export`` serves on /metrics, built at scrape time from one copy
of the feed (``export_figures``): no metric object is touched per event.

Counters are restart-safe (``export_counters``). Metric names and their PromQL are listed in the
README ("Prometheus and Grafana"); the alert rules and the dashboard in docs/ use only these names
(tests/test_export.py holds them to it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import numpy as np
from eagle3_top.tracer.schema import Hello, printable
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from .export_counters import RestartSafe
from .export_figures import Figures, SourceFigures
from .export_text import SAMPLE_SUFFIX
from .snapshot import STALE_AFTER_S

LABELS = ("source", "host", "rank", "engine")
SPEC_LABELS = (
    "algorithm", "num_steps", "topk", "num_draft_tokens", "capture_canonical", "target_path",
    "draft_path", "engine_version",
)  # fmt: skip
LABEL_CHARS = 256  # wire strings, bounded
_BOOK, _HEALTH, _TRANSPORT = "book", "health", "transport"


def _text(v: object) -> str:
    return "" if v is None else printable(v, LABEL_CHARS)


class _Families:
    """The families of one scrape, filled source by source."""

    def __init__(self) -> None:
        c, g, pos = CounterMetricFamily, GaugeMetricFamily, [*LABELS, "position"]
        self.steps = c("eagle3_verify_steps", "Verify steps (batched, of any width)", labels=LABELS)
        self.drafted = c(
            "eagle3_drafted_tokens", "Draft tokens proposed (positions per request-step)", labels=LABELS
        )
        self.accepted = c(
            "eagle3_accepted_tokens", "Draft tokens accepted (the bonus token excluded)", labels=LABELS
        )
        self.proposed_at = c(
            "eagle3_position_proposed", "Request-steps whose draft proposed position i", labels=pos
        )
        self.accepted_at = c("eagle3_position_accepted", "Request-steps that accepted position i", labels=pos)
        self.reached_at = c(
            "eagle3_position_reached",
            "Request-steps that accepted position i-1 (every request-step for i = 1): the conditional "
            "rate's denominator",
            labels=pos,
        )
        self.accept_length = HistogramMetricFamily(
            "eagle3_accept_length",
            "Request-steps by accept length (accepted drafts + the bonus token); buckets 1..max",
            labels=LABELS,
        )
        self.malformed = c(
            "eagle3_malformed_events", "Events of this source that failed the schema", labels=LABELS
        )
        self.dropped = c(
            "eagle3_tracer_dropped_events", "Events the tracer could not queue (its own count)", labels=LABELS
        )
        self.hook_errors = c(
            "eagle3_tracer_hook_errors", "Errors in the tracer's hooks (its own count)", labels=LABELS
        )
        self.missed = c(
            "eagle3_missed_events",
            "Holes in the source's sequence numbers: events dropped by the tracer or lost in transit",
            labels=LABELS,
        )
        self.restarts = c("eagle3_source_restarts", "New publishers seen under this source id", labels=LABELS)
        self.finding = g(
            "eagle3_finding",
            "Findings raised now, by code and severity",
            labels=[*LABELS, "code", "severity"],
        )
        self.spec = InfoMetricFamily(
            "eagle3_spec",
            "The effective speculative config and the layers served",
            labels=[*LABELS, *SPEC_LABELS],
        )
        self.age = g(
            "eagle3_last_event_age_seconds", "Seconds since the last event of this source", labels=LABELS
        )
        self.up = g("eagle3_source_up", "1 while the source is heard (not stale, not closed)", labels=LABELS)
        self.endpoint = g(
            "eagle3_endpoint_connected", "1 while the endpoint is connected", labels=["endpoint"]
        )
        self.malformed_frames = c("eagle3_malformed_frames", "Frames that did not decode, any source")
        self.receiving = g("eagle3_exporter_receiving", "1 while the exporter's receive worker runs")

    def all(self) -> list[Metric]:
        return [v for v in vars(self).values() if isinstance(v, Metric)]


class EvidenceCollector(Collector):
    """``figures``: one copy of the feed per scrape (``ExportFeed.figures``)."""

    def __init__(self, figures: Callable[[], Figures], stale_after_s: float = STALE_AFTER_S) -> None:
        self._figures = figures
        self.stale_after_s = stale_after_s
        self.counters = RestartSafe()
        # One scrape at a time, copy included: two overlapping scrapes could otherwise hand the
        # counters an older copy after a newer one, and an epoch that went back would be counted twice.
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            figs = self._figures()
            fam = _Families()
            for s in figs.sources:
                self._source(fam, s)
            for ep, state in sorted(figs.endpoints.items()):
                _add(fam.endpoint, {"endpoint": _text(ep)}, 1 if state == "connected" else 0)
            raw = np.array([figs.malformed_frames], np.int64)
            (frames,) = self.counters.values(("", "frames"), raw, None, fall_is_restart=False).tolist()
            _add(fam.malformed_frames, {}, frames)
            _add(fam.receiving, {}, 1 if figs.receiving else 0)
        yield from fam.all()

    def _source(self, fam: _Families, s: SourceFigures) -> None:
        # One label dict per source (and per position) shared by all its samples: the renderer
        # (export_text) writes each once per scrape.
        lv = dict(zip(LABELS, (_text(s.key), _text(s.host), _text(s.rank), _text(s.engine)), strict=True))
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
        counts, proposed = book[:m].tolist(), book[m : 2 * m].tolist()
        steps, drafted, accepted, committed, malformed = book[2 * m :].tolist()
        _add(fam.steps, lv, steps)
        _add(fam.drafted, lv, drafted)
        _add(fam.accepted, lv, accepted)
        _add(fam.malformed, lv, malformed)
        # at_least[i]: request-steps that accepted position i (accepted drafts >= i)
        at_least = np.cumsum(book[:m][::-1])[::-1].tolist()
        last = max((i for i, p in enumerate(proposed) if p), default=0)
        for i in range(1, last + 1):
            pl = {**lv, "position": str(i)}
            _add(fam.proposed_at, pl, proposed[i])
            _add(fam.accepted_at, pl, at_least[i])
            _add(fam.reached_at, pl, at_least[i - 1])
        if at_least[0]:
            # buckets le = 1..L, L the longest accept length proposed or seen: exact for integers
            top = max(last, max((k for k, c in enumerate(counts) if c), default=0)) + 1
            hist, cum = fam.accept_length, 0
            for j in range(1, top + 1):
                cum += counts[j - 1]
                hist.add_sample(f"{hist.name}_bucket", {**lv, "le": str(j)}, cum)
            hist.add_sample(f"{hist.name}_bucket", {**lv, "le": "+Inf"}, at_least[0])
            hist.add_sample(f"{hist.name}_count", lv, at_least[0])
            hist.add_sample(f"{hist.name}_sum", lv, committed)
        h = s.health
        if h is not None:
            dropped, hook_errors = self.counters.values(
                (s.key, _HEALTH),
                np.array([h.dropped or 0, h.hook_errors or 0], np.int64),
                h.started,
                fall_is_restart=True,
            ).tolist()
            _add(fam.dropped, lv, dropped)
            _add(fam.hook_errors, lv, hook_errors)
        if s.transport is not None:
            missed, restarts = self.counters.values(
                (s.key, _TRANSPORT),
                np.array([s.missed, s.restarts], np.int64),
                s.transport,
                fall_is_restart=False,
            ).tolist()
            _add(fam.missed, lv, missed)
            _add(fam.restarts, lv, restarts)
        for (code, severity), n in sorted(s.findings.items()):
            _add(fam.finding, {**lv, "code": _text(code), "severity": _text(severity)}, n)
        if s.hello is not None:
            _add(fam.spec, {**lv, **_spec_labels(s.hello)}, 1)
        _add(fam.age, lv, s.age_s)
        closed = h is not None and h.final
        _add(fam.up, lv, 1 if s.age_s <= self.stale_after_s and not closed else 0)


def _add(fam: Metric, labels: dict[str, str], value: float) -> None:
    """The family's one sample for ``labels`` (a counter's name ends in _total, an info's in _info)."""
    fam.add_sample(fam.name + SAMPLE_SUFFIX.get(fam.type, ""), labels, value)


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
