"""Qwen2.5-VL / Qwen3-VL model loading and tiny random-init models for CPU runs."""
