"""`serve_main` as a real process (what `webrl serve` runs): binds loopback, serves the tiny model."""
import os
import re
import subprocess
import sys
import time

import httpx
import pytest


@pytest.mark.slow
def test_serve_main_in_a_subprocess(tiny_qwen25vl_path, tmp_path):
    env = {**os.environ, "WEBRL_SERVE_API_KEY": "k", "HF_HUB_OFFLINE": "1"}
    log = open(tmp_path / "serve.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "webrl.serve", f"model_path={tiny_qwen25vl_path}", "port=0",
                             "served_model_name=judge"], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        url, deadline = None, time.monotonic() + 240
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            m = re.search(r"on (http://127\.0\.0\.1:\d+)/v1", (tmp_path / "serve.log").read_text())
            url = m.group(1) if m else None
        assert url, (tmp_path / "serve.log").read_text()
        for _ in range(100):  # the socket is bound before uvicorn accepts; wait for /health
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        payload = {"model": "judge", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        assert httpx.post(url + "/v1/chat/completions", json=payload, timeout=60).status_code == 401
        r = httpx.post(url + "/v1/chat/completions", json=payload, headers={"Authorization": "Bearer k"}, timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
