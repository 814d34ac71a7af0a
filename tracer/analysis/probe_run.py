"""``eagle3-top probe``'s exchange: replay training samples through a server and collect what its
draft was fed for them.

Subscribe to the server's stream, send each sample to ``/generate`` with a probe rid
(``e3t-probe-<sample>-<uuid>``; ``schema.PROBE_MARKER``), collect the ``probe`` events the tracer
publishes for those rids and the acceptance of their verify steps, then hand it all to the findings
engine (``diagnose.judge_probe``). No torch and no textual at import.
"""

from __future__ import annotations

import queue
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from eagle3_top.tracer.analysis.acceptance import AcceptanceStats
from eagle3_top.tracer.analysis.diagnose import ProbeEvidence, diagnose, judge_probe
from eagle3_top.tracer.analysis.evidence import EvidenceBook
from eagle3_top.tracer.analysis.findings import Finding
from eagle3_top.tracer.analysis.generate_http import GenerateError, base_url, completions, generate
from eagle3_top.tracer.analysis.manifest import Manifest
from eagle3_top.tracer.analysis.probe_compare import (
    ProbeComparison,
    combine,
    compare,
    mapping_ok,
    mapping_text,
    merge_chunks,
)
from eagle3_top.tracer.reader.subscriber import Subscriber
from eagle3_top.tracer.schema import (
    HELLO,
    PROBE,
    PROBE_MARKER,
    STEP,
    DecodeError,
    Event,
    ProbeRows,
    is_probe_rid,
    probe_view,
    step_view,
)

if TYPE_CHECKING:
    from eagle3_top.tracer.transport.curve import CurveClient

DEFAULT_MAX_NEW_TOKENS = 32


class ProbeError(RuntimeError):
    """Bad input or an unusable server/stream: one line, exit code 2."""


def probe_rid(sample: int) -> str:
    return f"{PROBE_MARKER}-{sample}-{uuid.uuid4().hex[:12]}"


_PROBE_RID = re.compile(re.escape(PROBE_MARKER) + r"-\d+-[0-9a-f]{12}")


@dataclass(frozen=True)
class Sample:
    source: str
    input_ids: list[int]
    aux: np.ndarray  # [n, T * slot_width] float32
    slot_width: int | None  # None: take the served one (training files without a manifest)


def samples_from_manifest(manifest: Manifest) -> list[Sample]:
    out = []
    for k, p in enumerate(manifest.probes):
        try:
            out.append(Sample(p.source, list(p.input_ids), p.rows, manifest.slot_width))
        except (KeyError, TypeError, ValueError) as exc:
            raise ProbeError(f"{manifest.path}: probe {k} is malformed: {exc}") from None
    return out


def samples_from_data(data: str, limit: int, max_tokens: int = 256) -> list[Sample]:
    """Training hidden-state files directly (needs torch to read them)."""
    from eagle3_top.tracer.analysis.trainfiles import TrainFileError, find_training_files, load_sample

    try:
        out = []
        for path in find_training_files(data):
            s = load_sample(path)
            n = min(int(s.aux.shape[0]), int(s.input_ids.shape[0]), max_tokens)
            if n < 2:
                continue
            aux = s.aux[:n].float().numpy()
            width = aux.shape[1] // s.slots if s.slots else None
            out.append(Sample(path, [int(t) for t in s.input_ids[:n]], aux, width))
            if len(out) >= limit:
                break
    except TrainFileError as exc:
        raise ProbeError(str(exc)) from None
    return out


@dataclass
class ProbeResult:
    findings: list[Finding]
    comparisons: list[ProbeComparison]
    matrix: np.ndarray | None
    mapping: list[int | None]
    mapping_text: str
    verdict: str
    probe_accept: float | None  # mean accept length on the training continuations
    probe_accept_source: str
    live_accept: float | None  # mean accept length of other traffic during the probe window
    live_request_steps: int
    waited_s: float
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "matrix": None if self.matrix is None else np.round(self.matrix, 4).tolist(),
            "mapping": self.mapping,
            "mapping_text": self.mapping_text,
            "probe_accept_length": self.probe_accept,
            "live_accept_length": self.live_accept,
            "live_request_steps": self.live_request_steps,
            "samples": [
                {
                    "rid": c.rid,
                    "sample": c.sample,
                    "offset": c.offset,
                    "rows": c.rows,
                    "ok": c.ok,
                    "diagonal": [round(v, 4) for v in c.diagonal],
                    "note": c.note,
                }
                for c in self.comparisons
            ],  # fmt: skip
            "findings": [f.to_json() for f in self.findings],
            "notes": self.notes,
        }


class _Collector:
    """What the stream shows during the exchange: hellos (for the structural findings), the probe
    rows of our rids, and acceptance split into our rids and everything else."""

    def __init__(self, sub: Subscriber) -> None:
        self.sub = sub
        self.book = EvidenceBook()
        self.rids: dict[str, int] = {}  # our probe rids -> sample index
        self.chunks: dict[str, list[ProbeRows]] = {}
        self.probe_steps = AcceptanceStats()
        self.live = AcceptanceStats()

    def take(self, events: list[Event]) -> None:
        now = time.time()
        # only hellos feed the findings: the exchange judges acceptance itself, probe against live
        self.book.ingest([ev for ev in events if ev.kind == HELLO], now, self.sub.count_malformed)
        for ev in events:
            try:
                if ev.kind == STEP:
                    sv = step_view(ev)
                    mask = np.fromiter((is_probe_rid(r) for r in sv.rids), dtype=bool, count=sv.batch)
                    if mask.any():
                        self.probe_steps.add(sv.accepted[mask], sv.n, now)
                    if (~mask).any():
                        self.live.add(sv.accepted[~mask], sv.n, now)
                elif ev.kind == PROBE:
                    rows = probe_view(ev.body)
                    rid = self.ours(rows.rid)
                    if rid is not None:
                        self.chunks.setdefault(rid, []).append(rows)
            except DecodeError as exc:
                self.sub.count_malformed(str(exc))

    def ours(self, rid: str) -> str | None:
        """The probe rid we sent that a served rid stands for (servers wrap it: vLLM serves
        ``cmpl-<rid>-0-<suffix>``); None for another request's."""
        if rid in self.rids:
            return rid
        m = _PROBE_RID.search(rid)
        return m.group(0) if m is not None and m.group(0) in self.rids else None

    @property
    def has_hello(self) -> bool:
        return any(s.hello is not None for s in self.book.sources.values())

    @property
    def engine(self) -> str | None:
        return next((s.hello.engine for s in self.book.sources.values() if s.hello is not None), None)


def run_probe(
    server: str,
    endpoints: list[str],
    samples: list[Sample],
    *,
    manifest: Manifest | None = None,
    count: int = 4,
    timeout: float = 60.0,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    curve: CurveClient | None = None,
    progress: Callable[[str], None] | None = None,
) -> ProbeResult:
    """Subscribe (CURVE-authenticated when ``curve`` is given), replay ``count`` samples through
    ``server``'s /generate, collect and judge. ``progress`` gets a line about once a second."""
    say = progress or (lambda _line: None)
    if not samples:
        raise ProbeError(
            "no probe samples: the manifest holds none (rebuild it with --probes N) or --data is empty"
        )
    samples = samples[: max(1, count)]
    t0 = time.monotonic()
    deadline = t0 + timeout
    sub = Subscriber(endpoints, curve=curve)
    got = _Collector(sub)
    try:
        # 1. subscribe first: wait for a hello (the publisher sends one to each new subscriber)
        while not got.has_hello and time.monotonic() < deadline:
            got.take(sub.poll(50))
            states = ", ".join(f"{ep} {st}" for ep, st in sub.endpoints.items())
            say(f"awaiting a hello from {states} [{time.monotonic() - t0:.0f}s of {timeout:g}s]")
        if not got.has_hello:
            states = ", ".join(f"{ep} {st}" for ep, st in sub.endpoints.items())
            raise ProbeError(f"no hello within {timeout:g}s from {states}: is the server publishing there?")
        time.sleep(0.05)

        # 2. send the samples, each from its own (daemon) thread; the stream is read meanwhile
        answers: queue.Queue[tuple[str, dict[str, Any] | ProbeError]] = queue.Queue()
        got.rids = {probe_rid(k): k for k in range(len(samples))}

        openai = got.engine == "vllm"  # its OpenAI server has no /generate
        url = base_url(server) + ("/v1/completions" if openai else "/generate")

        def ask(rid: str, s: Sample) -> dict[str, Any]:
            left = deadline - time.monotonic()
            if openai:
                return completions(url, rid, s.input_ids, max_new_tokens, left)
            payload = {
                "rid": rid,
                "input_ids": s.input_ids,
                "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.0},
            }
            return generate(url, payload, left)

        def send(rid: str, s: Sample) -> None:
            try:
                answers.put((rid, ask(rid, s)))
            except GenerateError as exc:
                answers.put((rid, ProbeError(str(exc))))
            except Exception as exc:  # never let a thread die silently
                answers.put((rid, ProbeError(f"{url}: {type(exc).__name__}: {exc}")))

        for rid, k in got.rids.items():
            threading.Thread(target=send, args=(rid, samples[k]), name=f"e3t-probe-{k}", daemon=True).start()

        metas: dict[str, dict[str, Any]] = {}
        answered_at: float | None = None
        while time.monotonic() < deadline:
            got.take(sub.poll(50))
            say(
                f"{len(metas)} of {len(got.rids)} probe requests answered by {url}, probe rows for "
                f"{sum(rid in got.chunks for rid in got.rids)} [{time.monotonic() - t0:.0f}s of {timeout:g}s]"
            )
            while not answers.empty():
                rid, out = answers.get_nowait()
                if isinstance(out, ProbeError):
                    raise out
                metas[rid] = out["meta_info"]
            if len(metas) == len(got.rids):
                answered_at = answered_at or time.monotonic()
                covered = all(
                    rid in got.chunks and _covers(merge_chunks(got.chunks[rid]), len(samples[k].input_ids))
                    for rid, k in got.rids.items()
                )
                # rows arrive before the answer as a rule; give stragglers a short grace
                if covered or time.monotonic() - answered_at > 2.0:
                    break
        got.take(sub.poll(20))
        if len(metas) < len(got.rids):
            raise ProbeError(
                f"{url} answered {len(metas)} of {len(got.rids)} probe requests within {timeout:g}s"
            )
        if not got.chunks:
            raise ProbeError(
                f"the server answered, but the stream at {', '.join(endpoints)} never showed the probe rows "
                f"(rids {PROBE_MARKER}-*): is this the stream of that server, with probe capture (eagle3-top ≥ 0.2)?"
            )
    finally:
        sub.close()
    return _judge(samples, got, metas, manifest, time.monotonic() - t0)


def _covers(rows: ProbeRows, prompt_len: int) -> bool:
    return rows.offset == 0 and rows.rows >= prompt_len


def _judge(
    samples: list[Sample],
    got: _Collector,
    metas: dict[str, dict[str, Any]],
    manifest: Manifest | None,
    waited: float,
) -> ProbeResult:
    notes: list[str] = []
    comparisons = []
    missing = []
    for rid, k in got.rids.items():
        s = samples[k]
        if rid not in got.chunks:
            missing.append(s.source)
            continue
        rows = merge_chunks(got.chunks[rid])
        c = compare(rows, s.input_ids, s.aux, s.slot_width or rows.slot_width, sample=s.source)
        comparisons.append(c)
        if rows.offset > 0 or rows.rows < len(s.input_ids):
            notes.append(
                f"{s.source}: the stream held prompt rows {rows.offset}..{rows.offset + rows.rows - 1} of "
                f"{len(s.input_ids)} (cached prefix rows are not recomputed): use --disable-radix-cache "
                "on the server for complete probes"
            )
        if c.note:
            notes.append(f"{s.source}: {c.note}")
    if missing:
        notes.append(f"no probe rows seen for {len(missing)} sample(s): {', '.join(missing[:3])}")

    trained_layers = manifest.concat_order if manifest is not None else []
    first = next((s for s in got.book.sources.values() if s.hello is not None), None)
    hello = first.hello if first is not None else None
    served_layers = (
        hello.aux.capture_canonical if hello is not None and hello.aux is not None else None
    ) or []
    combined = combine(comparisons)
    matrix: np.ndarray | None
    mapping: list[int | None]
    if combined is None:
        matrix, mapping, mtext, aux_ok = None, [], "no aligned rows to compare", False
    else:
        matrix, mapping = combined
        mtext = mapping_text(matrix, mapping, trained_layers, served_layers)
        aux_ok = mapping_ok(mapping, comparisons[0].matrix.shape[1]) and all(c.ok for c in comparisons)

    # acceptance on the training continuations: meta_info first, step events of probe rids second
    verify = sum(int(m.get("spec_verify_ct") or 0) for m in metas.values())
    completion = sum(int(m.get("completion_tokens") or 0) for m in metas.values())
    if verify:
        probe_accept: float | None = completion / verify
        pa_src = f"meta_info over {len(metas)} probe requests ({verify} verify steps)"
    else:
        probe_accept = got.probe_steps.mean_accept_length
        pa_src = f"step events of the probe rids ({got.probe_steps.request_steps} request-steps)"

    findings: list[Finding] = []
    for ev in got.book.sources.values():
        findings.extend(diagnose(ev, manifest))
    verdict, finding = judge_probe(
        ProbeEvidence(
            source=first.key if first is not None else "",
            comparisons=comparisons, matrix=matrix, mapping=mapping, mapping_text=mtext, aux_ok=aux_ok,
            trained_layers=trained_layers, served_layers=served_layers, probe_accept=probe_accept,
            live_accept=got.live.mean_accept_length,
            num_draft_tokens=hello.effective.num_draft_tokens if hello is not None and hello.effective else None,
            hello=hello,
        ),
        manifest,
    )  # fmt: skip
    findings.append(finding)
    return ProbeResult(
        findings=findings,
        comparisons=comparisons,
        matrix=matrix,
        mapping=mapping,
        mapping_text=mtext,
        verdict=verdict,
        probe_accept=probe_accept,
        probe_accept_source=pa_src,
        live_accept=got.live.mean_accept_length,
        live_request_steps=got.live.request_steps,
        waited_s=waited,
        notes=notes,
    )
