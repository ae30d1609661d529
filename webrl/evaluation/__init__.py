"""Evaluation: greedy/sampled held-out runs (`evaluator`), their summaries, tables and Online-Mind2Web export (`summary`)."""
