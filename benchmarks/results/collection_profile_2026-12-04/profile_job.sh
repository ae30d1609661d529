#!/usr/bin/env bash
# Profile the main job's collection: py-spy on the driver, env worker and inference worker.
set -u
OUT=$(realpath -m "${1:-/tmp/prof}")
DUR=${2:-45}
rm -rf $OUT && mkdir -p $OUT
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
.venv/bin/python examples/train_online_mind2web.py trainer.iterations=4 tasks.eval_tasks=0 run.run_dir=$OUT/run "${@:3}" > $OUT/job.log 2>&1 &
JOB=$!
echo job $JOB
for i in $(seq 1 300); do grep -q "trajectories |" $OUT/job.log 2>/dev/null && break; sleep 1; done
sleep 2
ENV=$(pgrep -f "^ray::EnvWorker" | head -1); INF=$(pgrep -f "^ray::InferenceActor" | head -1)
echo driver $JOB env $ENV inf $INF
for p in "driver:$JOB" "env:$ENV" "inf:$INF"; do
  name=${p%%:*}; pid=${p#*:}
  /tmp/pyspy/bin/py-spy record --pid $pid --idle --threads --format raw -r 50 -d $DUR -o $OUT/$name.txt > $OUT/$name.spy.log 2>&1 &
done
top -b -d 5 -n $((DUR/5)) > $OUT/top.txt &
wait %2 %3 %4 2>/dev/null
sleep $((DUR+3))
kill $JOB 2>/dev/null; sleep 3; pkill -P $JOB 2>/dev/null
echo done
