"""An image-classification input pipeline over real JPEG files, vanilla against watched.

torchvision cannot be installed beside the project's CPU torch 2.13.0: PyPI's torchvision 0.28.0
(the release built for torch 2.13.0) is a CUDA build whose ``_C.so`` links libtorch_cuda and
libc10_cuda, so ``import torchvision`` fails with "operator torchvision::nms does not exist"; no
CPU wheel or sdist is reachable from this machine, and torch 2.14.1 + torchvision 0.29.1 (which do
import here) would change the project's torch: scripts/test_torch_versions.sh runs this file in a venv
of its own with those two, where ``test_torchvision_image_folder`` runs for real. So ``JpegFolder`` below does what
``torchvision.datasets.ImageFolder`` does with its default loader (class per sub-folder, sorted;
PIL opens and converts to RGB) and the transforms are written with torch (resize with PIL, random
crop and flip from torch's RNG in the worker, normalise). The JPEG files and their decoding are real
(Pillow's libjpeg); when torchvision imports, the test runs the real ImageFolder and transforms too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from tests.stacks import checks as stacks

Image = pytest.importorskip("PIL.Image")

CLASSES, PER_CLASS, SIZE, CROP, BATCH = 3, 8, 40, 32, 4  # 24 JPEGs, 6 batches


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    root = tmp_path / "images"
    for c in range(CLASSES):
        (root / f"class_{c}").mkdir(parents=True)
        for i in range(PER_CLASS):
            pixels = rng.integers(0, 256, (SIZE + i, SIZE, 3), dtype=np.uint8)  # sizes differ: resize matters
            Image.fromarray(pixels).save(root / f"class_{c}" / f"img_{i:02d}.jpg", quality=90)
    return root


class JpegFolder(Dataset[tuple[torch.Tensor, int]]):
    """ImageFolder's layout and loader: one class per sub-folder (sorted), PIL decodes each JPEG."""

    def __init__(self, root: Path, transform: Any) -> None:
        self.classes = sorted(p.name for p in root.iterdir() if p.is_dir())
        self.samples = [(path, label) for label, name in enumerate(self.classes)
                        for path in sorted((root / name).glob("*.jpg"))]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[index]
        with Image.open(path) as image:
            return self.transform(image.convert("RGB")), label


def augment(image: Any) -> torch.Tensor:
    """Resize, RandomCrop, RandomHorizontalFlip, ToTensor, Normalize; randomness from torch's RNG
    (seeded per worker by the DataLoader from its generator)."""
    image = image.resize((SIZE, SIZE), Image.BILINEAR)
    tensor = torch.from_numpy(np.asarray(image, dtype=np.uint8).copy()).permute(2, 0, 1).float() / 255
    top, left = (int(v) for v in torch.randint(0, SIZE - CROP + 1, (2,)))
    tensor = tensor[:, top:top + CROP, left:left + CROP]
    if torch.rand(()) < 0.5:
        tensor = tensor.flip(-1)
    mean, std = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])
    return (tensor - mean[:, None, None]) / std[:, None, None]


def torchvision_folder(root: Path) -> Any:
    try:  # PyPI's CUDA build raises RuntimeError beside a CPU torch, not ImportError
        import torchvision as tv
        from torchvision import transforms
    except (ImportError, RuntimeError) as error:
        pytest.skip(f"torchvision does not import beside torch {torch.__version__}: {error}")

    transform = transforms.Compose([transforms.Resize((SIZE, SIZE)), transforms.RandomCrop(CROP),
                                    transforms.RandomHorizontalFlip(), transforms.ToTensor(),
                                    transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    return tv.datasets.ImageFolder(str(root), transform=transform)


def _check(make_dataset: Any, num_workers: int) -> None:
    def run(events: stacks.Events | None) -> list[list[Any]]:
        torch.manual_seed(0)  # with num_workers=0 the transforms draw from the main process's RNG
        loader = DataLoader(make_dataset(), batch_size=BATCH, shuffle=True, num_workers=num_workers,
                            generator=torch.Generator().manual_seed(11))
        if events is not None:
            stacks.watch(loader, events)
        got = [stacks.collect(loader) for _ in range(2)]
        if events is not None:
            loader.close()
        return got

    events = stacks.Events()
    expected, got = stacks.compare(lambda: run(None), lambda: run(events))
    batches = CLASSES * PER_CLASS // BATCH
    assert [len(epoch) for epoch in expected] == [batches] * 2
    assert expected[0][0][0].shape == (BATCH, 3, CROP, CROP)
    assert not stacks.same(expected[0], expected[1])  # shuffled and augmented anew each epoch
    for got_epoch, expected_epoch in zip(got, expected, strict=True):
        stacks.assert_same(got_epoch, expected_epoch)
    stacks.assert_trace(events.only_run(), consumed=[batches] * 2)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_jpeg_folder_with_augmentation(folder: Path, num_workers: int) -> None:
    _check(lambda: JpegFolder(folder, augment), num_workers)


def test_torchvision_image_folder(folder: Path) -> None:
    torchvision_folder(folder)  # skips where torchvision does not import
    _check(lambda: torchvision_folder(folder), 2)
