from tests.reward.fixtures import tiny_engine, tiny_server  # noqa: F401
