"""Page-load time under the request guards: no guard vs "allowlist" vs "public".

A page with N subresources (default 100: stylesheets, scripts, images, half from a second
"CDN" host) is served from local servers (127.0.0.1 and 127.0.0.4, both loopback) and loaded
with `page.goto(..., wait_until="load")` in a fresh context per repeat:

    none        no route at all (the floor)
    allowlist   `subresource_policy="allowlist"` with both hosts allowed (every request routed
                through Python, continued)
    public      `subresource_policy="public"` with both hosts as public stand-ins (every
                http(s) request fetched by the guard with its redirect hops checked)

Writes <out>/network_guard.json and .md: median load seconds per mode and the ratio to "none".

    python benchmarks/network_guard.py --repeats 5 --out benchmarks/results/network_guard
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.plugins.browser import start_http_server  # noqa: E402
from webrl.envs.browser import BrowserSession, EpisodeEvents  # noqa: E402
from webrl.envs.safety import DomainAllowlist, SafetyConfig, install_guards  # noqa: E402

MODES = ("none", "allowlist", "public")
PIXEL_GIF = bytes.fromhex("47494638396101000100800000000000ffffff21f90401000000002c00000000010001000002024401003b")


def write_site(folder: Path, cdn_base: str, count: int) -> None:
    """page.html with `count` subresources, a third each CSS / JS / images; odd ones from the CDN."""
    tags = []
    for index in range(count):
        base = cdn_base if index % 2 else ""
        kind = index % 3
        name = f"r{index}." + ("css", "js", "gif")[kind]
        (folder / name).write_bytes(PIXEL_GIF if kind == 2 else f"/* {index} */".encode())
        tags.append((f'<link rel="stylesheet" href="{base}/{name}">', f'<script src="{base}/{name}"></script>',
                     f'<img src="{base}/{name}">')[kind])
    (folder / "page.html").write_text("<!doctype html><title>bench</title>\n" + "\n".join(tags))


def load_once(session: BrowserSession, mode: str, url: str, hosts: tuple[str, ...]) -> float:
    context = session.new_context()
    if mode != "none":
        safety = SafetyConfig(subresource_policy=mode,
                              network={"public_stand_ins": [f"{h.split(':')[0]}/32" for h in hosts]})
        install_guards(context, DomainAllowlist(hosts), EpisodeEvents(), safety)
    page = context.new_page()
    started = time.perf_counter()
    page.goto(url, wait_until="load", timeout=60_000)
    elapsed = time.perf_counter() - started
    context.close()
    return elapsed


def run(count: int, repeats: int) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="network_guard_"))
    site, cdn = start_http_server(folder, "127.0.0.1"), start_http_server(folder, "127.0.0.4")
    write_site(folder, cdn.base_url, count)
    session = BrowserSession()
    session.start()
    try:
        times = {mode: [] for mode in MODES}
        for _ in range(repeats):  # interleaved, so drift on a shared machine hits every mode alike
            for mode in MODES:
                times[mode].append(load_once(session, mode, site.url("page.html"), (site.netloc, cdn.netloc)))
    finally:
        session.close()
        site.stop()
        cdn.stop()
    medians = {mode: statistics.median(values) for mode, values in times.items()}
    return {"subresources": count, "repeats": repeats, "median_load_s": medians,
            "ratio_to_none": {mode: medians[mode] / medians["none"] for mode in MODES}, "samples_s": times}


def markdown(result: dict) -> str:
    lines = [f"# Page load with {result['subresources']} subresources ({result['repeats']} repeats)", "",
             "| mode | median load (s) | ratio to none |", "|---|---|---|"]
    for mode in MODES:
        lines.append(f"| {mode} | {result['median_load_s'][mode]:.3f} | {result['ratio_to_none'][mode]:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--subresources", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="benchmarks/results/network_guard")
    args = parser.parse_args()
    result = run(args.subresources, args.repeats)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "network_guard.json").write_text(json.dumps(result, indent=2))
    (out / "network_guard.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
