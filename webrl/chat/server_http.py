"""HTTP to SGLang-native servers: errors, keys, the checks every `/generate` answer passes, and
the disk weight update (`ServerBackend`, webrl/engines/sglang.py, uses them).

Keys, as SGLang's `utils/auth.py` (at 0ce3659c, `decide_request_auth`) checks them: generation
and `/model_info` take the `--api-key`; the weight routes take the `--admin-api-key` when the
server has one (and then no other key), else the api key; both as `Authorization: Bearer <key>`.
Model info: `GET /model_info` (`/get_model_info` is deprecated and logs a warning per call).
"""
from __future__ import annotations

import os
from typing import Any, Optional, Sequence


class ServerEngineError(RuntimeError):
    """A server that is unreachable, slow, failing or answering something malformed (the message
    names the URL and the field). The rollout's retry logic treats it as a failed step."""


class ServerUnreachableError(ServerEngineError):
    """The server could not be reached or dropped the connection (down or restarting)."""


class ServerStaleError(ServerEngineError):
    """The server answered with other weights than this engine loaded (a restarted server
    before its launcher reloaded the last weights, or someone else's update)."""


WEIGHT_ROUTES = ("/update_weights_from_disk", "/init_weights_update_group", "/update_weights_from_distributed",
                 "/destroy_weights_update_group")


def env_key(name: str) -> str:
    """The key held by the environment variable `name` ("" when no variable is named or it is unset)."""
    return os.environ.get(name, "") if name else ""


def route_headers(path: str, api_key: str = "", admin_api_key: str = "") -> dict:
    """The Authorization header a request to `path` carries: the admin key on the weight routes
    when there is one, else the API key; none without a key."""
    key = (admin_api_key or api_key) if path in WEIGHT_ROUTES else api_key
    return {"Authorization": f"Bearer {key}"} if key else {}


class ServerHTTP:
    """One `httpx.Client` for a list of server base URLs, with the right key per route."""

    def __init__(self, urls: Sequence[str], timeout_s: float, api_key: str = "", admin_api_key: str = ""):
        import httpx

        self.urls = [u.rstrip("/") for u in urls]
        self.timeout_s = timeout_s
        self._keys = (api_key, admin_api_key)
        self.client = httpx.Client(timeout=timeout_s)
        self._closed_after_error: set[str] = set()  # servers whose last answer was a 5xx (see `request`)

    def headers(self, path: str) -> dict:
        return route_headers(path, *self._keys)

    def post(self, url: str, path: str, body: dict) -> Any:
        return self.request(url, "POST", path, body)

    def request(self, url: str, method: str, path: str, body: Optional[dict] = None, want_json: bool = True) -> Any:
        import httpx

        where = f"{url}{path}"
        for attempt in (0, 1):
            try:
                r = self.client.request(method, where, json=body, headers=self.headers(path))
                break
            except httpx.TimeoutException:
                raise ServerEngineError(f"{where}: no answer within {self.timeout_s} s (timeout_s)") from None
            except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError) as e:
                # uvicorn closes the connection after a 500 raised by the app: the next request on
                # that kept-alive connection meets the close, not the server; send it once more
                if attempt == 0 and url in self._closed_after_error:
                    self._closed_after_error.discard(url)
                    continue
                raise ServerUnreachableError(f"{where}: server unreachable ({type(e).__name__}: {e})") from None
            except httpx.HTTPError as e:  # refused, reset, dropped mid-answer: the server is down
                raise ServerUnreachableError(f"{where}: server unreachable ({type(e).__name__}: {e})") from None
        if r.status_code >= 500:
            self._closed_after_error.add(url)
        else:
            self._closed_after_error.discard(url)
        if r.status_code != 200:
            raise ServerEngineError(f"{where}: HTTP {r.status_code}: {error_message(r)}")
        if not want_json:
            return None
        try:
            return r.json()
        except ValueError:
            raise ServerEngineError(f"{where}: the answer is not JSON: {r.text[:200]!r}") from None

    def update_from_disk(self, url: str, body: dict) -> str:
        """One server loads `body["model_path"]`; the version it reports afterwards (/model_info)."""
        answer = self.post(url, "/update_weights_from_disk", body)
        if not isinstance(answer, dict) or answer.get("success") is not True:
            raise ServerEngineError(f"{url}/update_weights_from_disk: 'success' is not true: {str(answer)[:300]}")
        info = self.request(url, "GET", "/model_info")
        version = info.get("weight_version") if isinstance(info, dict) else None
        if version is None:
            raise ServerEngineError(f"{url}/model_info: no 'weight_version' in {str(info)[:200]}")
        if "weight_version" in body and str(version) != body["weight_version"]:
            raise ServerEngineError(f"{url}/model_info: weight_version is {version!r} after loading "
                                    f"{body['weight_version']!r}")
        return str(version)

    def close(self) -> None:
        self.client.close()


def check_output(url: str, answer: Any, expected_version: Optional[str]) -> None:
    """The fields every `/generate` answer must get right: meta_info, no abort, output log-prob
    entries [[logprob, token_id, ...]] agreeing with output_ids, the expected weight version."""
    where = f"{url}/generate"
    meta = answer.get("meta_info") if isinstance(answer, dict) else None
    if not isinstance(meta, dict):
        raise ServerEngineError(f"{where}: the answer has no 'meta_info' object: {str(answer)[:200]}")
    finish = meta.get("finish_reason")
    if isinstance(finish, dict) and finish.get("type") == "abort":
        raise ServerEngineError(f"{where}: the request was aborted: {finish.get('message', '')}")
    entries = meta.get("output_token_logprobs")
    if not isinstance(entries, list) or not all(
            isinstance(e, (list, tuple)) and len(e) >= 2 and isinstance(e[1], int)
            and isinstance(e[0], (int, float)) for e in entries):
        raise ServerEngineError(f"{where}: meta_info.output_token_logprobs must be a list of "
                                f"[logprob, token_id, text], got {str(entries)[:200]}")
    ids = [int(e[1]) for e in entries]
    output_ids = answer.get("output_ids")
    # output_ids may or may not repeat the final stop token; the log-prob entries always hold it
    if output_ids is not None and output_ids not in (ids, ids[:-1]):
        raise ServerEngineError(f"{where}: output_ids {output_ids[:8]}... disagree with the ids of "
                                f"meta_info.output_token_logprobs {ids[:8]}...")
    version = meta.get("weight_version")
    if expected_version is not None and version is not None and str(version) != expected_version:
        raise ServerStaleError(f"{where}: meta_info.weight_version is {version!r}, but this engine loaded "
                               f"{expected_version!r} (was the server updated by someone else?)")


def error_message(response: Any) -> str:
    """The message of an error body in SGLang's ({"message"}) or OpenAI's ({"error": {"message"}}) shape."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict) and "message" in inner:
            return str(inner["message"])[:300]
        if "message" in body:
            return str(body["message"])[:300]
    return str(body)[:300]
