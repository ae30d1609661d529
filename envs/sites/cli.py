"""Command-line pieces the `webrl` CLI wires in: `webrl sites` and `webrl demos`.

    serve_sites(args)                       serve all four sites, print their URLs, block
    record_demos(n, out_dir, seed, levels, sites)
                                            oracle trajectories through `WebEnv`, written with
                                            `webrl.types.save_trajectories` to out_dir/demos.jsonl

Demos keep only successful episodes (reward 1): they are supervised targets. Failures and
infrastructure drops are counted in the returned summary (and in out_dir/summary.json).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from webrl.envs.sites.source import SITE_NAMES, SandboxTaskSource

DEFAULT_PORT = 8765


def serve_sites(args: Any = None) -> None:
    """Serve the sites on 127.0.0.1 (`args.port`, default 8765; 0 = any free port) until
    Ctrl-C. Browsing without a task gets an anonymous session (cart, bookings kept per browser)."""
    from webrl.envs.sites.server import ensure_server, stop_server

    port = getattr(args, "port", None)
    base = ensure_server(DEFAULT_PORT if port is None else int(port))
    print(f"webrl sandbox sites at {base}/")
    for site in SITE_NAMES:
        print(f"  {site:8s} {base}/{site}/")
    print("Ctrl-C to stop.", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        stop_server()


def record_demos(n: int, out_dir: str | Path, seed: int = 0, levels: Sequence[int] = (0, 1, 2),
                 sites: Sequence[str] = SITE_NAMES, split: str = "train", viewport: str = "openwebrl",
                 session: Optional[Any] = None) -> dict[str, Any]:
    """Run `n` oracle episodes on tasks drawn from (sites, levels, split) with `seed`; write the
    successful ones to `out_dir/demos.jsonl` (images in `out_dir/images/`). Returns a summary."""
    import numpy as np

    from webrl.envs import BrowserSession, WebEnv, WebEnvConfig
    from webrl.envs.sites.demos import run_oracle_episode
    from webrl.types import save_trajectories

    if n < 1:
        raise ValueError(f"record_demos: n must be >= 1, got {n!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "demos.jsonl"
    path.write_text("")
    source = SandboxTaskSource(sites=tuple(sites), levels=tuple(levels), split=split)
    rng = np.random.default_rng(seed)
    own_session = session is None
    session = session or BrowserSession()
    env = WebEnv(WebEnvConfig.from_dict({"browser": {"viewport": viewport}}), session=session)
    summary = {"episodes": 0, "saved": 0, "failed": [], "dropped": [], "steps": 0, "path": str(path)}
    try:
        for _ in range(n):
            task = source.sample(rng)
            result = run_oracle_episode(env, task)
            summary["episodes"] += 1
            summary["steps"] += result.steps
            if result.infra_error:
                summary["dropped"].append(task.spec.id)
            elif result.reward < 1.0:
                summary["failed"].append(task.spec.id)
            else:
                save_trajectories(path, [result.trajectory])
                summary["saved"] += 1
    finally:
        env.close()
        if own_session:
            session.close()
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
