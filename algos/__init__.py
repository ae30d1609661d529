"""webrl.algos: advantage estimators, policy losses and GRPO / PPO / SFT objectives (pure functions)."""
