"""Inference engines: one module per engine behind the generator backend interface
(webrl/policy/backend.py), and what starts and configures their servers.

    engine.py         `GeneratorEngine`: the run's policy wrapper stack over any backend, and the
                      in-process engine's picklable factory
    transformers.py   `TransformersBackend`: the model in this process (`webrl serve` serves it too)
    sglang.py         `ServerBackend` / `ServerEngine`: SGLang's native /generate (and `webrl serve`)
    vllm.py           `VLLMBackend`: vLLM's token-in / token-out route and in-place weight reload
    server_config.py  `ServerConfig` (rollout.server): URLs, launch kind, protocol, keys
    launcher.py       launched servers of every kind: start, /health, restart, stop
    vllm_launch.py    a launched vLLM server's interpreter, command, flags and environment
    vllm_site/        the start-up hook `bash run.sh` installs into vLLM's own environment

A third server engine is one more module here: a backend class (a `ServerBackend` subclass for an
HTTP server), its row in `ENGINE_CAPABILITIES`, its launch command and its protocol name.
"""
