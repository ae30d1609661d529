"""Seconds per weight sync, object store vs broadcast group, learner -> in-process inference workers.

    .venv/bin/python benchmarks/weight_sync.py [--receivers 2] [--syncs 3] [--bucket-mb 256]
        [--models tiny,mid] [--out benchmarks/results/weight_sync_2026-12-01/results.json] [--work DIR]

One Ray learner rank (ZeRO 0, float32 on CPU, no update needed: only the sync is timed) and
`--receivers` InferenceActors with the transformers engine, on a local Ray. For each model:
  object_store  `LearnerGroup.get_weights_ref()` (rank 0 copies to CPU, the driver `ray.put`s
                the WeightUpdate once) + every receiver's `set_weights` (ray.get + copy in place):
                the path `RunActors.sync_weights` takes with learner.weight_sync.mode=object_store
  collective    `LearnerGroup.broadcast_weights` beside every receiver's `receive_weights` (gloo,
                `--bucket-mb` buckets, the driver only starts the calls): mode=collective
  setup_s       forming the group once (rendezvous + gloo connections), not part of a sync
Models: "tiny" (`webrl.models.tiny_model` defaults, ~0.6 M parameters) and "mid" (hidden 1024,
8 layers, 8 heads, MLP 2816, vocabulary 151,936: the real Qwen embedding shape). Each path syncs
`--syncs` times after one untimed warm-up; the median is reported and the ratio
object_store / collective (> 1: the broadcast is faster). One run, on a shared machine.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

MODELS = {"tiny": {}, "mid": dict(hidden=1024, layers=8, heads=8, intermediate=2816, vocab_size=151936)}


def measure(model_path: str, receivers: int, syncs: int, bucket_mb: float) -> dict:
    import ray

    from webrl.run.actors import _beside
    from webrl.learner import LearnerConfig, LearnerGroup, LearnerRun
    from webrl.learner.config import WeightSyncConfig
    from webrl.engines.engine import GeneratorEngineFactory
    from webrl.rollout.inference import InferenceConfig
    from webrl.rollout.placement import start_inference_workers

    sync = WeightSyncConfig(mode="collective", bucket_mb=bucket_mb, timeout_s=600)
    run = LearnerRun(model_path=model_path, seed=0, temperature=1.0, image_min_pixels=3136, image_max_pixels=12544)
    learner = LearnerGroup(LearnerConfig(zero_stage=0, weight_sync=sync), run, 1)
    workers = start_inference_workers(GeneratorEngineFactory(model_path), InferenceConfig(), receivers)
    ray.get([w.version.remote() for w in workers])
    try:
        specs = learner.weight_specs()
        version = 0

        def object_store() -> float:
            nonlocal version
            version += 1
            t0 = time.perf_counter()
            ref = learner.get_weights_ref()
            ray.get([w.set_weights.remote(ref, version) for w in workers])
            return time.perf_counter() - t0

        t0 = time.perf_counter()
        address, port = learner.host_weight_group(sync.timeout_s)
        refs = [w.join_weight_group.remote(address, port, 1 + i, 1 + receivers, "gloo", "bench", sync.timeout_s, specs,
                                           sync.bucket_bytes) for i, w in enumerate(workers)]
        _beside(lambda: learner.join_weight_group(1 + receivers, "gloo", "bench", sync.timeout_s), refs,
                sync.timeout_s, "receivers to join")
        setup_s = time.perf_counter() - t0

        def collective() -> float:
            nonlocal version
            version += 1
            t0 = time.perf_counter()
            _beside(lambda: learner.broadcast_weights(sync.bucket_bytes, version),
                    [w.receive_weights.remote(version) for w in workers], sync.timeout_s, "receivers")
            return time.perf_counter() - t0

        times = {}
        for name, fn in (("object_store", object_store), ("collective", collective)):
            fn()  # warm-up
            times[name] = [fn() for _ in range(syncs)]
        nbytes = sum(s.num_bytes for s in specs)
    finally:
        learner.shutdown()
        for w in workers:
            ray.kill(w)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"bytes": nbytes, "tensors": len(specs), "setup_s": setup_s, "seconds": times, "median_s": med,
            "ratio_object_store_over_collective": med["object_store"] / med["collective"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--receivers", type=int, default=2)
    parser.add_argument("--syncs", type=int, default=3)
    parser.add_argument("--bucket-mb", type=float, default=256.0)
    parser.add_argument("--models", default="tiny,mid")
    parser.add_argument("--cpus", type=int, default=4, help="CPUs of the local Ray")
    parser.add_argument("--out", default="benchmarks/results/weight_sync_2026-12-01/results.json")
    parser.add_argument("--work", default=None, help="folder for the models and Ray's temp dir (default: /tmp)")
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("RAY_raylet_start_wait_time_s", "600")  # a loaded machine starts Ray slowly
    from webrl.models import tiny_model
    from webrl.run.ray_local import start_local_ray

    work = Path(tempfile.mkdtemp(prefix="weight-sync-", dir=args.work))
    start_local_ray(args.cpus, str(work / "ray"), {"RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1"})
    results = {"command": "benchmarks/weight_sync.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()), "models": {}}
    for name in args.models.split(","):
        path = tiny_model(out_dir=work / name, **MODELS[name])
        results["models"][name] = {"sizes": MODELS[name], **measure(path, args.receivers, args.syncs, args.bucket_mb)}
        row = results["models"][name]
        print(f"{name}: {row['bytes'] / 2**20:.1f} MiB in {row['tensors']} tensors; object_store "
              f"{row['median_s']['object_store']:.3f} s, collective {row['median_s']['collective']:.3f} s "
              f"(ratio {row['ratio_object_store_over_collective']:.2f}); group set-up {row['setup_s']:.2f} s",
              flush=True)
        out = Path(args.out)  # after each model: a later one that fails keeps the earlier rows
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1))
        print(f"wrote {out}", flush=True)


if __name__ == "__main__":
    main()
