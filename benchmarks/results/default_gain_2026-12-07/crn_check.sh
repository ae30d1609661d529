#!/bin/bash
# Common random numbers: the shipped checkpoint and tab8k8 seed 0's step 8 evaluated with the same
# sampled-episode seeds (webrl eval: iteration 0 for both), 48 tasks x 8 samples.
cd /work/main
export RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1
K="tasks.train_levels=[1] tasks.eval_levels=[1] tasks.kinds=[tab_button] rollout.max_turns=4 eval.samples_per_task=8 run.seed=0"
for name in before:webrl:tiny-webagent-pointer after:/tmp/runs/gain_tab8k8_s0/checkpoints/step-00000008/hf; do
  label=${name%%:*}; ckpt=${name#*:}
  [ -f /tmp/crn/$label/eval_outcomes.jsonl ] && continue
  .venv/bin/webrl eval $ckpt $K run.run_dir=/tmp/crn/$label > /tmp/crn/$label.log 2>&1
done
