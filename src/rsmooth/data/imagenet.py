"""ImageNet (ILSVRC-2012; Deng et al. 2009) from class folders, as Cohen et al. and torchvision read it.

Layout: ``<root>/imagenet/train/<wnid>/*.JPEG`` and ``<root>/imagenet/val/<wnid>/*.JPEG``
(``root`` may also be the folder that holds ``train/`` and ``val/``); the "test" split
is ``val/``.  Search order: ``data_dir`` (alone when given), else ``$RSMOOTH_DATA``, ``$IMAGENET_DIR``
(the variable of Cohen et al.'s code: the folder holding ``train/`` and ``val/``), the download cache.  Classes
are the sorted folder names, images sorted by file name within a class.  ImageNet cannot be
downloaded automatically.

Transforms (on PIL images, decoded with Pillow as RGB): ``ds[i]`` and ``get_batch``
without augmentation use Resize(256) (shorter side, bilinear) + CenterCrop(224);
training augmentation is RandomResizedCrop(224, scale (0.08, 1), ratio (3/4, 4/3)) +
horizontal flip (p = 0.5), with torchvision's algorithms and the caller's generator.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import torch

from ..errors import RsmoothError, check, setting
from .base import (ENV_DATA_DIR, DATASETS, DatasetInfo, Dataset, Indices, PathLike, cache_root, data_dir_given,
                   search_roots)
from .transforms import (
    center_crop,
    pil_to_uint8,
    random_resized_crop_params,
    resize_shorter,
    resized_crop,
)

__all__ = ["ImageNet", "IMG_EXTENSIONS", "SPLIT_FOLDERS", "CROP", "RESIZE", "SCALE", "RATIO"]

#: File extensions taken as images (case-insensitive), as torchvision's ImageFolder.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
#: Folder of each split.
SPLIT_FOLDERS = {"train": "train", "test": "val"}
CROP = 224
RESIZE = 256
SCALE = (0.08, 1.0)
RATIO = (3.0 / 4.0, 4.0 / 3.0)
#: Cohen et al.'s variable: the folder that holds ``train/`` and ``val/``
ENV_IMAGENET_DIR = "IMAGENET_DIR"

_LAYOUT_HELP = (
    "ImageNet must be downloaded by hand from image-net.org and laid out as "
    "<root>/imagenet/train/<wnid>/*.JPEG and <root>/imagenet/val/<wnid>/*.JPEG "
    "(validation images sorted into class folders), with <root> given as data_dir "
    "or $RSMOOTH_DATA, or the folder holding train/ and val/ as $IMAGENET_DIR"
)


def _classes(split_dir: Path) -> List[str]:
    try:
        return sorted(e.name for e in os.scandir(split_dir) if e.is_dir() and not e.name.startswith("."))
    except OSError as e:
        raise RsmoothError(f"cannot list {split_dir}: {e}") from None


def _scan(split_dir: Path, classes: Sequence[str]) -> List[Tuple[str, int]]:
    samples: List[Tuple[str, int]] = []
    for label, wnid in enumerate(classes):
        files = sorted(
            e.name
            for e in os.scandir(split_dir / wnid)
            if e.is_file() and e.name.lower().endswith(IMG_EXTENSIONS)
        )
        samples.extend((f"{wnid}/{f}", label) for f in files)
    return samples


@DATASETS.register("imagenet")
class ImageNet(Dataset):
    """ImageNet class folders; images decoded per access (``get_batch`` loops over them)."""

    info = DatasetInfo("imagenet", 1000, (3, CROP, CROP), (0.485, 0.456, 0.406), (0.229, 0.224, 0.225),
                       sizes=(1_281_167, 50_000))  # ILSVRC2012 train and validation

    def __init__(self, split: str, split_dir: Path, classes: Sequence[str], samples: Sequence[Tuple[str, int]]) -> None:
        info = DatasetInfo(self.info.name, len(classes), self.info.input_shape, self.info.mean, self.info.std)
        targets = torch.tensor([label for _, label in samples], dtype=torch.int64)
        super().__init__(split, targets, info=info, source=str(split_dir))
        self.root = Path(split_dir)
        self.classes: List[str] = list(classes)
        self.files: List[str] = [path for path, _ in samples]

    @classmethod
    def places(cls, data_dir: Optional[PathLike] = None) -> List[Path]:
        """Candidate folders for ``train/`` and ``val/``, in search order: ``<root>/imagenet``
        and ``<root>`` for ``data_dir`` (alone when given), else ``$RSMOOTH_DATA``, ``$IMAGENET_DIR``,
        the cache's ``imagenet`` folder."""
        places = [p for root in search_roots(data_dir) for p in (root / "imagenet", root)]
        env = os.environ.get(ENV_IMAGENET_DIR)
        if not data_dir_given(data_dir):
            places += [Path(env).expanduser()] if env else []
            places.append(cache_root() / "imagenet")
        return list(dict.fromkeys(places))

    @classmethod
    def find_root(cls, data_dir: Optional[PathLike] = None) -> Path:
        """The first of :meth:`places` that holds ``train/`` or ``val/``."""
        searched = cls.places(data_dir)
        for candidate in searched:
            if any((candidate / f).is_dir() for f in SPLIT_FOLDERS.values()):
                return candidate
        given = {setting("data_dir"): data_dir, "$" + ENV_DATA_DIR: os.environ.get(ENV_DATA_DIR),
                 "$" + ENV_IMAGENET_DIR: os.environ.get(ENV_IMAGENET_DIR)}
        unset = [] if data_dir_given(data_dir) else [name for name, value in given.items() if not value]
        note = f"; {', '.join(unset)} not set" if unset else ""
        raise RsmoothError(f"ImageNet not found (looked in {', '.join(map(str, searched))}{note}); {_LAYOUT_HELP}")

    @classmethod
    def load(cls, split: str, data_dir: Optional[PathLike] = None, download: bool = True) -> "ImageNet":
        """``download`` is ignored: ImageNet is never downloaded."""
        base = cls.find_root(data_dir)
        split_dir = base / SPLIT_FOLDERS[split]
        check(split_dir.is_dir(), f"{split_dir} does not exist; {_LAYOUT_HELP}")
        classes = _classes(split_dir)
        check(
            len(classes) > 0,
            f"{split_dir} contains no class folders; {_LAYOUT_HELP}",
        )
        other = base / SPLIT_FOLDERS["test" if split == "train" else "train"]
        if other.is_dir():
            other_classes = _classes(other)
            if other_classes and other_classes != classes:
                diff = sorted(set(classes) ^ set(other_classes))
                raise RsmoothError(
                    f"{split_dir} and {other} have different class folders "
                    f"({len(classes)} vs {len(other_classes)}; e.g. {', '.join(diff[:3])}), so labels would disagree"
                )
        samples = _scan(split_dir, classes)
        check(len(samples) > 0, f"{split_dir} contains no images ({', '.join(IMG_EXTENSIONS)}); {_LAYOUT_HELP}")
        return cls(split, split_dir, classes, samples)

    # -- images ---------------------------------------------------------------------
    def _open(self, index: int):
        from PIL import Image, UnidentifiedImageError

        path = self.root / self.files[index]
        try:
            with Image.open(path) as img:
                return img.convert("RGB")
        except (OSError, UnidentifiedImageError) as e:
            raise RsmoothError(f"cannot decode image {path}: {e}") from None

    def _eval_uint8(self, index: int) -> torch.Tensor:
        return pil_to_uint8(center_crop(resize_shorter(self._open(index), RESIZE), CROP))

    def _train_uint8(self, index: int, generator: Optional[torch.Generator]) -> torch.Tensor:
        img = self._open(index)
        top, left, h, w = random_resized_crop_params(img.height, img.width, SCALE, RATIO, generator)
        x = pil_to_uint8(resized_crop(img, top, left, h, w, CROP))
        device = generator.device if generator is not None else None
        if bool(torch.rand(1, generator=generator, device=device) < 0.5):
            x = x.flip(-1)
        return x

    def _get_image(self, index: int) -> torch.Tensor:
        return self._eval_uint8(index).to(torch.float32).div_(255.0)

    def get_batch(
        self,
        indices: Indices,
        augment: bool = False,
        generator: Optional[torch.Generator] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Decode and transform the images one by one (RandomResizedCrop + flip if ``augment``)."""
        idx = self._batch_indices(indices)
        if augment:
            xs = [self._train_uint8(int(i), generator) for i in idx]
        else:
            xs = [self._eval_uint8(int(i)) for i in idx]
        x = torch.stack(xs) if xs else torch.empty((0, *self.input_shape), dtype=torch.uint8)
        return x.to(torch.float32).div_(255.0), self.targets.index_select(0, idx)

    def _update_digest(self, digest: "hashlib._Hash") -> None:
        # The relative paths fix the example order; hashing image bytes would need a full read.
        digest.update("\n".join(self.files).encode("utf-8"))
