"""webrl.learner: the DeepSpeed learner on Ray.

    LearnerConfig (+ OptimConfig, BatchingConfig, CheckpointConfig)
    LearnerRun                                             what the run derives: model path, seed,
                                                           rollout temperature, pixel bounds
    LearnerSample, samples_from_trajectories, collate     turn samples -> `Batch`
    LearnerWorker                                          one DeepSpeed rank (plain class)
    LearnerGroup                                           N ranks: update / compute_logprobs /
                                                           get_weights / save / load
    WeightUpdate, apply_weight_update                      weight sync to inference
    CheckpointError, verify_checkpoint, latest_checkpoint  checkpoints
"""
from webrl.learner.checkpoint import (CheckpointError, latest_checkpoint, list_checkpoints, prune_checkpoints,
                                      verify_checkpoint)
from webrl.learner.config import BatchingConfig, CheckpointConfig, LearnerConfig, LearnerRun, OptimConfig
from webrl.learner.group import LearnerGroup
from webrl.learner.samples import LearnerSample, collate, samples_from_trajectories
from webrl.learner.weights import WeightUpdate, apply_weight_update
from webrl.learner.worker import ForwardResult, LearnerWorker

__all__ = [
    "BatchingConfig", "CheckpointConfig", "CheckpointError", "ForwardResult", "LearnerConfig", "LearnerGroup",
    "LearnerRun", "LearnerSample", "LearnerWorker", "OptimConfig", "WeightUpdate", "apply_weight_update",
    "collate", "latest_checkpoint", "list_checkpoints", "prune_checkpoints", "samples_from_trajectories",
    "verify_checkpoint",
]
