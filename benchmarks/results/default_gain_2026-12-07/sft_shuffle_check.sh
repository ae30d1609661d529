#!/bin/bash
# Issue #52 item 4: does the SFT-reproducibility check catch an unseeded SFT shuffle? Two SFT runs
# per variant (`webrl sft --config smoke`, 4 demonstrations, 8 turns): the code as it is, and a
# copy whose pass shuffle is unseeded, with sft.batch_size 2 (4 optimizer steps a pass: the test's
# setting since this commit) and 32 (one step: the test's setting before). Output: sft_shuffle_check.out
# (name, exit code, sha256 of the SFT weights). Run from the repository root on a clean tree.
git worktree add -q /tmp/s61/mut HEAD
sed -i 's/rng, epoch, path = random.Random(f"{cfg.run.seed}:sft"), 0, ""/rng, epoch, path = random.Random(), 0, ""  # MUTATION: unseeded/' /tmp/s61/mut/webrl/recipes/sft.py
export RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1 RAY_AUTH_MODE=disabled
PY=/work/main/.venv/bin/python
run() { # name tree batch
  d=/tmp/s61/sft/$1; rm -rf $d
  (cd $2 && PYTHONPATH=$2 $PY -c "import sys, webrl; assert webrl.__file__.startswith('$2'), webrl.__file__; from webrl.cli import main; sys.exit(main(['sft','--config','smoke','sft.batch_size=$3','run.run_dir=$d']))" > $d.log 2>&1)
  echo "$1 rc=$? $(sha256sum $d/sft/hf/model.safetensors 2>/dev/null | cut -c1-16)"
}
mkdir -p /tmp/s61/sft
run seeded_b2_a /work/main 2; run seeded_b2_b /work/main 2
run unseeded_b2_a /tmp/s61/mut 2; run unseeded_b2_b /tmp/s61/mut 2
run unseeded_b32_a /tmp/s61/mut 32; run unseeded_b32_b /tmp/s61/mut 32
git worktree remove --force /tmp/s61/mut
