"""ImageNet 2012 validation images for ResNet50, with the MLPerf reference preprocessing.

The folder holds the images and `val_map.txt` (`<file name> <label>` per line, label 0-999).
Preprocessing (reference/mlperf.md section 2): resize the shorter side to 256 (bilinear), centre
crop 224, subtract the per-channel mean (123.68, 116.78, 103.94), no std scaling, NCHW float32.
JPEG and PPM go through Pillow (imported only here); `.npy` files are taken as already
preprocessed `[3, 224, 224]` float32 arrays.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs
import numpy as np

from mlperf_mig.errors import DatasetError
from mlperf_mig.workloads.workload import Workload

logger = logging.getLogger(__name__)

VAL_MAP = "val_map.txt"
RESIZE = 256
CROP = 224
CLASSES = 1000
MEAN_RGB = np.array([123.68, 116.78, 103.94], dtype=np.float32)


def check_folder(root: Path) -> None:
    """Raise DatasetError unless `root` is a folder holding val_map.txt."""
    if not root.is_dir():
        raise DatasetError(
            f"ImageNet folder {str(root)!r} does not exist; pass the validation folder holding "
            f"the images and {VAL_MAP}"
        )
    if not (root / VAL_MAP).is_file():
        raise DatasetError(
            f"ImageNet folder {str(root)!r} has no {VAL_MAP}; pass the validation folder holding "
            f"the images and {VAL_MAP}"
        )


def read_val_map(folder: Path) -> tuple[tuple[str, ...], np.ndarray]:
    """Return (file names, labels) of `folder/val_map.txt`; DatasetError when unusable."""
    path = folder / VAL_MAP
    if not path.is_file():
        raise DatasetError(
            f"ImageNet folder {str(folder)!r} has no {VAL_MAP}; expected lines "
            "'<image file> <label>' next to the images"
        )
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(
            f"{str(path)!r} is not UTF-8 text (byte {exc.start}: {exc.reason}); expected lines "
            "'<image file> <label>'"
        ) from None
    names: list[str] = []
    labels: list[int] = []
    for number, line in enumerate(text.splitlines(), start=1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or not parts[1].isascii() or not parts[1].isdigit():
            raise DatasetError(f"{path}:{number}: expected '<image file> <label>', got {line!r}")
        if int(parts[1]) >= CLASSES:
            raise DatasetError(
                f"{path}:{number}: label {parts[1]} is not an ImageNet class 0-{CLASSES - 1}"
            )
        names.append(parts[0])
        labels.append(int(parts[1]))
    if not names:
        raise DatasetError(f"{str(path)!r} lists no images")
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise DatasetError(
            f"{len(missing)} images listed in {str(path)!r} are missing, first {missing[0]!r}"
        )
    return tuple(names), np.asarray(labels, dtype=np.int64)


def preprocess(path: Path) -> np.ndarray:
    """One image as the reference's `[3, 224, 224]` float32, mean-subtracted, NCHW."""
    if path.suffix.lower() == ".npy":
        array = np.load(path)
        if array.shape != (3, CROP, CROP):
            raise DatasetError(f"{str(path)!r} holds shape {array.shape}, expected (3, 224, 224)")
        return array.astype(np.float32, copy=False)
    from PIL import Image

    try:
        with Image.open(path) as image:
            rgb = image.convert("RGB")
    except OSError as exc:
        raise DatasetError(f"cannot decode image {str(path)!r}: {exc}") from None
    width, height = rgb.size
    scale = RESIZE / min(width, height)
    size = (max(RESIZE, round(width * scale)), max(RESIZE, round(height * scale)))
    resized = rgb.resize(size, Image.Resampling.BILINEAR)
    left = (size[0] - CROP) // 2
    top = (size[1] - CROP) // 2
    cropped = np.asarray(resized.crop((left, top, left + CROP, top + CROP)), dtype=np.float32)
    return np.ascontiguousarray((cropped - MEAN_RGB).transpose(2, 0, 1))


@attrs.define(kw_only=True)
class ImageNetSource:
    """Preprocessed ImageNet validation images, read when LoadGen loads them."""

    folder: Path
    names: tuple[str, ...]
    labels: np.ndarray
    benchmark: Workload
    synthetic: bool = attrs.field(default=False, init=False)

    @classmethod
    def open(
        cls, folder: str | os.PathLike[str], *, benchmark: Workload, limit: int | None = None
    ) -> ImageNetSource:
        """The images of `folder` (the first `limit` of val_map.txt when given)."""
        root = Path(folder)
        check_folder(root)
        names, labels = read_val_map(root)
        if limit is not None and limit > len(names):
            raise DatasetError(
                f"sample count {limit} is more than the {len(names)} images listed in "
                f"{str(root / VAL_MAP)!r}; pass at most {len(names)}, or leave it out for all"
            )
        if limit is not None:
            names, labels = names[:limit], labels[:limit]
        return cls(folder=root, names=names, labels=labels, benchmark=benchmark)

    @property
    def total_count(self) -> int:
        return len(self.names)

    @property
    def performance_count(self) -> int:
        return min(self.benchmark.performance_sample_count, self.total_count)

    @property
    def description(self) -> str:
        return f"ImageNet {self.folder} ({self.total_count} images)"

    def fill(self, indices: Sequence[int], out: Mapping[str, np.ndarray]) -> None:
        (array,) = out.values()
        for row, index in enumerate(indices):
            array[row] = preprocess(self.folder / self.names[int(index)])
