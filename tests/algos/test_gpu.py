"""The objectives give the same loss, gradients and metrics on CUDA as on CPU."""
import pytest
import torch

from webrl.algos import (OBJECTIVES, BatchExtras, GRPOConfig, LearnerOutputs, PolicyLossConfig, PPOConfig, SFTConfig,
                         full_batch_scale, group_advantages)
from webrl.types import Batch

from .helpers import random_batch


def _run(name: str, device: str):
    batch, logp, entropy = random_batch(5, num_samples=6, width=12, empty_rows=(4,))
    gen = torch.Generator().manual_seed(9)
    B, T = batch.loss_mask.shape
    extras = BatchExtras(proximal_logprobs=batch.old_logprobs + 0.1 * torch.randn(B, T, generator=gen),
                         old_values=torch.randn(B, generator=gen), returns=torch.randn(B, generator=gen),
                         action_mask=torch.rand(B, T, generator=gen) < 0.5,
                         coordinate_mask=torch.rand(B, T, generator=gen) < 0.2)
    move = {f: getattr(batch, f).to(device) for f in ("input_ids", "attention_mask", "loss_mask", "old_logprobs",
                                                       "advantages", "ref_logprobs", "group_index", "trajectory_index")}
    batch = Batch(**move)
    extras = BatchExtras(**{k: v.to(device) for k, v in vars(extras).items()})
    leaves = [logp.detach().to(device).requires_grad_(True), entropy.detach().to(device).requires_grad_(True),
              torch.randn(B, generator=gen).to(device).requires_grad_(True)]
    loss_cfg = PolicyLossConfig(aggregation="traj-mean-token-mean", kl_coef=0.05, entropy_coef=0.01, tis_cap=2.0,
                                dual_clip_c=3.0)
    config = {"grpo": GRPOConfig(loss=loss_cfg), "ppo": PPOConfig(loss=loss_cfg), "sft": SFTConfig()}[name]
    scale = full_batch_scale(batch, config, extras)
    loss, metrics = OBJECTIVES[name](LearnerOutputs(*leaves), batch, config, extras=extras, scale=scale)
    loss.backward()
    grads = [torch.zeros(1) if t.grad is None else t.grad.cpu() for t in leaves]
    adv = group_advantages(torch.tensor([1.0, 0, 1, 1, 0, 0]).to(device), torch.tensor([0, 0, 0, 1, 1, 1]).to(device),
                           GRPOConfig())
    return float(loss.detach()), metrics, grads, adv.advantages.cpu()


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_cuda_matches_cpu(name):
    cpu, gpu = _run(name, "cpu"), _run(name, "cuda")
    assert gpu[0] == pytest.approx(cpu[0], rel=1e-5, abs=1e-6)
    assert gpu[1] == pytest.approx(cpu[1], rel=1e-5, abs=1e-6)
    for a, b in zip(gpu[2], cpu[2]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gpu[3], cpu[3])
