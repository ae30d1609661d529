"""Inference engines behind the generator backend interface (webrl/policy/backend.py).

    vllm.py          `VLLMBackend`: vLLM's token-in / token-out route and in-place weight reload
    vllm_launch.py   the interpreter, command, flags and environment of a launched vLLM server
    vllm_site/       the start-up hook `bash run.sh` installs into vLLM's own environment

The in-process transformers backend (webrl/policy/transformers_backend.py), SGLang's protocol
(webrl/rollout/server_engine.py) and the launcher every server kind shares
(webrl/rollout/server_launcher.py) are still where they were.
"""
