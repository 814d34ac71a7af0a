"""``eagle3-top manifest show``: a manifest as a person reads it."""

from __future__ import annotations

from typing import Any

from eagle3_top.tracer.manifest import Manifest


def _row(label: str, value: Any) -> str:
    return f"  {label:22s} {value}"


def manifest_text(m: Manifest) -> str:
    d = m.data
    t, dr, aux, ref = d.get("target") or {}, d.get("draft") or {}, d["aux"], d["reference"]
    fp = ref["fingerprint"]
    lines = [f"manifest {m.path}", f"  built {d.get('created')} by {d.get('builder')}", "target"]
    lines += [_row("architecture", t.get("arch")), _row("layers", t.get("num_layers")), _row("hidden size", t.get("hidden_size")),
              _row("vocab", t.get("vocab_size"))]  # fmt: skip
    lines += ["draft", _row("path", dr.get("path")), _row("architecture", dr.get("arch")),
              _row("draft vocab", dr.get("draft_vocab_size")), _row("norm_before_fc", dr.get("norm_before_fc")),
              _row("fc_norm", dr.get("fc_norm")), _row("ids in config", dr.get("ids_location"))]  # fmt: skip
    lines += ["aux layers (canonical: output of block k, -1 = embedding)",
              _row("layer ids", aux["layer_ids"]), _row("from", aux.get("ids_source")),
              _row("concatenation order", f"{aux['concat_order']} ({aux.get('concat_order_rule')})"),
              _row("slots x width", f"{aux['slots']} x {aux['slot_width']}")]  # fmt: skip
    lines.append(f"reference fingerprint ({ref['files']} files, {ref['tokens']} tokens)")
    lines.append(f"  {'slot':>4s} {'layer':>5s} {'mean':>10s} {'std':>10s} {'rms':>10s} {'absmax':>10s}")
    for i, layer in enumerate(aux["concat_order"]):
        lines.append(
            f"  {i:4d} {layer:5d} {fp['mean'][i]:10.4g} {fp['std'][i]:10.4g} {fp['rms'][i]:10.4g} {fp['absmax'][i]:10.4g}"
        )
    lines.append(f"probes: {len(d.get('probes') or [])} samples")
    vocab = d.get("vocab")
    if vocab:
        lines.append(
            f"vocab map: {vocab.get('size')} draft ids -> [{vocab.get('min_target')}, {vocab.get('max_target')}], sha {vocab.get('sha256')}"
        )
    train = d.get("training")
    if train:
        acc = ", ".join(f"{a:.3f}" for a in train.get("acc") or [])
        sim = train.get("simulated_acc_len")
        lines.append(f"training acc_i: [{acc}]")
        if sim is not None:
            lines.append(
                f"simulated accept length: {sim:.3f} drafts (+1 bonus = {sim + 1:.3f} as servers count)"
            )
    return "\n".join(lines)
