#!/bin/bash
# Candidate defaults for issue #52 item 2 (the first command's table beyond its own noise in seeds
# 0, 1 and 2, within 15 minutes on 2 cores): the main job with OVERRIDES, one log per (name, seed);
# a log that ends in "exit 0" is kept and not run again (resume); its metrics.jsonl and
# eval_outcomes.jsonl are copied beside it. The embedded default itself: NAME=default OVERRIDES="".
#   NAME=kinds4 OVERRIDES="tasks.kinds=[click_button,click_link,choose_radio,open_tab]" SEEDS="0 1 2" bash run.sh
cd "$(dirname "$0")/../../.."
OUT=benchmarks/results/default_gain_2026-12-07
export RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1
for seed in ${SEEDS:-0}; do
  log=$OUT/${NAME:?}_seed$seed.log
  [ -f $log ] && grep -q "^exit 0" $log && continue
  echo "overrides: $OVERRIDES run.seed=$seed" > $log
  start=$(date +%s)
  .venv/bin/python examples/train_online_mind2web.py $OVERRIDES run.seed=$seed run.run_dir=/tmp/runs/gain_${NAME}_s$seed >> $log 2>&1
  echo "exit $? wall_s $(( $(date +%s) - start ))" >> $log
  for f in metrics eval_outcomes; do cp /tmp/runs/gain_${NAME}_s$seed/$f.jsonl $OUT/${NAME}_seed${seed}_$f.jsonl 2>/dev/null; done
done
grep -H -A3 "^held-out success" $OUT/${NAME}_seed*.log | grep -E "overall|change"
