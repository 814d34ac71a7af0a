"""``eagle3-top manifest show``: a manifest as a person reads it."""

from __future__ import annotations

from typing import Any

from eagle3_top.tracer.analysis.manifest import Manifest


def _row(label: str, value: Any) -> str:
    return f"  {label:22s} {value}"


def manifest_text(m: Manifest) -> str:
    t, dr, aux, ref = m.target, m.draft, m.aux, m.reference
    fp = ref.fingerprint
    lines = [f"manifest {m.path}", f"  built {m.created} by {m.builder}", "target"]
    lines += [_row("architecture", t.arch), _row("layers", t.num_layers), _row("hidden size", t.hidden_size),
              _row("vocab", t.vocab_size)]  # fmt: skip
    lines += ["draft", _row("path", dr.path), _row("architecture", dr.arch),
              _row("draft vocab", dr.draft_vocab_size), _row("norm_before_fc", dr.norm_before_fc),
              _row("fc_norm", dr.fc_norm), _row("ids in config", dr.ids_location)]  # fmt: skip
    lines += ["aux layers (canonical: output of block k, -1 = embedding)",
              _row("layer ids", aux.layer_ids), _row("from", aux.ids_source),
              _row("concatenation order", f"{aux.concat_order} ({aux.concat_order_rule})"),
              _row("slots x width", f"{aux.slots} x {aux.slot_width}")]  # fmt: skip
    lines.append(f"reference fingerprint ({ref.files} files, {ref.tokens} tokens)")
    lines.append(f"  {'slot':>4s} {'layer':>5s} {'mean':>10s} {'std':>10s} {'rms':>10s} {'absmax':>10s}")
    for i, layer in enumerate(aux.concat_order):
        std = f"{fp.std[i]:10.4g}" if fp.std else f"{'—':>10s}"
        absmax = f"{fp.absmax[i]:10.4g}" if fp.absmax else f"{'—':>10s}"
        lines.append(f"  {i:4d} {layer:5d} {fp.mean[i]:10.4g} {std} {fp.rms[i]:10.4g} {absmax}")
    lines.append(f"probes: {len(m.probes)} samples")
    if m.vocab is not None:
        v = m.vocab
        lines.append(f"vocab map: {v.size} draft ids -> [{v.min_target}, {v.max_target}], sha {v.sha256}")
    if m.training is not None:
        acc = ", ".join(f"{a:.3f}" for a in m.training.acc)
        lines.append(f"training acc_i: [{acc}]")
        sim, expected = m.training.simulated_acc_len, m.training.expected_accept_length
        if sim is not None:
            lines.append(
                f"simulated accept length: {sim:.3f} drafts (+1 bonus = {expected:.3f} as servers count)"
            )
    return "\n".join(lines)
