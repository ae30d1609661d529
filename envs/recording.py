"""Record what a live episode loaded (one HAR file per episode) and replay it with no network.

Record: the episode's `BrowserContext` is opened with Playwright's HAR recorder (content
embedded, "minimal" mode: requests, responses, headers and bodies), which writes the file when
the context closes. Each episode gets its own file, `<task file name>.<8 hex>.har` in `dir`,
and its path is `info["recording"]` (copied to `TrajectoryInfo.recording`).

Replay: the episode's requests are answered from the task's recording (`<task file name>.har`,
or the task's only `<task file name>.*.har`) by a route handler registered after the safety
guards, so it runs first and nothing it answers reaches the network. Policy:
- a request the allowlist refuses goes on to the safety guard, which blocks and reports it as
  it did when recording;
- a request found in the recording (same method, URL and body) gets the recorded response;
  repeated requests get the recorded responses in order, then the last one again;
- any other request is aborted ("internetdisconnected") and reported: the step's feedback says
  "Not in the recording, aborted: GET <url>", `info["recording_missing"]` counts them;
- web sockets are closed without connecting.
A recording that is missing, not a HAR, or lacks a response for the episode's entry URL (a HAR
of another site) raises `RecordingError`, an `InfraError`, at reset: the env reports it as an
infrastructure failure naming the file, and the next episode is unaffected.

Departure from Playwright's own `route_from_har`: that aborts missing requests silently and
matches on headers too; here every miss is reported, so a replay tells what the recording lacks.
URLs match exactly, so sites served on per-run ports (sandbox, MiniWoB++) do not replay;
recording is meant for live-web tasks.
"""
from __future__ import annotations

import base64
import glob
import hashlib
import json
import os
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional
from urllib.parse import urlsplit

from webrl.envs.browser import EpisodeEvents, InfraError

RECORDING_MODES = ("off", "record", "replay")
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
# The body is served decoded, so its recorded length and encoding no longer hold.
_DROPPED_HEADERS = {"content-length", "content-encoding", "transfer-encoding"}


class RecordingError(InfraError):
    """A replay recording cannot be used (missing, not a HAR, or of another site)."""


@dataclass
class RecordingConfig:
    """Whether episodes are recorded to, or replayed from, HAR files."""

    mode: str = "off"
    """"off" (no recording; the browser is used exactly as without this section), "record"
    (write each episode's HAR into `dir`) or "replay" (answer every request from the task's
    HAR in `dir`, no network)."""
    dir: str = ""
    """Folder of the HAR files, one per task id (`recording_file_name`); required with
    "record" / "replay", must stay "" with "off"."""

    def __post_init__(self) -> None:
        if self.mode not in RECORDING_MODES:
            raise ValueError(f"RecordingConfig.mode must be one of {RECORDING_MODES}, got {self.mode!r}")
        if not isinstance(self.dir, str):
            raise ValueError(f"RecordingConfig.dir must be a string, got {self.dir!r}")
        if self.mode == "off" and self.dir:
            raise ValueError(f"RecordingConfig.dir={self.dir!r} does nothing with mode 'off': "
                             "set mode to 'record' or 'replay', or leave dir empty")
        if self.mode != "off" and not self.dir:
            raise ValueError(f"RecordingConfig.dir must name a folder with mode {self.mode!r}")


def recording_file_name(task_id: str) -> str:
    """A file name stem for `task_id`: the id itself when it is a safe name (letters, digits,
    ".", "_", "-"; at most 100), else its safe characters and a hash of the id (no two ids share one)."""
    if _SAFE_NAME.fullmatch(task_id):
        return task_id
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", task_id).strip("._-")[:80] or "task"
    return f"{readable}-{hashlib.sha256(task_id.encode()).hexdigest()[:12]}"


def find_recording(directory: str, task_id: str) -> str:
    """The replay file of `task_id` in `directory`: `<name>.har`, else the only `<name>.*.har`."""
    stem = os.path.join(directory, recording_file_name(task_id))
    if os.path.isfile(stem + ".har"):
        return stem + ".har"
    found = sorted(glob.glob(glob.escape(stem) + ".*.har"))
    if len(found) == 1:
        return found[0]
    if not found:
        raise RecordingError(f"no recording of task {task_id!r}: {stem}.har does not exist")
    raise RecordingError(f"{len(found)} recordings of task {task_id!r} in {directory} "
                         f"({', '.join(os.path.basename(f) for f in found)}): keep one, or copy "
                         f"the one to replay to {os.path.basename(stem)}.har")


@dataclass
class Response:
    """One recorded response, ready for `route.fulfill`."""

    status: int
    headers: dict[str, str]
    body: bytes


class HarArchive:
    """A HAR file's responses by (method, URL, request body), in recorded order."""

    def __init__(self, path: str):
        self.path = path
        self.responses: dict[tuple[str, str, str], list[Response]] = {}
        self.served: dict[tuple[str, str, str], int] = {}
        try:
            with open(path, encoding="utf-8") as f:
                entries = json.load(f)["log"]["entries"]
            for index, entry in enumerate(entries):
                self._add(entry, index)
        except OSError as error:
            raise RecordingError(f"recording {path} cannot be read: {error}") from error
        except json.JSONDecodeError as error:
            raise RecordingError(f"recording {path} is not valid JSON (truncated?): {error}") from error
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise RecordingError(f"recording {path} is not a HAR file: {type(error).__name__}: {error}") from error

    def _add(self, entry: dict, index: int) -> None:
        request, response = entry["request"], entry["response"]
        status = int(response["status"])
        if status <= 0:  # the request failed or was blocked when recording: nothing to serve
            return
        content = response.get("content", {})
        text = content.get("text", "")
        body = base64.b64decode(text, validate=True) if content.get("encoding") == "base64" else text.encode()
        headers: dict[str, str] = {}
        for header in response["headers"]:
            name, value = header["name"].lower(), str(header["value"])
            if name not in _DROPPED_HEADERS:
                headers[name] = f"{headers[name]}\n{value}" if name in headers else value
        key = (request["method"].upper(), request["url"], (request.get("postData") or {}).get("text", ""))
        self.responses.setdefault(key, []).append(Response(status, headers, body))

    def has(self, url: str, method: str = "GET") -> bool:
        return (method, url, "") in self.responses

    def next_response(self, method: str, url: str, body: str) -> Optional[Response]:
        """The recorded response for this request (the n-th one on its n-th time, then the last)."""
        key = (method.upper(), url, body)
        recorded = self.responses.get(key)
        if not recorded:
            return None
        count = self.served.get(key, 0)
        self.served[key] = count + 1
        return recorded[min(count, len(recorded) - 1)]

    def hosts(self) -> list[str]:
        return sorted({urlsplit(url).netloc for _, url, _ in self.responses})


@dataclass
class EpisodeRecording:
    """The recording state of one episode: its file and, in replay, the requests it lacked."""

    mode: str
    path: str
    archive: Optional[HarArchive] = None
    missing: list[str] = field(default_factory=list)

    @property
    def record_har_path(self) -> str:
        """Where the context writes its HAR: `path` when recording, "" when replaying."""
        return self.path if self.mode == "record" else ""

    def info(self) -> dict[str, Any]:
        """Keys for the step's info: "recording" (the file) and "recording_missing" (count)."""
        return {"recording": self.path, "recording_missing": len(self.missing)}


class ReplayRoute:
    """The `context.route` handler of a replay (see the module docstring for its policy)."""

    def __init__(self, recording: EpisodeRecording, allowlist: Any, subresource_policy: str,
                 events: EpisodeEvents):
        self.recording, self.allowlist = recording, allowlist
        self.subresource_policy, self.events = subresource_policy, events

    def __call__(self, route: Any) -> None:
        request = route.request
        url = request.url
        if url.split(":", 1)[0].lower() not in ("http", "https") or self._guard_blocks(request):
            route.fallback()  # the safety guard decides (and reports) as when recording
            return
        assert self.recording.archive is not None
        response = self.recording.archive.next_response(request.method, url, request.post_data or "")
        if response is None:
            self.recording.missing.append(url)
            self.events.notes.append(f"Not in the recording, aborted: {request.method} {url}")
            route.abort("internetdisconnected")
            return
        route.fulfill(status=response.status, headers=response.headers, body=response.body)

    def _guard_blocks(self, request: Any) -> bool:
        """Whether the safety guard refuses this request without fetching it: a host outside the
        allowlist, for every request under "allowlist" and for navigations under "any" and
        "public". Everything else is the recording's to serve or to report missing: handing it
        to the guard would let "any" or "public" fetch it from the network during a replay."""
        if self.allowlist.allows_host(urlsplit(request.url).netloc):
            return False
        return self.subresource_policy == "allowlist" or request.is_navigation_request()


class Recorder:
    """One env's recording policy: the HAR path to record to, or the route that replays."""

    def __init__(self, config: RecordingConfig):
        self.config = config
        if config.mode == "record":
            os.makedirs(config.dir, exist_ok=True)

    def start(self, task_id: str) -> Optional[EpisodeRecording]:
        """The new episode's recording (None when off); replay loads the task's HAR here."""
        if self.config.mode == "off":
            return None
        if self.config.mode == "record":
            name = f"{recording_file_name(task_id)}.{uuid.uuid4().hex[:8]}.har"
            return EpisodeRecording("record", os.path.join(self.config.dir, name))
        path = find_recording(self.config.dir, task_id)
        return EpisodeRecording("replay", path, archive=HarArchive(path))

    @staticmethod
    def attach(recording: Optional[EpisodeRecording], context: Any, allowlist: Any,
               subresource_policy: str, events: EpisodeEvents, entry_url: str) -> None:
        """Install the replay route on `context` (after the guards, so it runs first)."""
        if recording is None or recording.mode != "replay":
            return
        assert recording.archive is not None
        if not recording.archive.has(entry_url):
            hosts = ", ".join(recording.archive.hosts()[:5]) or "none"
            raise RecordingError(f"recording {recording.path} has no response for the entry URL "
                                 f"{entry_url} (it holds responses from: {hosts})")
        context.route("**/*", ReplayRoute(recording, allowlist, subresource_policy, events))
        context.route_web_socket("**/*", lambda socket: socket.close())
