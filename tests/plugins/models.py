"""Session fixtures that build the tiny Qwen-VL models once per test run (owned by the models/policy work)."""
