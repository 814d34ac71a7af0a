"""Publishing cost on the sender thread: a columnar step event vs one msgpack map per request.

The sender shares the GIL with the serving loop, so its per-step Python work must stay small.
Both encoders start from the same host arrays (what the tracer holds after the device copy).
Target: columnar encode of batch 64 x 16 draft tokens costs <= 1/5 of the per-request encoding.
"""

from __future__ import annotations

import msgpack
import numpy as np
from eagle3_top.tracer.schema import decode, encode, step_body, step_view

from benchmarks.common import best_of, machine, step_arrays


def run(batch: int = 64, n: int = 16) -> dict[str, float]:
    s = step_arrays(batch, n)
    accept_lens = s.accepted + 1  # what engines hold: accepted drafts + the bonus token
    offsets = np.concatenate([[0], np.cumsum(accept_lens)])

    def ours() -> bytes:
        body = step_body(step=1, rids=s.rids, draft=s.draft, accept_lens=accept_lens, tokens=s.tokens)
        return encode("step", "h:1:r0", 1, 0.0, body)

    def per_request() -> bytes:
        reqs = [
            {
                "rid": s.rids[i],
                "draft": s.draft[i].tolist(),
                "accepted": int(s.accepted[i]),
                "tokens": s.tokens[offsets[i] : offsets[i + 1]].tolist(),
            }
            for i in range(batch)
        ]
        return msgpack.packb(
            {"v": 1, "kind": "step", "src": "h:1:r0", "seq": 1, "ts": 0.0, "step": 1, "requests": reqs}
        )

    frame, frame_b = ours(), per_request()
    t_ours, t_base = best_of(ours, number=500), best_of(per_request, number=500)
    t_dec_ours = best_of(lambda: step_view(decode(frame)), number=500)
    t_dec_base = best_of(lambda: msgpack.unpackb(frame_b), number=500)
    return {
        "encode_columnar_us": t_ours * 1e6,
        "encode_per_request_us": t_base * 1e6,
        "encode_ratio": t_ours / t_base,
        "decode_columnar_us": t_dec_ours * 1e6,
        "decode_per_request_us": t_dec_base * 1e6,
        "decode_ratio": t_dec_ours / t_dec_base,
        "frame_bytes_columnar": len(frame),
        "frame_bytes_per_request": len(frame_b),
    }


def main() -> dict[str, float]:
    print(f"# bench_encode: step event, batch 64 x 16 draft tokens, on {machine()}")
    r = run()
    for k, v in r.items():
        print(f"  {k:26s} {v:10.2f}")
    print(f"  columnar / per-request encode cost: {r['encode_ratio']:.3f}  (target <= 0.2)")
    return r


if __name__ == "__main__":
    main()
