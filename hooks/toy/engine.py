"""The built-in toy EAGLE-3 speculative-decoding engine (greedy, chain drafting).

Data classes and method names mirror SGLang 0.5.23 (``EagleVerifyInput``, ``ScheduleBatch``,
``LogitsProcessorOutput``, ``GenerationBatchResult``, ``verify``) so that a tracer attaches to it
the same way it attaches to SGLang. The engine knows nothing of the tracer.

Per-request bookkeeping: ``C`` = committed tokens (prompt + generated). The target's and the
draft's KV caches hold ``C - 1`` positions: the last committed token (the "root"/bonus) is fed to
the target at the next verify, and paired with the last accepted aux row in the draft extend.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .draft import ToyEagle3Config, ToyEagle3Draft
from .model import load_target
from .spec_args import NO_SPECULATION, ServerArgs, SpecArgs, read_eagle_config, resolve_spec_args
from .workload import prompt_stream


@dataclass
class Req:
    rid: str
    prompt: list[int]
    output_ids: list[int] = field(default_factory=list)  # filled when the request finishes
    max_new_tokens: int = 96
    finished: bool = False
    # per-request speculative counters (SGLang's Req.spec_verify_ct etc.), kept by ``run_requests``
    spec_verify_ct: int = 0
    spec_num_correct_drafts: int = 0
    spec_correct_drafts_histogram: list[int] = field(default_factory=list)  # [k] = steps accepting k drafts


@dataclass
class EagleVerifyInput:
    draft_token: torch.Tensor  # [bs*N]; per block: root (last committed token), then proposals
    positions: torch.Tensor  # [bs*N]
    retrieve_next_token: torch.Tensor  # [bs, N]
    retrieve_next_sibling: torch.Tensor  # [bs, N]
    spec_steps: int
    topk: int
    draft_token_num: int

    @property
    def max_tree_depth(self) -> int:
        return self.spec_steps + 1


@dataclass
class ScheduleBatch:
    reqs: list[Req]
    spec_info: EagleVerifyInput | None = None
    seq_lens: torch.Tensor | None = None  # [bs] committed tokens per request
    input_ids: torch.Tensor | None = None  # [bs] a decode step's input without speculation

    def batch_size(self) -> int:
        return len(self.reqs)


@dataclass
class LogitsProcessorOutput:
    hidden_states: torch.Tensor  # EAGLE3: packed aux [bs*N, K*H]; EAGLE: final hidden [bs*N, H]
    next_token_logits: torch.Tensor | None = None


@dataclass
class GenerationBatchResult:
    logits_output: LogitsProcessorOutput
    next_token_ids: torch.Tensor  # [bs*N]; block i: first accept_lens[i] = committed tokens
    accept_lens: torch.Tensor  # [bs] int32 = correct drafts + 1
    accept_index: torch.Tensor  # [bs, spec_steps+1] int32 global node index, -1 padded
    speculative_num_draft_tokens: int = 0


class ToyEagle3Engine:
    def __init__(
        self,
        target_path: str | None = None,
        draft_path: str | None = None,
        spec: SpecArgs | None = None,
        batch_size: int = 8,
        max_new_tokens: int = 96,
        prompt_len: int = 48,
        num_prompts: int | None = None,
        seed: int = 0,
        max_steps: int | None = None,
        prompts: torch.Tensor | None = None,
        threads: int | None = 1,
    ):
        from .paths import draft_dir, target_dir

        if threads:
            torch.set_num_threads(threads)
        target_path = target_path or target_dir()
        draft_path = draft_path or draft_dir()
        requested = spec or SpecArgs()
        if requested.algorithm == NO_SPECULATION:  # the other flags mean nothing then (SGLang ignores them)
            requested = SpecArgs(NO_SPECULATION, None, None, None)
        import json

        with open(os.path.join(target_path, "config.json")) as f:
            arch = (json.load(f).get("architectures") or [None])[0]
        effective, rewrites = resolve_spec_args(requested, arch)
        # Without speculation no draft is loaded or run: the baseline's cost is the target's alone.
        self.speculates = effective.algorithm != NO_SPECULATION
        if not self.speculates:
            draft_path = None
        elif effective.topk != 1:
            raise ValueError(
                "toy engine: --speculative-eagle-topk > 1 (tree drafting) is not implemented; use topk 1"
            )
        self.server_args = ServerArgs(
            target_path,
            draft_path,
            requested,
            effective,
            rewrites,
            batch_size,
            max_new_tokens,
            prompt_len,
            seed,
        )
        self.spec = effective
        self.max_steps = max_steps

        # target
        self.target = load_target(target_path)
        # draft
        self.draft: ToyEagle3Draft | None = None
        if draft_path is not None:
            self.draft = ToyEagle3Draft(ToyEagle3Config.load(draft_path))
            self.draft.set_embed(self.target.model.embed_tokens)
            self.draft.load_state(torch.load(os.path.join(draft_path, "model.pt"), weights_only=True))
            self.draft.eval().requires_grad_(False)
        # aux capture wiring, as SGLang does it
        self.spec_aux_ids: list[int] | None = None
        self.use_aux_hidden_state = False
        if effective.algorithm == "EAGLE3" and draft_path is not None:
            self.use_aux_hidden_state, self.spec_aux_ids = read_eagle_config(draft_path)
            if self.use_aux_hidden_state:
                self.target.set_eagle3_layers_to_capture(self.spec_aux_ids)

        self.batch_size = batch_size
        self.max_new_tokens = max_new_tokens
        self.prompt_len = prompt_len
        if prompts is not None:
            self._prompts = iter(prompts.tolist())
            self._remaining: int | None = prompts.shape[0]
        else:
            self._prompts = prompt_stream(prompt_len, seed)
            self._remaining = num_prompts
        self._next_rid = 0
        self.batch: ScheduleBatch | None = None
        self.finished: list[Req] = []
        self.num_steps_done = 0
        self.stats = {"verify_steps": 0, "request_steps": 0, "accept_len_sum": 0, "tokens": 0}
        N = effective.num_draft_tokens if self.speculates else 1
        assert N is not None  # resolve_spec_args always sets it (or raises)
        self.width = N  # tokens per request per step, root included
        self._ar_n = torch.arange(N)
        self._next_tok = torch.cat([torch.arange(1, N), torch.tensor([-1])])
        self._max_len = prompt_len + max_new_tokens + N + 2

    # ------------------------------------------------------------------ batches
    def _take_prompts(self) -> list[list[int]]:
        n = self.batch_size if self._remaining is None else min(self.batch_size, self._remaining)
        out = []
        for _ in range(n):
            try:
                out.append(list(next(self._prompts)))
            except StopIteration:
                break
        if self._remaining is not None:
            self._remaining -= len(out)
        return out

    def new_batch(self) -> ScheduleBatch | None:
        prompts = self._take_prompts()
        if not prompts:
            return None
        reqs = []
        for p in prompts:
            reqs.append(Req(rid=f"toy-{self._next_rid}", prompt=p, max_new_tokens=self.max_new_tokens))
            self._next_rid += 1
        batch = ScheduleBatch(reqs=reqs)
        self.prefill(batch, torch.tensor(prompts, dtype=torch.long))
        return batch

    # ------------------------------------------------------------------ forward pieces
    @torch.no_grad()
    def prefill(self, batch: ScheduleBatch, prompts: torch.Tensor) -> None:
        """Target prefill (aux captured) + draft extend over the prompt rows."""
        bs, L = prompts.shape
        self.tcache = self.target.new_cache(bs, self._max_len)
        if self.draft is not None:
            self.dcache = self.draft.new_cache(bs, self._max_len)
        zeros = torch.zeros(bs, dtype=torch.long)
        logits, hid = self.target(prompts, self.tcache, zeros)
        first = logits[:, -1].argmax(-1)
        self.tokens = torch.zeros(bs, self._max_len, dtype=torch.long)
        self.tokens[:, :L] = prompts
        self.tokens[:, L] = first
        self.prompt_lens = torch.full((bs,), L, dtype=torch.long)
        self.C = torch.full((bs,), L + 1, dtype=torch.long)
        self.max_new = torch.tensor([r.max_new_tokens for r in batch.reqs], dtype=torch.long)
        batch.seq_lens = self.C
        self.stats["tokens"] += bs
        if self.draft is None:
            return
        # draft extend: row p (aux at position p) pairs with token p+1; last row with `first`
        ids = torch.cat((prompts[:, 1:], first[:, None]), dim=1)
        dlogits, pre = self.draft(ids, hid, self.dcache, zeros)
        self.d_first = self.draft.hot_token_id[dlogits[:, -1].argmax(-1)]
        self.d_hidden = pre[:, -1:]

    @torch.no_grad()
    def run_draft(self, batch: ScheduleBatch) -> EagleVerifyInput:
        """Chain drafting: ``num_steps`` proposals, the first from the extend state, the rest from the
        draft's own hidden output (run ``num_steps - 1`` times). SGLang's ``EagleDraftWorker.draft``;
        named ``run_draft`` here because ``engine.draft`` is the draft model."""
        S, N = self.spec.num_steps, self.spec.num_draft_tokens
        assert S is not None and N is not None and self.draft is not None  # resolved in __init__
        bs = self.C.shape[0]
        base = self.C - 1  # draft cache length == positions already drafted over
        root = self.tokens.gather(1, base[:, None])
        toks = [root, self.d_first[:, None]]
        hidden = self.d_hidden
        hot = self.draft.hot_token_id
        for j in range(1, S):
            dlogits, hidden = self.draft(toks[-1], hidden, self.dcache, base + (j - 1))
            toks.append(hot[dlogits[:, -1].argmax(-1)][:, None])
        draft_tokens = torch.cat(toks, dim=1)  # [bs, N]
        positions = base[:, None] + self._ar_n
        vi = EagleVerifyInput(
            draft_token=draft_tokens.reshape(-1),
            positions=positions.reshape(-1),
            retrieve_next_token=self._next_tok.expand(bs, N).clone(),
            retrieve_next_sibling=torch.full((bs, N), -1, dtype=torch.long),
            spec_steps=S,
            topk=1,
            draft_token_num=N,
        )
        batch.spec_info = vi
        return vi

    @torch.no_grad()
    def verify(self, batch: ScheduleBatch) -> GenerationBatchResult:
        """Target forward over the chain (root + proposals) and greedy acceptance."""
        vi = batch.spec_info
        assert vi is not None  # set by run_draft
        N = vi.draft_token_num
        bs = len(batch.reqs)
        tokens = vi.draft_token.view(bs, N)
        logits, hid = self.target(tokens, self.tcache, self.C - 1)
        predict = logits.argmax(-1)  # [bs, N]
        match = (tokens[:, 1:] == predict[:, :-1]).to(torch.int32)
        correct = match.cumprod(dim=1).sum(dim=1)
        accept_lens = (correct + 1).to(torch.int32)
        gidx = torch.arange(bs)[:, None] * N + self._ar_n[: vi.spec_steps + 1]
        accept_index = torch.where(self._ar_n[: vi.spec_steps + 1] < accept_lens[:, None], gidx, -1).to(
            torch.int32
        )
        return GenerationBatchResult(
            logits_output=LogitsProcessorOutput(hidden_states=hid.reshape(bs * N, -1)),
            next_token_ids=predict.reshape(-1),
            accept_lens=accept_lens,
            accept_index=accept_index,
            speculative_num_draft_tokens=N,
        )

    @torch.no_grad()
    def draft_extend(self, batch: ScheduleBatch, result: GenerationBatchResult, old_C: torch.Tensor) -> None:
        """Draft forward over the whole verify width (fc over the packed aux); the state of row
        ``accept_lens - 1`` seeds the next draft; rows beyond are overwritten later."""
        assert self.draft is not None  # only with speculation
        N = result.speculative_num_draft_tokens
        bs = old_C.shape[0]
        hid = result.logits_output.hidden_states.view(bs, N, -1)
        ids = result.next_token_ids.view(bs, N)
        dlogits, pre = self.draft(ids, hid, self.dcache, old_C - 1)
        last = result.accept_lens.long() - 1
        ar = torch.arange(bs)
        self.d_first = self.draft.hot_token_id[dlogits[ar, last].argmax(-1)]
        self.d_hidden = pre[ar, last][:, None]

    @torch.no_grad()
    def decode(self, batch: ScheduleBatch) -> GenerationBatchResult:
        """Without speculation: one target forward over each request's last committed token, whose
        greedy successor is committed (SGLang's plain decode). The draft never runs."""
        bs = len(batch.reqs)
        last = self.tokens.gather(1, (self.C - 1)[:, None])  # [bs, 1]
        batch.input_ids = last.reshape(-1)
        logits, hid = self.target(last, self.tcache, self.C - 1)
        return GenerationBatchResult(
            logits_output=LogitsProcessorOutput(hidden_states=hid.reshape(bs, -1)),
            next_token_ids=logits[:, -1].argmax(-1),
            accept_lens=torch.ones(bs, dtype=torch.int32),
            accept_index=torch.arange(bs, dtype=torch.int32)[:, None],
            speculative_num_draft_tokens=1,
        )

    def _commit(self, result: GenerationBatchResult) -> torch.Tensor:
        N = result.speculative_num_draft_tokens
        bs = self.C.shape[0]
        old_C = self.C
        pos = old_C[:, None] + self._ar_n
        self.tokens[torch.arange(bs)[:, None], pos] = result.next_token_ids.view(bs, N)
        acc = result.accept_lens.long()
        self.C = torch.minimum(old_C + acc, self.prompt_lens + self.max_new)
        return old_C

    def _retire(self, batch: ScheduleBatch) -> None:
        done = (self.C - self.prompt_lens) >= self.max_new
        if not bool(done.any()):
            return
        dl = done.tolist()
        keep = [i for i, d in enumerate(dl) if not d]
        C = self.C.tolist()
        for i, d in enumerate(dl):
            if d:
                r = batch.reqs[i]
                r.output_ids = self.tokens[i, len(r.prompt) : C[i]].tolist()
                r.finished = True
                self.finished.append(r)
        if not keep:
            self.batch = None
            return
        k = torch.tensor(keep)
        batch.reqs = [batch.reqs[i] for i in keep]
        self.tcache.select(k)
        names = ["tokens", "prompt_lens", "C", "max_new"]
        if self.draft is not None:
            self.dcache.select(k)
            names += ["d_first", "d_hidden"]
        for name in names:
            setattr(self, name, getattr(self, name)[k])
        batch.seq_lens = self.C

    # ------------------------------------------------------------------ loop
    def step(self) -> GenerationBatchResult | None:
        """One decode iteration: draft -> verify -> commit -> draft extend -> retire (without
        speculation: decode -> commit -> retire). Starts a new batch from the workload when none is running; None when exhausted."""
        if self.batch is None:
            self.batch = self.new_batch()
            if self.batch is None:
                return None
            self._retire(self.batch)  # max_new_tokens == 1
            if self.batch is None:
                return self.step()
        batch = self.batch
        if self.speculates:
            self.run_draft(batch)
            result = self.verify(batch)
            old_C = self._commit(result)
            self.draft_extend(batch, result, old_C)
        else:
            result = self.decode(batch)
            self._commit(result)
        batch.seq_lens = self.C
        st = self.stats
        st["verify_steps"] += 1
        st["request_steps"] += len(batch.reqs)
        st["accept_len_sum"] += int(result.accept_lens.sum())
        self._retire(batch)
        self.num_steps_done += 1
        return result

    def run(self, max_steps: int | None = None, on_step: Callable | None = None) -> dict:
        """Run until ``max_steps`` decode steps (default: ``self.max_steps``) or the workload ends."""
        max_steps = self.max_steps if max_steps is None else max_steps
        t0 = time.perf_counter()
        n = 0
        while max_steps is None or n < max_steps:
            res = self.step()
            if res is None:
                break
            n += 1
            if on_step is not None:
                on_step(self, res)
        dt = time.perf_counter() - t0
        out: dict[str, float] = dict(self.stats)
        out["seconds"] = dt
        out["mean_accept_length"] = self.mean_accept_length()
        return out

    # ------------------------------------------------------------------ external requests
    @property
    def context_length(self) -> int:
        """Longest sequence (prompt + new tokens) a request may reach (SGLang's ``context_len``)."""
        override = getattr(self, "_context_length", None)
        return int(override or self.target.config.max_position_embeddings)

    @context_length.setter
    def context_length(self, value: int | None) -> None:
        self._context_length = value

    def run_requests(self, reqs: list[Req], on_step: Callable | None = None) -> list[Req]:
        """Serve externally given requests (the HTTP front) to completion instead of the synthetic
        workload: batched by prompt length (the prefill takes equal-length prompts), at most
        ``batch_size`` at a time. Fills ``output_ids`` and the per-request speculative counters."""
        groups: dict[int, list[Req]] = {}
        for r in reqs:
            groups.setdefault(len(r.prompt), []).append(r)
        for group in groups.values():
            for i in range(0, len(group), self.batch_size):
                self._serve_batch(group[i : i + self.batch_size], on_step)
        return reqs

    def _serve_batch(self, reqs: list[Req], on_step: Callable | None) -> None:
        assert self.batch is None, "run_requests while a workload batch is running"
        N = self.width
        L = len(reqs[0].prompt)
        self._max_len = L + max(r.max_new_tokens for r in reqs) + N + 2
        batch = ScheduleBatch(reqs=list(reqs))
        self.prefill(batch, torch.tensor([r.prompt for r in reqs], dtype=torch.long))
        self.batch = batch
        self._retire(batch)  # max_new_tokens == 1
        while self.batch is not None:
            running = list(self.batch.reqs)
            result = self.step()
            if result is None:
                break
            for r, a in zip(running, result.accept_lens.tolist(), strict=True):
                correct = int(a) - 1
                r.spec_verify_ct += 1
                r.spec_num_correct_drafts += correct
                hist = r.spec_correct_drafts_histogram
                if len(hist) < N:
                    hist.extend([0] * (N - len(hist)))
                hist[correct] += 1
            if on_step is not None:
                on_step(self, result)
        done = {id(r) for r in reqs}
        self.finished = [r for r in self.finished if id(r) not in done]

    def mean_accept_length(self) -> float:
        st = self.stats
        return st["accept_len_sum"] / st["request_steps"] if st["request_steps"] else float("nan")
