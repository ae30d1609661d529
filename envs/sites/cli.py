"""`webrl sites`: serve all four sandbox sites, print their URLs, block (`serve_sites(args)`).

`webrl demos` (oracle demonstrations of these sites) runs on the episode runner, above the env
layer: `webrl.recipes.demos.record_demos`.
"""
from __future__ import annotations

import time
from typing import Any

from webrl.envs.sites.source import SITE_NAMES

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
