"""Sampling seeds: every sampled token drawn from a generator seeded from where it was sampled.

A rollout's seed for one decision is `derive_seed(run.seed, group id, member, turn)`: the group
id names the iteration, the task's place in the iteration's draw and the task (`"3:0:widgets/.."`),
the member its trajectory within the group. Wrappers that sample more than once per decision
(the cascade's follow-up, Dyna's K refinements) derive a sub-seed with a label. So a run with one
seed draws the same tokens whatever the timing, the env slot or the inference worker a request
went to; the numerics of the forward passes are the other half (`run.deterministic`).

Seeds are 31-bit non-negative ints: SGLang's `sampling_seed` and vLLM's `seed` take any int, and
SGLang's seeded sampler mixes the seed with positions in int64 arithmetic; 31 bits keep every
engine's arithmetic away from overflow.
"""
from __future__ import annotations

import hashlib
from typing import Optional, Union

SEED_BITS = 31


def derive_seed(*parts: Union[int, str]) -> int:
    """A seed in [0, 2**31) from `parts` (ints and strings; order matters): the first 8 bytes of
    BLAKE2b over their reprs. Stable across processes and Python versions (no `hash()` salt)."""
    digest = hashlib.blake2b(repr(tuple(parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << SEED_BITS) - 1)


def sub_seed(seed: Optional[int], label: Union[int, str]) -> Optional[int]:
    """The seed of a further sample made for one decision (None stays None: unseeded)."""
    return None if seed is None else derive_seed(seed, label)
