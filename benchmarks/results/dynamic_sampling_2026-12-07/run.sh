#!/bin/bash
# The embedded default (dynamic sampling on, its new default) with seed 0, then its per-iteration
# trained / informative / drawn groups and the extra env steps they cost (2 cores, 2026-12-07).
cd "$(dirname "$0")/../../.."
OUT=benchmarks/results/dynamic_sampling_2026-12-07
export RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1
for seed in ${SEEDS:-0}; do
  [ -f $OUT/seed$seed.log ] && grep -q "^exit 0" $OUT/seed$seed.log && continue
  start=$(date +%s)
  .venv/bin/python examples/train_online_mind2web.py run.seed=$seed run.run_dir=/tmp/runs/ds_s$seed > $OUT/seed$seed.log 2>&1
  echo "exit $? wall_s $(( $(date +%s) - start ))" >> $OUT/seed$seed.log
  .venv/bin/python -c "
import json
rows = [r for r in map(json.loads, open('/tmp/runs/ds_s$seed/metrics.jsonl')) if 'iteration' in r and 'stage' not in r]
for r in rows:
    print(r['iteration'], 'trained', r.get('trained_groups'), 'informative', r['informative_groups'], 'drawn',
          r.get('drawn_groups'), 'filtered', r['filtered_groups'], 'rounds', r.get('dynamic_sampling/rounds'),
          'extra_env_steps', r.get('dynamic_sampling/extra_env_steps'), 'env_steps', r['env_steps'],
          'collect_s', round(r['time_collect_s']))" > $OUT/seed$seed.groups.txt
done
