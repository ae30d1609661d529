"""OpenAI chat-completions request parsing and validation for `webrl serve`.

`parse_chat_request(body, config, model_name)` turns raw request bytes into `ChatMessage`s and
`SamplingParams`, or raises `RequestError(status, message, param)`; nothing malformed reaches
the model. The request schema is a pydantic model; unknown top-level fields are ignored (OpenAI
clients send many optional ones), but fields whose meaning this server cannot honour (`n > 1`,
`stream`) are refused rather than silently ignored.
"""
from __future__ import annotations

import base64
import binascii
import io
import json
import re
from dataclasses import dataclass
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from webrl.chat.messages import ChatMessage, SamplingParams
from webrl.types import Image


class RequestError(Exception):
    """A request the server refuses: HTTP `status` (4xx) and a message for the client."""

    def __init__(self, status: int, message: str, param: Optional[str] = None, code: Optional[str] = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


class _ImageURL(BaseModel):
    model_config = ConfigDict(extra="ignore")
    url: str
    detail: Optional[str] = None


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text", "image_url"]
    text: Optional[str] = None
    image_url: Optional[_ImageURL] = None


class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant"]
    content: Union[str, list[_Part]]


class _ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: Optional[str] = None
    messages: list[_Message] = Field(min_length=1)
    max_tokens: Optional[int] = Field(default=None, ge=1)
    max_completion_tokens: Optional[int] = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=-1)
    n: int = 1
    stream: bool = False
    stop: Optional[Union[str, list[str]]] = None
    seed: Optional[int] = None
    logprobs: bool = False
    top_logprobs: Optional[int] = Field(default=None, ge=0)
    return_tokens_as_token_ids: bool = False


@dataclass
class ParsedRequest:
    messages: list[ChatMessage]
    sampling: SamplingParams
    tokens_as_ids: bool = False
    """Report each token as "token_id:N" (vLLM's `return_tokens_as_token_ids`)."""


_DATA_URL = re.compile(r"^data:image/(png|jpeg|jpg|webp);base64,(.*)$", re.S | re.I)


def decode_image_url(url: str, max_pixels: int, where: str) -> Image:
    """An inline base64 image -> `Image` (PNG and JPEG bytes kept as they are, WebP -> PNG)."""
    m = _DATA_URL.match(url)
    if not m:
        shown = url[:40] + ("..." if len(url) > 40 else "")
        raise RequestError(400, f"{where}: only inline images are accepted "
                                f"(data:image/png|jpeg|webp;base64,...), got {shown!r}", where)
    try:
        data = base64.b64decode(re.sub(r"\s+", "", m.group(2)), validate=True)
    except (binascii.Error, ValueError):
        raise RequestError(400, f"{where}: the image is not valid base64", where) from None
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    try:
        with PILImage.open(io.BytesIO(data)) as im:
            width, height, fmt = im.size[0], im.size[1], (im.format or "").lower()
            if width * height > max_pixels:
                raise RequestError(400, f"{where}: the image has {width}x{height} pixels; the limit is "
                                        f"{max_pixels} pixels", where)
            im.load()
            if fmt not in ("png", "jpeg"):
                return Image.from_pil(im.convert("RGB"), "png")
    except RequestError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, PILImage.DecompressionBombError):
        raise RequestError(400, f"{where}: the data is not a readable PNG, JPEG or WebP image", where) from None
    return Image(data, fmt)


def _validation_message(e: ValidationError) -> tuple[str, str]:
    first = e.errors()[0]
    loc = ".".join(str(x) for x in first["loc"])
    more = f" (and {len(e.errors()) - 1} more problem(s))" if len(e.errors()) > 1 else ""
    return f"invalid request: {loc}: {first['msg']}{more}", loc


def _messages(req: _ChatRequest, config: Any) -> list[ChatMessage]:
    out, n_images = [], 0
    for i, m in enumerate(req.messages):
        parts: list[Any] = []
        if isinstance(m.content, str):
            parts.append(m.content)
        else:
            for j, p in enumerate(m.content):
                where = f"messages.{i}.content.{j}"
                if p.type == "text":
                    if p.text is None:
                        raise RequestError(400, f"{where}: a text part needs 'text'", where)
                    parts.append(p.text)
                else:
                    if p.image_url is None:
                        raise RequestError(400, f"{where}: an image_url part needs 'image_url'", where)
                    n_images += 1
                    if n_images > config.max_images:
                        raise RequestError(400, f"more than {config.max_images} images in one request",
                                           "messages")
                    parts.append(decode_image_url(p.image_url.url, config.max_image_pixels, where))
        if m.role != "user" and any(isinstance(p, Image) for p in parts):
            raise RequestError(400, f"messages.{i}: only user messages may carry images", f"messages.{i}")
        out.append(ChatMessage(m.role, tuple(parts)))
    return out


def parse_chat_request(body: bytes, config: Any, model_name: str) -> ParsedRequest:
    """Validate a chat-completions body against `config` (a `ServeConfig`)."""
    try:
        raw = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RequestError(400, f"the request body is not valid JSON: {e}") from None
    if not isinstance(raw, dict):
        raise RequestError(400, "the request body must be a JSON object")
    try:
        req = _ChatRequest.model_validate(raw)
    except ValidationError as e:
        message, loc = _validation_message(e)
        raise RequestError(400, message, loc) from None
    if req.model is not None and req.model != model_name:
        raise RequestError(404, f"model {req.model!r} is not served here; this server serves {model_name!r}",
                           "model", "model_not_found")
    if req.stream:
        raise RequestError(400, "stream=true is not supported; send stream=false", "stream")
    if req.n != 1:
        raise RequestError(400, f"n must be 1, got {req.n}", "n")
    max_tokens = req.max_completion_tokens or req.max_tokens or config.default_max_tokens
    if max_tokens > config.max_new_tokens:
        raise RequestError(400, f"max_tokens {max_tokens} exceeds this server's limit of "
                                f"{config.max_new_tokens}", "max_tokens")
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if len(stop) > 4:
        raise RequestError(400, f"at most 4 stop strings, got {len(stop)}", "stop")
    if req.top_logprobs:
        raise RequestError(400, "top_logprobs is not supported; send logprobs=true alone", "top_logprobs")
    sampling = SamplingParams(max_tokens=max_tokens, temperature=req.temperature, top_p=req.top_p,
                              top_k=max(req.top_k, 0), seed=req.seed, stop=stop, logprobs=req.logprobs)
    return ParsedRequest(_messages(req, config), sampling, req.return_tokens_as_token_ids)


# -- field checks shared by the SGLang-native routes (webrl.serve.native, webrl.serve.weights) ----------
def json_object(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise RequestError(400, f"{where} must be a JSON object, got {type(value).__name__}", where)
    return value


def check_keys(obj: dict, allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(obj) - set(allowed))
    if unknown:
        raise RequestError(400, f"{where}: unsupported field(s) {unknown}; supported: {list(allowed)}", unknown[0])


def int_field(value: Any, where: str, low: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or (low is not None and value < low):
        bound = f" >= {low}" if low is not None else ""
        raise RequestError(400, f"{where} must be an integer{bound}, got {value!r}", where)
    return value


def number_field(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(400, f"{where} must be a number, got {value!r}", where)
    return float(value)


def int_list(value: Any, where: str) -> list[int]:
    if not isinstance(value, list):
        raise RequestError(400, f"{where} must be a list of token ids, got {type(value).__name__}", where)
    return [int_field(v, f"{where}[{i}]", 0) for i, v in enumerate(value)]
