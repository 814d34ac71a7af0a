"""The wire schema, v1: every key of the stream is written and read here, and nowhere else.

One msgpack map per ZeroMQ message: an envelope (``v``, ``kind``, ``src``, ``seq``, ``ts``) and the
kind's own keys beside it (docs/protocol.md). For every kind, one module holds the builder the
publishing side calls (the tracer and both engines' adapters) and the typed view every reader gets
(the live monitor, ``check``, ``probe``, the analysis). Validation happens there, once:

- the envelope and the step, aux and probe bodies are strict: a wrong value raises ``DecodeError``
  with one line, because it would corrupt a tally or a comparison;
- the hello and health bodies are tolerant, as the protocol promises: a key that is absent or of
  the wrong type reads as its default, so a reader never crashes on an odd or newer publisher.

Import from here: ``from eagle3_top.tracer.schema import Hello, step_view, ...``.
"""

from eagle3_top.tracer.schema.aux import AuxSample, Fingerprint, aux_body, aux_view
from eagle3_top.tracer.schema.envelope import (
    AUX,
    HEALTH,
    HELLO,
    KINDS,
    PROBE,
    SCHEMA_VERSION,
    STEP,
    BadFrame,
    DecodeError,
    Envelope,
    Event,
    SourceId,
    decode,
    encode,
    peek,
    split_source_key,
)
from eagle3_top.tracer.schema.health import Health
from eagle3_top.tracer.schema.hello import (
    NO_SPECULATION,
    SPEC_KEYS,
    AuxWiring,
    DraftClaims,
    Hello,
    ModelInfo,
    Rewrite,
    SpecConfig,
    VocabSummary,
)
from eagle3_top.tracer.schema.probe import (
    PROBE_AUX_DTYPE,
    PROBE_MARKER,
    ProbeRows,
    is_probe_rid,
    probe_body,
    probe_view,
)
from eagle3_top.tracer.schema.step import (
    BONUS,
    TOKEN_DTYPE,
    StepColumns,
    StepView,
    accept_length,
    accepted_drafts,
    check_values,
    column,
    rid_text,
    rid_texts,
    row_depths,
    step_body,
    step_columns,
    step_depths,
    step_view,
)
from eagle3_top.tracer.schema.text import printable

__all__ = [
    "AUX", "BONUS", "HEALTH", "HELLO", "KINDS", "NO_SPECULATION", "PROBE", "PROBE_AUX_DTYPE", "PROBE_MARKER", "SCHEMA_VERSION",
    "SPEC_KEYS", "STEP", "TOKEN_DTYPE", "AuxSample", "BadFrame", "AuxWiring", "DecodeError", "DraftClaims", "Envelope", "Event", "Fingerprint",
    "Health", "Hello", "ModelInfo", "ProbeRows", "Rewrite", "SourceId", "SpecConfig", "StepColumns",
    "StepView", "VocabSummary", "accept_length", "accepted_drafts", "aux_body", "aux_view", "check_values",
    "column", "decode", "encode", "is_probe_rid", "peek", "probe_body", "printable", "probe_view", "rid_text", "rid_texts",
    "split_source_key", "step_body", "step_columns", "step_view", "row_depths", "step_depths",
]  # fmt: skip
