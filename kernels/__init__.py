"""webrl.kernels: fused token log-prob / entropy without materialising (tokens × vocab) logits.

    from webrl.kernels import token_logprobs
    logprobs, entropy = token_logprobs(hidden, model.lm_head.weight, targets, temperature,
                                       mask=response_mask)

Paths: Triton kernels on CUDA (`triton_logprobs`), a chunked torch autograd.Function elsewhere
(`chunked`), and the naive `token_logprobs_reference` for tests and benchmarks. Set
WEBRL_KERNEL=triton|torch|auto to force a path. Triton is imported only when its path runs.

Sparse prefill (MMInference-style, `sparse_prefill`): `build_block_plan` then
`sparse_prefill_attention` (Triton kernel `triton_sparse_prefill`, torch reference otherwise);
per-head pattern search in `pattern_search`.
"""
from webrl.kernels.dispatch import (
    ENV_VAR,
    KernelBackendError,
    TokenLogprobsConfig,
    resolve_backend,
    token_logprobs,
)
from webrl.kernels.reference import token_logprobs_reference
from webrl.kernels.sparse_prefill import (
    PATTERNS,
    BlockPlan,
    ImageSpan,
    ModalityLayout,
    SparsePrefillConfig,
    SparsePrefillError,
    block_sparse_attention_reference,
    build_block_plan,
    layout_from_ids,
    sparse_prefill_attention,
)

__all__ = [
    "ENV_VAR",
    "KernelBackendError",
    "TokenLogprobsConfig",
    "resolve_backend",
    "token_logprobs",
    "token_logprobs_reference",
    "PATTERNS",
    "BlockPlan",
    "ImageSpan",
    "ModalityLayout",
    "SparsePrefillConfig",
    "SparsePrefillError",
    "block_sparse_attention_reference",
    "build_block_plan",
    "layout_from_ids",
    "sparse_prefill_attention",
]
