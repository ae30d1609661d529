"""Rollouts on Ray: inference workers with dynamic batching, asynchronous group rollouts, logs, viewer."""
from webrl.rollout.async_collector import AsyncCollector
from webrl.rollout.coordinator import RolloutConfig, RolloutCoordinator, RolloutStats
from webrl.rollout.episode import EpisodeInfraError
from webrl.rollout.inference import DynamicBatcher, InferenceActor, InferenceConfig, InferenceWorker
from webrl.rollout.progress import ProgressBar, TrajectoryLog
from webrl.rollout.viewer import view_run

__all__ = ["AsyncCollector", "EpisodeInfraError", "RolloutConfig", "RolloutCoordinator", "RolloutStats",
           "DynamicBatcher", "InferenceActor", "InferenceConfig", "InferenceWorker", "ProgressBar", "TrajectoryLog",
           "view_run"]
