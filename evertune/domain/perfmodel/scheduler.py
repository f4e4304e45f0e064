"""vLLM V1's scheduler and KV block pool, as plain objects with no clock and no I/O.

The facts modelled (checked against vLLM's `v1/core/sched/scheduler.py`, `kv_cache_manager.py` and
`block_pool.py`; the code here is evertune's own):

- One step has a token budget (`max_num_batched_tokens`). RUNNING requests are scheduled first, in
  order, each with as many of its uncomputed tokens as the budget leaves (a decode needs one; a
  partly prefilled prompt its next chunk). Then WAITING requests, first come first served, while
  the budget lasts and fewer than `max_num_seqs` run. Without chunked prefill a waiting prompt that
  does not fit the budget whole stops the waiting loop.
- A request's tokens need KV blocks of `block_size` tokens. When a running request cannot get a
  block, the LAST running request is preempted (recompute: its blocks are freed, its progress is
  dropped, it goes back to the FRONT of the waiting queue), until the request fits or was itself
  the victim. A step that preempted schedules no waiting request. A waiting request that cannot get
  its blocks stops the waiting loop (it is not preempted for).
- Prefix caching: a full block of prompt tokens is named by a hash chained over the blocks before
  it. On admission the longest run of cached leading blocks is reused, capped so at least the last
  prompt token is computed (vLLM recomputes it to get logits). Blocks are registered in the cache
  when they are allocated for a step. Freed blocks go to the tail of an LRU free queue (a request's
  blocks in reverse order, so its tail is evicted first); a new block is taken from the head, and
  a cached block taken that way loses its hash. A cache hit on a free block takes it out of the
  queue.
- After a step, a request whose computed tokens reach all its known tokens samples one token.

Simplifications (documented in docs/perfmodel.md): only prompt blocks are hashed (the outputs of a
voice turn come back in the next prompt as different text anyway); no `long_prefill_token_threshold`,
priorities, speculative decoding, or async scheduling; a request is never refused for
`max_model_len`.
"""

from __future__ import annotations

import operator
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass

from evertune.errors import InvalidArgument


class SimRequest:
    """One request inside the simulated engine, with its progress (mutable, slotted for speed)."""

    __slots__ = (
        "arrival_s",
        "blocks",
        "cached_blocks",
        "finished_s",
        "first_token_s",
        "gaps",
        "hashes",
        "index",
        "last_token_s",
        "max_tokens",
        "num_computed",
        "output_tokens",
        "preemptions",
        "prompt_tokens",
        "scheduled_s",
    )

    def __init__(
        self, *, index: int, arrival_s: float, prompt_tokens: int, max_tokens: int, hashes: Sequence[int]
    ) -> None:
        if prompt_tokens < 1 or max_tokens < 1:
            raise InvalidArgument(
                f"a request needs at least 1 prompt and 1 output token, got {prompt_tokens} and {max_tokens}"
            )
        self.index = index  #: position in the workload (results come back in this order)
        self.arrival_s = arrival_s  #: when it reached the engine, simulated seconds
        self.prompt_tokens = prompt_tokens  #: prompt length in tokens
        self.max_tokens = max_tokens  #: tokens to generate (ignore_eos: always all of them)
        self.hashes = hashes  #: chained hashes of the prompt's full blocks, in order
        self.num_computed = 0  #: tokens whose KV is computed (or reused from the cache)
        self.output_tokens = 0  #: tokens sampled so far
        self.blocks: list[int] = []  #: KV blocks held, in token order
        self.cached_blocks = 0  #: leading blocks already registered in the prefix cache
        self.preemptions = 0  #: times it was preempted
        self.scheduled_s = -1.0  #: when it was first scheduled (-1: not yet)
        self.first_token_s = -1.0  #: when its first token was sampled (-1: not yet)
        self.last_token_s = -1.0  #: when its latest token was sampled
        self.finished_s = -1.0  #: when its last token was sampled (-1: not finished)
        self.gaps: list[float] = []  #: seconds between consecutive tokens

    @property
    def num_tokens(self) -> int:
        """Tokens the engine knows for it: the prompt and what it has generated."""
        return self.prompt_tokens + self.output_tokens


@dataclass(frozen=True)
class SchedulerConfig:
    """The scheduler knobs of one engine, resolved (no `None`: defaults already applied)."""

    max_num_seqs: int  #: most requests running at once
    max_num_batched_tokens: int  #: token budget of one step
    block_size: int  #: tokens per KV block
    num_blocks: int  #: KV capacity in blocks
    chunked_prefill: bool  #: split prompts across steps
    prefix_caching: bool  #: reuse cached prompt blocks

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "num_blocks"):
            if getattr(self, name) < 1:
                raise InvalidArgument(f"scheduler {name} must be at least 1, got {getattr(self, name)}")


class BlockPool:
    """KV blocks with reference counts, a prefix cache by block hash, and an LRU free queue.

    The free queue is blocks never used yet (ids `fresh..num_blocks-1`, always at its head: they
    have been free since the start) followed by `freed`, the blocks released since, oldest first.
    Keeping the never-used ones as a counter makes a pool of 100,000 blocks free to create.

    Invariant (`check`): every block is either free (reference count 0) or held (count > 0), never
    both; the cache maps each hash to a block that carries that hash.
    """

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks  #: capacity in blocks
        self.ref = [0] * num_blocks  #: holders of each block
        self.hash: list[int | None] = [None] * num_blocks  #: hash a block is cached under
        self.cached: dict[int, int] = {}  #: hash -> block
        self.fresh = 0  #: blocks below this id have been used at least once
        #: Blocks released and not reused since, least recently freed first.
        self.freed: OrderedDict[int, None] = OrderedDict()

    @property
    def free_count(self) -> int:
        """Blocks in the free queue."""
        return self.num_blocks - self.fresh + len(self.freed)

    @property
    def used(self) -> int:
        """Blocks held by some request."""
        return self.num_blocks - self.free_count

    def free_order(self) -> list[int]:
        """The free queue, head (next to be taken) first."""
        return [*range(self.fresh, self.num_blocks), *self.freed]

    def hits(self, hashes: Sequence[int], limit: int) -> list[int]:
        """The cached blocks of the longest run of leading `hashes` (at most `limit` blocks)."""
        # Look all up at once (a prompt's misses are mostly at its tail), then cut at the first miss.
        wanted = hashes if limit >= len(hashes) else hashes[:limit]
        found: list[int | None] = list(map(self.cached.get, wanted))
        if None in found:
            del found[found.index(None) :]
        return found  # type: ignore[return-value]

    def touch(self, blocks: Sequence[int]) -> None:
        """Take hold of cached blocks (out of the free queue if nobody held them)."""
        ref, freed = self.ref, self.freed
        for b in blocks:
            held = ref[b]
            if not held:
                del freed[b]  # a cached block has been used, so it is never a fresh one
            ref[b] = held + 1

    def take(self, n: int) -> list[int]:
        """`n` blocks from the head of the free queue (caller checked there are enough); cached ones
        lose their hash."""
        ref = self.ref
        fresh = self.fresh
        k = min(n, self.num_blocks - fresh)  # never-used blocks first (they head the queue)
        out = list(range(fresh, fresh + k))
        if k:
            ref[fresh : fresh + k] = [1] * k
            self.fresh = fresh + k
            n -= k
        if n:
            freed, hashes, cached = self.freed, self.hash, self.cached
            for _ in range(n):
                b, _none = freed.popitem(last=False)
                h = hashes[b]
                if h is not None:
                    if cached.get(h) == b:
                        del cached[h]
                    hashes[b] = None
                ref[b] = 1
                out.append(b)
        return out

    def release(self, blocks: Sequence[int]) -> None:
        """Drop a hold on `blocks`; those nobody holds go to the free queue's tail, last block first."""
        ref, freed = self.ref, self.freed
        for b in reversed(blocks):
            held = ref[b] - 1
            ref[b] = held
            if not held:
                freed[b] = None

    def register(self, block: int, h: int) -> None:
        """Cache a full block under `h` (a hash already cached keeps its first block)."""
        if h not in self.cached:
            self.cached[h] = block
            self.hash[block] = h

    def check(self) -> None:
        """Assert the pool's invariant (see the class doc)."""
        held = sum(1 for r in self.ref if r > 0)
        assert self.free_count + held == self.num_blocks, "blocks not conserved"
        assert all(self.ref[b] == 0 for b in self.freed), "a held block is in the free queue"
        assert all(b < self.fresh for b in self.freed), "a never-used block was released"
        assert all(r >= 0 for r in self.ref), "negative reference count"
        assert all(self.hash[b] == h for h, b in self.cached.items()), "cache names a block without its hash"


@dataclass(slots=True)
class StepPlan:
    """What one step computes: the scheduled requests and how many tokens of each."""

    requests: list[SimRequest]  #: scheduled requests, in schedule order
    tokens: list[int]  #: new tokens of each (same order)
    preempted: int  #: requests preempted while this step was planned

    @property
    def total_tokens(self) -> int:
        """Tokens computed in the step (never above the budget)."""
        return sum(self.tokens)


class Scheduler:
    """vLLM V1's scheduling loop over a `BlockPool` (see the module doc for the rules).

    `add` puts an arrived request in the waiting queue; `schedule` plans one step; `complete`
    applies the step's results at the time it ended and returns the requests that finished.
    """

    def __init__(self, config: SchedulerConfig, *, check_invariants: bool = False) -> None:
        self.config = config
        self.block_size = config.block_size  #: `config.block_size` (read in the inner loops)
        self.prefix_caching = config.prefix_caching  #: `config.prefix_caching` (likewise)
        self.pool = BlockPool(config.num_blocks)
        self.waiting: deque[SimRequest] = deque()  #: arrived, not running (preempted ones in front)
        self.running: list[SimRequest] = []  #: admitted, holding blocks, in admission order
        self.check_invariants = check_invariants  #: run `BlockPool.check` after every step (tests)
        self.preemptions = 0  #: preemptions so far
        self.prefix_queries = 0  #: prompt tokens looked up in the prefix cache
        self.prefix_hits = 0  #: of those, tokens found cached
        self.prompt_tokens = 0  #: prompt tokens of admitted requests (first admission)
        self.generation_tokens = 0  #: tokens sampled

    @property
    def has_work(self) -> bool:
        """Some request waits or runs."""
        return bool(self.waiting or self.running)

    def add(self, request: SimRequest) -> None:
        """An arrived request joins the waiting queue's tail."""
        self.waiting.append(request)

    def abort(self, request: SimRequest) -> None:
        """Drop a request that is not in a step in flight (a client went away): its blocks are freed."""
        if request in self.waiting:
            self.waiting.remove(request)
        if request in self.running:
            self.running.remove(request)
        self.pool.release(request.blocks)
        request.blocks = []

    def _grow(self, request: SimRequest, upto_tokens: int, hits: Sequence[int] = ()) -> bool:
        """Give `request` blocks for its first `upto_tokens` tokens (reusing `hits` first); False,
        changing nothing, when the free queue has too few."""
        bs = self.block_size
        blocks = request.blocks
        total = -(-upto_tokens // bs)
        needed = total - len(blocks) - len(hits)
        pool = self.pool
        free = pool.num_blocks - pool.fresh + len(pool.freed)  # pool.free_count, inlined
        if needed > free:
            return False
        if hits:
            ref = pool.ref
            for b in hits:
                if not ref[b]:  # a free cached block: taking it leaves one fewer free
                    needed += 1
            if needed > free:
                return False
            pool.touch(hits)
            blocks.extend(hits)
            needed = total - len(blocks)
        if needed > 0:
            blocks.extend(pool.take(needed))
        if self.prefix_caching:
            hashes = request.hashes
            full = upto_tokens // bs
            if full > len(hashes):
                full = len(hashes)
            done = request.cached_blocks
            if done < full:
                # The hit blocks are cached under these very hashes already: register from after them.
                cached, block_hash = pool.cached, pool.hash
                for i in range(done if done > len(hits) else len(hits), full):  # pool.register, inlined
                    h = hashes[i]
                    if h not in cached:
                        b = blocks[i]
                        cached[h] = b
                        block_hash[b] = h
                request.cached_blocks = full
        return True

    def _preempt(self, request: SimRequest) -> None:
        """Recompute preemption: free the request's blocks, drop its progress, front of the queue."""
        self.pool.release(request.blocks)
        request.blocks = []
        request.num_computed = 0
        request.cached_blocks = 0
        request.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(request)

    def schedule(self, now_s: float) -> StepPlan:
        """Plan one step at `now_s`.

        Invariant (asserted): the step's tokens never exceed `max_num_batched_tokens`, at most
        `max_num_seqs` requests run, every scheduled request holds blocks for all the tokens it will
        have computed after the step, and every scheduled request has at least one token to compute.
        """
        cfg = self.config
        budget = cfg.max_num_batched_tokens
        bs = cfg.block_size
        scheduled: list[SimRequest] = []
        tokens: list[int] = []
        preempted = 0
        running = self.running
        i = 0
        while i < len(running) and budget > 0:
            request = running[i]
            n = request.prompt_tokens + request.output_tokens - request.num_computed
            if n > budget:
                n = budget
            upto = request.num_computed + n
            if upto > len(request.blocks) * bs:
                fits = self._grow(request, upto)
                while not fits:
                    victim = running.pop()
                    self._preempt(victim)
                    preempted += 1
                    if victim is request:
                        break
                    fits = self._grow(request, upto)
                if not fits:
                    break
            scheduled.append(request)
            tokens.append(n)
            budget -= n
            i += 1
        if not preempted:
            waiting = self.waiting
            caching = cfg.prefix_caching
            while waiting and budget > 0 and len(running) < cfg.max_num_seqs:
                request = waiting[0]
                known = request.prompt_tokens + request.output_tokens
                hits: list[int] = []
                if caching and request.hashes:
                    # At least the last token is computed, so at most (known - 1) // bs blocks hit.
                    hits = self.pool.hits(request.hashes, (known - 1) // bs)
                computed = len(hits) * bs
                n = known - computed
                if n > budget:
                    if not cfg.chunked_prefill:
                        break
                    n = budget
                if not self._grow(request, computed + n, hits):
                    break
                waiting.popleft()
                running.append(request)
                request.num_computed = computed
                if request.preemptions == 0:
                    self.prompt_tokens += request.prompt_tokens
                if caching:
                    self.prefix_queries += known
                    self.prefix_hits += computed
                if request.scheduled_s < 0:
                    request.scheduled_s = now_s
                scheduled.append(request)
                tokens.append(n)
                budget -= n
        plan = StepPlan(requests=scheduled, tokens=tokens, preempted=preempted)
        # The step's tokens are the budget spent: within it as long as none is left owing.
        assert budget >= 0, "token budget exceeded"
        assert len(running) <= cfg.max_num_seqs, "max_num_seqs exceeded"
        if self.check_invariants:
            for request, n in zip(scheduled, tokens, strict=True):
                assert n > 0, "a scheduled request has nothing to compute"
                assert len(request.blocks) * bs >= request.num_computed + n, "scheduled without blocks"
            self.pool.check()
        return plan

    def decode_limit(self) -> int:
        """Steps the running requests can run as pure decodes with no scheduling decision to make:
        nothing waits, every running request decodes (one known token left to compute), all fit the
        budget, and the free blocks cover every block they will need. Limited by the request
        closest to its `max_tokens`. 0 when the next step is not pure decode."""
        cfg = self.config
        running = self.running
        if self.waiting or not running or len(running) > cfg.max_num_batched_tokens:
            return 0
        k = 1 << 30
        for r in running:
            if r.prompt_tokens + r.output_tokens - r.num_computed != 1:
                return 0
            left = r.max_tokens - r.output_tokens
            if left < k:
                k = left
        bs = cfg.block_size
        free = self.pool.free_count
        total = 0
        for r in running:
            need = -(-(r.num_computed + k) // bs) - len(r.blocks)
            if need > 0:
                total += need
        if total <= free:
            return k

        def blocks_needed(steps: int) -> int:
            total = 0
            for r in running:
                need = -(-(r.num_computed + steps) // bs) - len(r.blocks)
                if need > 0:
                    total += need
            return total

        low, high = 0, k  # blocks_needed(low) <= free < blocks_needed(high)
        while high - low > 1:
            mid = (low + high) // 2
            if blocks_needed(mid) <= free:
                low = mid
            else:
                high = mid
        return low

    def complete_decodes(self, ends: list[float]) -> list[SimRequest]:
        """Apply `len(ends)` pure-decode steps (see `decode_limit`) ending at `ends`, at once: the same
        result as scheduling and completing them one by one, without the per-step work.

        The caller planned at most `decode_limit()` steps when the stretch began; requests that
        arrived meanwhile wait in `waiting` and do not change the running ones.

        Invariant (asserted): every running request was decoding and blocks are conserved.
        """
        k = len(ends)
        assert k > 0, "an empty decode stretch"
        bs = self.config.block_size
        pool = self.pool
        running = self.running
        if self.check_invariants:
            for r in running:
                assert r.prompt_tokens + r.output_tokens - r.num_computed == 1, "a stretch over a non-decode"
        diffs = list(map(operator.sub, ends[1:], ends))
        first, last = ends[0], ends[-1]
        finished: list[SimRequest] = []
        for r in running:
            upto = r.num_computed + k
            need = -(-upto // bs) - len(r.blocks)
            if need > 0:
                r.blocks.extend(pool.take(need))
            r.num_computed = upto
            r.output_tokens += k
            gaps = r.gaps
            gaps.append(first - r.last_token_s)
            gaps.extend(diffs)
            r.last_token_s = last
            if r.output_tokens >= r.max_tokens:
                r.finished_s = last
                finished.append(r)
        self.generation_tokens += k * len(running)
        if finished:
            if len(finished) == len(running):
                self.running = []
            else:
                done = {id(r) for r in finished}
                self.running = [r for r in running if id(r) not in done]
            for request in finished:
                pool.release(request.blocks)
                request.blocks = []
        if self.check_invariants:
            pool.check()
        return finished

    def complete(self, plan: StepPlan, now_s: float) -> list[SimRequest]:
        """Apply a step that ended at `now_s`: computed tokens advance, requests whose known tokens
        are all computed sample one token, and those with `max_tokens` tokens finish (their blocks
        freed). Returns the finished requests.

        Invariant (asserted): no request computes past its known tokens, and blocks are conserved.
        """
        finished: list[SimRequest] = []
        sampled = 0
        for request, n in zip(plan.requests, plan.tokens, strict=True):
            computed = request.num_computed + n
            request.num_computed = computed
            output = request.output_tokens
            known = request.prompt_tokens + output
            assert computed <= known, "computed past the known tokens"
            if computed == known:
                output += 1
                request.output_tokens = output
                sampled += 1
                if request.first_token_s < 0:
                    request.first_token_s = now_s
                else:
                    request.gaps.append(now_s - request.last_token_s)
                request.last_token_s = now_s
                if output >= request.max_tokens:
                    request.finished_s = now_s
                    finished.append(request)
        self.generation_tokens += sampled
        if finished:
            done = {id(r) for r in finished}
            self.running = [r for r in self.running if id(r) not in done]
            for request in finished:
                self.pool.release(request.blocks)
                request.blocks = []
        if self.check_invariants:
            self.pool.check()
        return finished
