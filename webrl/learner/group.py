"""`LearnerGroup`: N `LearnerWorker` ranks behind a few coarse methods.

    run = LearnerRun(model_path, seed, temperature, min_pixels, max_pixels)  # what the run derives
    group = LearnerGroup(config, run, num_ranks=2)           # Ray actors in a placement group
    metrics = group.update(samples)                          # one policy version
    ref = group.get_weights_ref()                            # object-store weight sync
    address = group.host_weight_group(timeout_s)             # or a broadcast group with the receivers:
    group.join_weight_group(world_size, "gloo", name, timeout_s)   # (beside their joins), then per sync
    group.broadcast_weights(bucket_bytes, version)           # (beside their receive_weights)
    group.save(f"{root}/step-{k:08d}", client_state={...}); group.load(path)

The group is the controller of an update (the single-controller pattern): it plans
mini-batches, micro-batches and the split across ranks (`webrl.learner.batching`), computes the
loss scale over each optimizer step's samples, and asks every rank to run its part. Ranks only
collate and run the samples they were sent.

Placement: by default the group reserves its own placement group of `num_ranks` bundles
(`resources_per_rank`, PACK). Inside a Ray Tune trial pass the trial's placement group and
the index of the first bundle meant for the learner (`bundle_offset`). `use_ray=False` runs
one rank in this process, or several as spawned child processes (tests, notebooks, benchmarks);
`webrl.learner.ranks` holds the three.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

from webrl.algos import full_batch_scale
from webrl.learner.batching import mini_batch_indices, plan_update
from webrl.learner.config import LearnerConfig, LearnerRun
from webrl.learner.consistency import logprob_mismatch, mismatch_alarm
from webrl.learner.metrics import merge_metrics
from webrl.learner.ranks import LocalRanks, ProcessRanks, RayRanks
from webrl.learner.samples import LearnerSample, scale_batch
from webrl.learner.weight_broadcast import ServerTargets
from webrl.learner.vllm_transfer import VLLMTargets
from webrl.learner.weight_buckets import TensorSpec
from webrl.learner.weights import WeightUpdate
from webrl.learner.worker import ForwardResult, StepScale


class LearnerGroup:
    """The learner as one object: update, log-probs, weights, checkpoints.

    config: the learner section (engine, objective, batching); run: the values the run derives
    (model path, seed, rollout temperature, prompt pixel bounds), see `LearnerRun`."""

    def __init__(self, config: LearnerConfig, run: LearnerRun, num_ranks: int = 1, *, use_ray: bool = True,
                 resources_per_rank: Optional[dict[str, float]] = None, placement_group=None,
                 bundle_offset: int = 0, env_vars: Optional[dict[str, str]] = None,
                 startup_timeout_s: float = 900.0):
        if not isinstance(run, LearnerRun):
            raise TypeError(f"LearnerGroup needs a LearnerRun as its second argument, got {type(run).__name__}")
        if num_ranks < 1:
            raise ValueError(f"num_ranks must be >= 1, got {num_ranks}")
        self.config, self.run, self.num_ranks = config, run, num_ranks
        resources = resources_per_rank or {"CPU": 1}
        cpus = int(resources.get("CPU", 1))
        if use_ray:
            self.ranks = RayRanks(config, run, num_ranks, resources, placement_group, bundle_offset, env_vars,
                                  startup_timeout_s)
        else:
            self.ranks = (LocalRanks(config, run, cpus) if num_ranks == 1
                          else ProcessRanks(config, run, num_ranks, cpus))
        self.policy_version = 0

    def memory_stats(self) -> list:
        """Every rank's `LearnerWorker.memory_stats()` (benchmarks/learner_step.py reads them)."""
        return self._all("memory_stats")

    # -- helpers --------------------------------------------------------------------------------
    def _all(self, method: str, *args) -> list:
        return self.ranks.call(method, [args] * self.num_ranks)

    def _plans(self, samples: Sequence[LearnerSample]):
        """Per rank: (its samples, its micro-batches re-indexed into them)."""
        b = self.config.batching
        plans = plan_update([s.length for s in samples], self.num_ranks, b.token_budget,
                            b.max_samples_per_micro_batch)
        out = []
        for plan in plans:
            owned = sorted({i for mb in plan for i in mb})
            local = {g: k for k, g in enumerate(owned)}
            out.append((owned, [[local[i] for i in mb] for mb in plan]))
        return out

    @staticmethod
    def _filler(samples: Sequence[LearnerSample]) -> LearnerSample:
        return min(samples, key=lambda s: s.length)

    # -- coarse methods ---------------------------------------------------------------------------
    def compute_logprobs(self, samples: Sequence[LearnerSample], reference: bool = False) -> ForwardResult:
        """Response log-probs (and values, with a value head) of every sample, in order."""
        if not samples:
            return ForwardResult([], None)
        filler = self._filler(samples)
        per_rank = self._plans(samples)
        results = self.ranks.call("forward_only", [([samples[g] for g in owned], plan, filler, reference)
                                                   for owned, plan in per_rank])
        merged: dict[int, Any] = {}
        for (owned, _), result in zip(per_rank, results):
            merged.update({owned[k]: value for k, value in result.items()})
        logprobs = [merged[i][0] for i in range(len(samples))]
        values = [merged[i][1] for i in range(len(samples))]
        return ForwardResult(logprobs, values if self.config.value_head else None)

    def update(self, samples: Sequence[LearnerSample]) -> dict[str, float]:
        """Train on `samples` (ppo_epochs x mini_batches optimizer steps); the weights become
        the next policy version. Returns metrics averaged over the optimizer steps."""
        if not samples:
            raise ValueError("LearnerGroup.update needs at least one sample")
        samples, consistency = self._prepare(list(samples))
        b = self.config.batching
        step_metrics = []
        for epoch in range(b.ppo_epochs):
            seed = hash((self.run.seed, self.policy_version, epoch)) % 2**31  # resume-exact
            for indices in mini_batch_indices(len(samples), b.mini_batches, seed):
                if indices:
                    step_metrics.append(self._optimizer_step([samples[i] for i in indices]))
        self.policy_version = self._all("end_update")[0]
        keys = sorted({k for m in step_metrics for k in m})
        metrics = {k: sum(m[k] for m in step_metrics if k in m) / sum(1 for m in step_metrics if k in m)
                   for k in keys}
        metrics.update(policy_version=float(self.policy_version), optimizer_steps=float(len(step_metrics)))
        metrics.update(consistency)
        return metrics

    def _prepare(self, samples: list[LearnerSample]) -> tuple[list[LearnerSample], dict[str, float]]:
        """Attach reference log-probs (KL), proximal log-probs (several steps or TIS) and, for
        PPO, old values with GAE advantages and returns; the rollout-vs-learner mismatch metrics
        of the start-of-update log-probs, when computed. PPO with kl_mode="reward" takes each
        turn's KL to the reference off its reward before GAE (`webrl.learner.credit.gae_stage`); GRPO's
        reward-mode KL is applied per token by the objective.

        A turn without rollout log-probs takes the start-of-update ones as its old policy (counted
        in "rollout_logprobs_filled"). Off-policy semantics: one optimizer step without tis_cap
        takes the ratio against the rollout's log-probs; otherwise against the proximal ones (the
        learner at the start of the update), and the rollout's enter only the truncated importance
        weights. PPO's old values are the value head's at the start of the update (one forward pass
        gives them together with the proximal log-probs).
        """
        from webrl.learner.credit import gae_stage

        if self.config.objective == "sft":
            return samples, {}
        loss, check = self.config.objective_config.loss, self.config.consistency
        steps = self.config.batching.ppo_epochs * self.config.batching.mini_batches
        if self.config.reference != "none":
            ref = self.compute_logprobs(samples, reference=True).logprobs
            samples = [dataclasses.replace(s, ref_logprobs=r.tolist()) for s, r in zip(samples, ref)]
        proximal = steps > 1 or loss.tis_cap is not None
        values = self.config.objective == "ppo"
        # turns whose engine could not report their sampling log-probs (a cascade head turn's forced
        # ids on an SGLang server at a temperature other than 1): the learner's start-of-update ones
        unknown = {i for i, s in enumerate(samples) if s.response_ids and not s.rollout_logprobs}
        if not (proximal or values or unknown or (check.every and self.policy_version % check.every == 0)):
            return samples, {}
        start = self.compute_logprobs(samples)
        prox = [p.tolist() for p in start.logprobs]
        metrics = logprob_mismatch(samples, prox, check.turn_threshold)
        alarm = mismatch_alarm(metrics, check)
        if metrics:
            metrics["mismatch_alarm"] = float(alarm is not None)
        if unknown:
            samples = [dataclasses.replace(s, rollout_logprobs=prox[i]) if i in unknown else s
                       for i, s in enumerate(samples)]
            metrics["rollout_logprobs_filled"] = float(len(unknown))
        if alarm:
            print(f"webrl: ALARM at policy version {self.policy_version}: {alarm}", flush=True)
        if proximal:
            samples = [dataclasses.replace(s, proximal_logprobs=p) for s, p in zip(samples, prox)]
        if values:
            kl = self._turn_kl(samples, prox) if loss.kl_mode == "reward" and loss.kl_coef > 0 else None
            samples, gae = gae_stage(samples, start.values, self.config.objective_config, kl_penalty=kl)
            metrics.update(gae)
        return samples, metrics

    def _turn_kl(self, samples: Sequence[LearnerSample], start: Sequence[list[float]]) -> list[float]:
        """(S,) per turn sample: KL of the start-of-update policy to the reference, summed over
        the response tokens (`algos.kl_reward_penalty`), for PPO's kl_mode="reward"."""
        import torch

        from webrl.algos import kl_reward_penalty

        if self.config.reference == "none":
            raise ValueError("kl_mode='reward' with kl_coef > 0 needs LearnerConfig.reference 'copy' or 'snapshot'")
        estimator = self.config.objective_config.loss.kl_estimator
        out = []
        for s, logprobs in zip(samples, start):
            ones = torch.ones(1, len(logprobs))
            out.append(float(kl_reward_penalty(torch.tensor([logprobs]), torch.tensor([s.ref_logprobs]), ones,
                                               estimator=estimator)[0]))
        return out

    def _optimizer_step(self, samples: Sequence[LearnerSample]) -> dict[str, float]:
        batch, extras = scale_batch(samples)
        scale = full_batch_scale(batch, self.config.objective_config, extras)
        weights = scale.sample_weight.tolist()
        filler = self._filler(samples)
        args = [([samples[g] for g in owned], plan,
                 StepScale([weights[g] for g in owned], float(scale.normalizer), float(scale.num_samples)), filler)
                for owned, plan in self._plans(samples)]
        rank_metrics = self.ranks.call("train_step", args)
        return merge_metrics([(m, m.get("num_tokens", 0.0)) for m in rank_metrics])

    def get_weights(self) -> WeightUpdate:
        """Trainable weights with their policy version (gathered from ZeRO-3 shards)."""
        return self._all("get_weights")[0]

    def get_weights_ref(self):
        """The same, put once into Ray's object store: hand the ref to every inference worker."""
        import ray

        return ray.put(self.get_weights())

    # -- weight broadcast (learner.weight_sync.mode=collective) -----------------------------------
    def weight_specs(self) -> list[TensorSpec]:
        """Name, full shape and dtype of every tensor a broadcast carries, in order."""
        return self.ranks.call("weight_specs", [()] * self.num_ranks)[0]

    def host_weight_group(self, timeout_s: float) -> tuple[str, int]:
        """Rank 0 opens a weight-broadcast group's rendezvous store: (address, port) for the receivers."""
        return self._all("host_weight_group", timeout_s)[0]

    def join_weight_group(self, world_size: int, backend: str, group_name: str, timeout_s: float,
                          members: Sequence[str] = ()) -> None:
        """Rank 0 joins as rank 0; blocks until the receivers have joined (run it beside their joins)."""
        self._all("join_weight_group", world_size, backend, group_name, timeout_s, list(members))

    def join_vllm_servers(self, servers: VLLMTargets) -> None:
        """Rank 0 forms an NCCL group with vLLM servers over their weight-transfer routes (blocks
        until they have joined); every rank is asked, only rank 0 acts."""
        self._all("join_vllm_servers", servers)

    def broadcast_weights(self, bucket_bytes: int, version: Optional[int] = None,
                          servers: Optional[ServerTargets | VLLMTargets] = None) -> dict[str, float]:
        """One broadcast of the trainable weights (every rank gathers under ZeRO-3; rank 0 sends):
        {"buckets", "bytes", "seconds"}. Run it beside the receivers' `receive_weights`."""
        return self._all("broadcast_weights", bucket_bytes, version, servers)[0]

    def full_state_dict(self) -> dict:
        return self._all("full_state_dict")[0]

    def export_hf(self, path: str) -> str:
        """The current policy as a Hugging Face folder at `path`, published atomically (inference servers load it)."""
        return self._all("export_hf", str(path))[0]

    def value_head_state(self) -> Optional[dict]:
        """The value head's parameters on CPU (None without one); collective under ZeRO-3."""
        return self._all("value_head_state")[0]

    def save(self, path: str, client_state: Optional[dict[str, Any]] = None) -> str:
        """Atomic checkpoint at `path`; a `step-N` folder name also prunes to keep_last."""
        return self._all("save", str(path), client_state or {})[0]

    def load(self, path: str) -> dict[str, Any]:
        """Resume from `path`; returns the client_state saved with it."""
        client_state = self._all("load", str(path))[0]
        self.policy_version = self._all("get_policy_version")[0]
        return client_state

    def shutdown(self) -> None:
        self.ranks.shutdown()
