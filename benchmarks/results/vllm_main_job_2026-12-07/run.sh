#!/bin/bash
# How the logs here were made (2026-12-07, 2 cores, other work running beside them):
#   vllm_a.log, vllm_b.log  the vllm preset twice with one seed, at commit e67de2f (before dynamic
#                           sampling existed), from the checkout root:
#       python examples/train_online_mind2web.py --config vllm run.output_dir=/tmp/runs/vllm_a
#   in_process.log          the same checkpoint, prompt and run on the in-process engine, at
#                           commit 6f221e1 with dynamic sampling off (what e67de2f ran):
#       python examples/train_online_mind2web.py model.path=webrl:tiny-webagent \
#           generator.prompt.action_format=compact rollout.dynamic_sampling.enabled=false
#   fresh_clone_a.log, fresh_clone_b.log   the documented command twice on one fresh clone of
#                           6ce941e (dynamic sampling on, the default since d3c658e), the first
#                           run setting up .venv and .venv-vllm from scratch (966 s in all; the
#                           second 767 s), same seed: identical tables (14.6% -> 10.4%, 2 up,
#                           4 down, p = 0.688) and identical iteration metrics apart from times:
#   fresh_clone_final_a.log, fresh_clone_final_b.log   the same at f4d2ee6 (after the NCCL
#                           transfer, the guard and the permutation-test verdict), the first run
#                           setting up both venvs (778 s), the second 661 s: identical tables
#                           (14.6% -> 10.4%, 2 up, 4 down, permutation p = 0.688) and metrics:
#       d=$(mktemp -d) && git clone -q . "$d/a" && cd "$d/a" && \
#           bash run.sh example --config vllm run.output_dir=$d/runs_a     # then again with runs_b
cd "$(dirname "$0")/../../.."
OUT=benchmarks/results/vllm_main_job_2026-12-07
export RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1
start=$(date +%s)
.venv/bin/python examples/train_online_mind2web.py model.path=webrl:tiny-webagent generator.prompt.action_format=compact \
    rollout.dynamic_sampling.enabled=false run.output_dir=/tmp/runs/in_process > $OUT/in_process.log 2>&1
echo "exit $? wall_s $(( $(date +%s) - start ))" >> $OUT/in_process.log
