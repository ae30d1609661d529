"""Tests of webrl.datasets: each format's artifacts are written by the tests themselves."""
import base64
import io

from PIL import Image as PILImage


def png(width: int = 200, height: int = 100, color=(90, 120, 200)) -> bytes:
    """A tiny PNG of the given size."""
    buf = io.BytesIO()
    PILImage.new("RGB", (width, height), color).save(buf, format="PNG")
    return buf.getvalue()


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()
