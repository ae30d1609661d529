#!/bin/bash
# The vLLM preset twice with one seed, then the in-process engine on the same checkpoint and prompt.
cd /work/main
OUT=benchmarks/results/vllm_main_job_2026-12-07
export RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1
for name in vllm_a vllm_b in_process; do
  [ -f $OUT/$name.log ] && grep -q "^exit 0" $OUT/$name.log && continue
  case $name in
    vllm_*) args="--config vllm" ;;
    in_process) args="model.path=webrl:tiny-webagent generator.prompt.action_format=compact" ;;
  esac
  start=$(date +%s)
  .venv/bin/python examples/train_online_mind2web.py $args run.output_dir=/tmp/runs/$name > $OUT/$name.log 2>&1
  echo "exit $? wall_s $(( $(date +%s) - start )) command: python examples/train_online_mind2web.py $args" >> $OUT/$name.log
done
