"""`ServerConfig`: the inference servers of `rollout.engine=server`, user-started or launched."""
from __future__ import annotations

from dataclasses import dataclass, field

from webrl.config import LOOPBACK_HOSTS, fixed

@dataclass
class ServerConfig:
    """Inference servers the run's rollouts use (`rollout.engine=server`): started by the user
    (`urls`) or by the run (`launch`, `webrl.engines.launcher`), never both."""

    urls: list[str] = field(default_factory=list)
    """Base URLs of servers the user started, e.g. ["http://10.0.0.5:30000"]: SGLang-native
    servers (or `webrl serve`), or vLLM servers with `protocol=vllm`. Leave empty with `launch`."""
    launch: str = "none"
    """Servers the run starts itself, one Ray actor each, restarted when they die and stopped
    with the run: none (use `urls`) | vllm (vLLM's API server from its own environment,
    `.venv-vllm`; CPU or GPU) | webrl (`webrl serve`, transformers; CPU) | sglang
    (`python -m sglang.launch_server`, needs SGLang and a GPU per server)."""
    protocol: str = "auto"
    """What the servers speak: auto (vllm with launch=vllm, else sglang) | sglang (SGLang's native
    /generate; `webrl serve` speaks it) | vllm (vLLM's /inference/v1/generate, started with
    --enable-scale-out and VLLM_SERVER_DEV_MODE=1). Set it for `urls` of vLLM servers."""
    python: str = ""
    """Interpreter of a launched vLLM server (its own environment); empty: $WEBRL_VLLM_PYTHON,
    else the checkout's .venv-vllm made by `bash run.sh setup-vllm`. Only with launch=vllm."""
    launch_args: list[str] = field(default_factory=list)
    """Extra arguments appended to the launch command, e.g. ["--tp-size", "2",
    "--mem-fraction-static", "0.8"] for sglang or ["max_new_tokens=1024"] for webrl."""
    num_servers: int = 1
    """Servers to launch (requests are spread over them round robin)."""
    host: str = "127.0.0.1"
    """Interface a launched server binds; 0.0.0.0 on a multi-node cluster (its URL then names
    the node's IP address). Beyond loopback api_key_env is required (vLLM asks it on every route)."""
    port: int = fixed(0, "a launched server takes a free port on its node; its URL is logged and reported")
    """Port of launched server i: port + i; 0 = a free port on the server's node."""
    cpus_per_server: float = 1.0
    """CPUs each launched server's actor reserves."""
    gpus_per_server: float = 0.0
    """GPUs each launched server's actor reserves (its process sees them as CUDA_VISIBLE_DEVICES)."""
    startup_timeout_s: float = 600.0
    """A launched server must answer GET /health this soon after each (re)start."""
    max_restarts: int = 3
    """Restarts of a launched server that died; one more death is fatal to the run's requests."""
    down_wait_s: float = fixed(-1.0, "-1: a launched server's restart is waited out, user-started servers fail over at once")
    """How long a request keeps retrying while every server is unreachable (restarting);
    -1 = startup_timeout_s with `launch`, 0 (fail over and fail at once) with `urls`."""
    timeout_s: float = fixed(0.0, "0 = rollout.inference_timeout_s: a request waits as long as the rollout waits for it")
    """One /generate (or weight update) longer than this is an error the rollout retries; 0 = the
    run's rollout.inference_timeout_s (`RunActors` fills it in)."""
    max_concurrency: int = 16
    """Requests in flight per inference worker, over all its servers."""
    api_key_env: str = ""
    """Environment variable holding the servers' bearer key (SGLang's `--api-key`; empty: none),
    sent with every request."""
    admin_api_key_env: str = ""
    """Environment variable holding the servers' admin key (SGLang's `--admin-api-key`; empty:
    none). When set, the weight-update routes are sent this key instead of `api_key_env`'s: with
    an admin key SGLang's weight routes accept no other."""

    def __post_init__(self) -> None:
        from webrl.config import ConfigError

        for url in self.urls:
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                raise ConfigError(f"rollout.server.urls entries must be http(s) URLs, got {url!r}")
        if not self.timeout_s >= 0:
            raise ConfigError(f"ServerConfig.timeout_s must be >= 0 (0 = rollout.inference_timeout_s), got {self.timeout_s!r}")
        if not isinstance(self.max_concurrency, int) or self.max_concurrency < 1:
            raise ConfigError(f"rollout.server.max_concurrency must be an integer >= 1, got {self.max_concurrency!r}")
        if self.launch not in LAUNCH_KINDS:
            raise ConfigError(f"rollout.server.launch must be one of {LAUNCH_KINDS}, got {self.launch!r}")
        if self.protocol not in PROTOCOLS:
            raise ConfigError(f"rollout.server.protocol must be one of {PROTOCOLS}, got {self.protocol!r}")
        speaks = {"vllm": "vllm", "webrl": "sglang", "sglang": "sglang"}.get(self.launch)
        if speaks and self.protocol not in ("auto", speaks):
            raise ConfigError(f"rollout.server.protocol={self.protocol!r} but rollout.server.launch={self.launch!r} "
                              f"servers speak {speaks!r}: leave protocol at 'auto'")
        if self.python and self.launch != "vllm":
            raise ConfigError(f"rollout.server.python only acts with rollout.server.launch=vllm (the vLLM server's "
                              f"own environment), got launch={self.launch!r}")
        if self.launch != "none" and self.host not in LOOPBACK_HOSTS and not self.api_key_env:
            why = ("; vLLM's own --api-key leaves /collective_rpc, /pause and /update_weights open, so it is asked "
                   "on every route" if self.launch == "vllm" else "")
            raise ConfigError(f"rollout.server.host={self.host!r}: a launched {self.launch} server beyond loopback "
                              f"needs rollout.server.api_key_env (a variable holding the key it then asks for{why}), "
                              f"or a loopback host (allowed without a key: {', '.join(LOOPBACK_HOSTS)})")
        if self.launch == "vllm" and self.admin_api_key_env:
            raise ConfigError("rollout.server.admin_api_key_env is SGLang's admin key; a launched vLLM server takes "
                              "one key on every route: set rollout.server.api_key_env only")
        if self.launch != "none" and self.urls:
            raise ConfigError(f"rollout.server.urls={self.urls} and rollout.server.launch={self.launch!r} are both set: "
                              f"either point the run at servers you started (urls) or let it launch them "
                              f"(launch), not both")
        if self.launch == "none":
            defaults = ServerConfig.__dataclass_fields__
            launch_only = [name for name in LAUNCH_ONLY_KEYS if getattr(self, name) != (
                defaults[name].default if name != "launch_args" else [])]
            if launch_only:
                raise ConfigError(f"rollout.server.{', '.join(launch_only)} only act with rollout.server.launch=vllm, "
                                  f"webrl or sglang (the run starts the servers); set launch or leave them at their "
                                  f"defaults")
        if not isinstance(self.num_servers, int) or self.num_servers < 1:
            raise ConfigError(f"rollout.server.num_servers must be an integer >= 1, got {self.num_servers!r}")
        if not 0 <= self.port <= 65535 - self.num_servers:
            raise ConfigError(f"rollout.server.port must be 0 (any free port) or leave room for num_servers ports "
                              f"below 65536, got {self.port!r}")
        if not self.startup_timeout_s > 0 or self.cpus_per_server < 0 or self.gpus_per_server < 0:
            raise ConfigError("rollout.server.startup_timeout_s must be > 0 and cpus_per_server / gpus_per_server "
                              f">= 0, got {self.startup_timeout_s!r}, {self.cpus_per_server!r}, {self.gpus_per_server!r}")
        if not isinstance(self.max_restarts, int) or self.max_restarts < 0:
            raise ConfigError(f"rollout.server.max_restarts must be an integer >= 0, got {self.max_restarts!r}")
        if self.down_wait_s < 0 and self.down_wait_s != -1:
            raise ConfigError(f"rollout.server.down_wait_s must be >= 0 or -1 (automatic), got {self.down_wait_s!r}")

    def request_down_wait_s(self, inference_timeout_s: float) -> float:
        """`down_wait_s` with -1 resolved: with launched servers, their start-up deadline, kept
        below the rollout's `inference_timeout_s` (which gives up on the request first); 0 without."""
        if self.down_wait_s >= 0:
            return self.down_wait_s
        return min(self.startup_timeout_s, 0.9 * inference_timeout_s) if self.launch != "none" else 0.0


    @property
    def speaks(self) -> str:
        """The resolved protocol: "vllm" or "sglang"."""
        if self.protocol != "auto":
            return self.protocol
        return "vllm" if self.launch == "vllm" else "sglang"


LAUNCH_KINDS = ("none", "vllm", "webrl", "sglang")
PROTOCOLS = ("auto", "sglang", "vllm")
LAUNCH_ONLY_KEYS = ("launch_args", "num_servers", "host", "port", "cpus_per_server", "gpus_per_server",
                    "startup_timeout_s", "max_restarts")
"""ServerConfig fields read only when the run launches its servers."""
