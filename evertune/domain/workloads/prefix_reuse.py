"""Prefix reuse: the share of prompt tokens a prefix cache could have served (pure).

One definition, used by the profiler's profiles (`prefix.share`, the `prefix_reuse_share` of
`profile.ready`) and the sla-monitor's drift test alike, so that a reference taken from a profile
and the live traffic it is compared with measure the same thing:

- a prompt arrives as a chain of keyed hashes, one per full block of `block_tokens` tokens, hash k
  covering tokens [0, (k + 1) x block_tokens) (the gateway's `prefix_hashes`; a last, partial block
  is never hashed, as a prefix cache never reuses it);
- a block is reused when its hash was sent by an earlier request at most `horizon_s` before (a
  cache that keeps blocks that long); only the leading run of such blocks counts, as a cache serves
  a prefix (with chain hashes a seen block's whole prefix was seen at least as recently, so this
  is every seen block);
- the share is reused tokens (reused blocks x block_tokens) over all prompt tokens, partial
  blocks and prompts without a full block included: the share of prefill a cache could skip.

`HORIZON_S` is the horizon both services use unless configured otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

#: Seconds a block stays reusable after it was last sent (the cache horizon) by default.
HORIZON_S = 300.0


def leading_reused(
    chain: Sequence[int], last_seen: Mapping[int, float], *, now: float, horizon_s: float
) -> int:
    """How many leading blocks of `chain` were last sent at or after `now - horizon_s` (by
    `last_seen`: hash -> time it was last sent, before this request)."""
    oldest = now - horizon_s
    reused = 0
    for h in chain:
        when = last_seen.get(h)
        if when is None or when < oldest:
            break
        reused += 1
    return reused


def reused_tokens(blocks: int, *, block_tokens: int, prompt_tokens: int) -> int:
    """Prompt tokens in `blocks` reused leading blocks (never more than the prompt)."""
    return min(blocks * block_tokens, prompt_tokens)
