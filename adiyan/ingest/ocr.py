"""OCR for image files, picture-only slides and pages without a text layer, behind one call.

RapidOCR is the default because its PP-OCR models ship inside the wheel, so it runs offline.
Debian's tesseract is the fallback when RapidOCR cannot load and ``tesseract`` is on PATH.
Engines load lazily and once per process; a failed load is remembered too, so a scanned
300-page PDF does not retry it on every page.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass

from PIL import Image, ImageDraw, ImageFont, ImageOps

ENGINES = ("rapidocr", "tesseract", "none")
# Which engines to try, in order, for each setting of ``ocr``.
_FALLBACK_ORDER = {"rapidocr": ("rapidocr", "tesseract"), "tesseract": ("tesseract",), "none": ()}
TESSERACT_TIMEOUT_S = 300


class OcrUnavailable(RuntimeError):
    """No OCR engine could be loaded; the message says why each candidate was not."""


@dataclass(frozen=True)
class OcrResult:
    text: str
    tier: str  # "ocr:<engine>", recorded per unit in the extraction report
    seconds: float


class _RapidOcr:
    name = "rapidocr"

    def __init__(self):
        from rapidocr import RapidOCR  # heavy, optional: onnxruntime loads only when OCR runs

        # Detection on an image scaled so its longer side is 960 px: the default (shorter side scaled
        # *up* to 736 px) blew a 1400x260 slide picture up to 3963x736 and took 10x as long, and it
        # split lines; on a 144-dpi A4 page both settings recovered every word of the text layer.
        self._engine = RapidOCR(params={"Global.log_level": "error",  # an empty image is named by the parser (empty_image)
                                        "Det.limit_type": "max", "Det.limit_side_len": 960})
        # RapidOCR loads its models on first use: read a specimen now, so a broken install counts
        # as "unavailable" (and tesseract is tried) instead of failing halfway through a document.
        specimen = Image.new("RGB", (240, 80), "white")
        ImageDraw.Draw(specimen).text((16, 16), "OCR 42", fill="black", font=ImageFont.load_default(size=40))
        self.read(specimen)

    def read(self, image: Image.Image) -> str:
        result = self._engine(image)
        return "\n".join(result.txts or ())


class _Tesseract:
    name = "tesseract"

    def __init__(self):
        self._binary = shutil.which("tesseract")
        if self._binary is None:
            raise OcrUnavailable("tesseract is not on PATH")

    def read(self, image: Image.Image) -> str:
        png = io.BytesIO()
        image.save(png, format="PNG")
        # --psm 6 (one uniform block of text): the mode ../shared/docs/offline.md measured on this kind of machine.
        proc = subprocess.run([self._binary, "stdin", "stdout", "--psm", "6"], input=png.getvalue(),
                              capture_output=True, timeout=TESSERACT_TIMEOUT_S, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"tesseract exited with {proc.returncode}: "
                               f"{proc.stderr.decode('utf-8', 'replace').strip()[-300:]}")
        return proc.stdout.decode("utf-8", "replace")


_FACTORIES = {"rapidocr": _RapidOcr, "tesseract": _Tesseract}
_loaded: dict[str, object] = {}  # engine name -> engine, or the exception its load raised
_lock = threading.Lock()


def _load(name: str):
    with _lock:
        if name not in _loaded:
            try:
                _loaded[name] = _FACTORIES[name]()
            except Exception as exc:  # noqa: BLE001 - any load failure means "unavailable", with its reason
                _loaded[name] = exc
        return _loaded[name]


def engine_for(ocr: str):
    """The first engine that loads for this setting, or OcrUnavailable naming every reason."""
    if ocr not in ENGINES:
        raise ValueError(f"ocr must be one of {ENGINES}, not {ocr!r}")
    reasons = []
    for name in _FALLBACK_ORDER[ocr]:
        engine = _load(name)
        if not isinstance(engine, Exception):
            return engine
        reasons.append(f"{name}: {engine}")
    raise OcrUnavailable("; ".join(reasons) if reasons else "OCR is disabled (ocr='none')")


def _flatten(image: Image.Image) -> Image.Image:
    """Upright RGB on white: transparent areas would otherwise turn black and hide dark text."""
    image = ImageOps.exif_transpose(image)
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image.convert("RGB")


def recognize(image: Image.Image, ocr: str = "rapidocr") -> OcrResult:
    """Text read from an image by the engine chosen for ``ocr``; raises OcrUnavailable if none loads."""
    engine = engine_for(ocr)
    started = time.perf_counter()
    image = _flatten(image)
    low, high = image.convert("L").getextrema()
    # A uniform image (a blank page, a white picture) holds no text; the engine would take seconds to agree.
    text = engine.read(image).strip() if low != high else ""
    return OcrResult(text, f"ocr:{engine.name}", time.perf_counter() - started)
