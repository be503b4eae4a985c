"""A real GPU training loop, vanilla against watched, with the probe's memory sampling on.

    python bench/gpu_train.py            # on a CUDA machine: an input-bound and a compute-bound setting
    python bench/gpu_train.py --quick    # a smoke run in seconds (on a CPU too: a small ResNet, no pinning)

What an image classifier's training does: the workers decode real JPEG files (written once to a temporary
folder, decoded by Pillow's libjpeg), take a random crop and flip, and return uint8 images; the loader pins
each batch (``pin_memory=True``: torch's pin-memory thread) and the loop copies it with
``.to(device, non_blocking=True)``, normalises it on the device and trains a torchvision ResNet in bf16
autocast, channels-last, with SGD. Two settings:

- input-bound: ResNet-18 at 224 px with 3 workers, the GPU waiting for JPEG decodes;
- compute-bound: ResNet-152 at 128 px with 6 workers, the loader well ahead of the GPU.

The share of each segment spent in ``next()`` is printed for both sides, so the labels are measured, not assumed.

As in bench/overhead.py (whose alternation and bootstrap this reuses), one vanilla and one watched loader stay
alive side by side and alternate segments of training steps (who goes first alternating; each segment ends when
the GPU has finished its queued work): each round gives one ratio, vanilla seconds / watched seconds (1.0 is no
overhead). The watched loader is ``loaderscope.watch(loader, logdir=...)``: its events are written to a real trace
file, with memory samples (``$LOADERSCOPE_MEMORY`` unset: on), which the bench reads back to show what was sampled.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from rich.console import Console
from rich.table import Table
from torch import nn
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import Alternated, alternate

import loaderscope
from loaderscope.model.state import reduce
from loaderscope.model.stats import summary
from loaderscope.probe.memory import ENV as MEMORY_ENV
from loaderscope.probe.memory import OFF as MEMORY_OFF
from loaderscope.traces.jsonl import read_trace

warnings.filterwarnings("ignore", message=".*suggested max number of worker.*")
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255


@dataclass
class Setting:
    name: str
    model: str
    crop: int
    workers: int
    batch_size: int
    segment: int  # batches per side per round


SETTINGS = [Setting("input-bound", "resnet18", 224, 3, 128, 16),
            Setting("compute-bound", "resnet152", 128, 6, 128, 12)]
QUICK = [Setting("smoke", "resnet18", 64, 2, 16, 3)]


def write_jpegs(root: Path, count: int, size: int) -> list[Path]:
    """Photo-like JPEGs (smooth noise, quality 90) a little larger than the crop, as a dataset's are."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True)
    paths = []
    for i in range(count):
        small = rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)
        path = root / f"img_{i:04d}.jpg"
        Image.fromarray(small).resize((size + size // 4, size + size // 8), Image.BICUBIC).save(path, quality=90)
        paths.append(path)
    return paths


class Jpegs(Dataset[tuple[torch.Tensor, int]]):
    """Decode, random crop and flip in the worker; uint8 out (normalised on the device, as DALI-style loops do)."""

    def __init__(self, paths: list[Path], length: int, crop: int) -> None:
        self.paths, self.length, self.crop = paths, length, crop

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        with Image.open(self.paths[index % len(self.paths)]) as image:
            rgb = np.asarray(image.convert("RGB"))
        top = int(torch.randint(0, rgb.shape[0] - self.crop + 1, ()))
        left = int(torch.randint(0, rgb.shape[1] - self.crop + 1, ()))
        tensor = torch.from_numpy(rgb[top:top + self.crop, left:left + self.crop].copy()).permute(2, 0, 1)
        return (tensor.flip(-1) if torch.rand(()) < 0.5 else tensor), index % 1000


def resnet(name: str) -> tuple[nn.Module, str]:
    """torchvision's ResNet, untrained (nothing is downloaded), and its name. Without torchvision (this repo's
    CPU test environment, see tests/stacks/test_torchvision.py) the smoke run trains a two-layer stand-in."""
    try:
        from torchvision import models
    except ImportError:
        return nn.Sequential(nn.Conv2d(3, 16, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                             nn.Linear(16, 1000)), "a 2-layer CNN (no torchvision)"
    module: nn.Module = getattr(models, name)(weights=None)
    return module, name


class Trainer:
    """One model and optimiser that both sides' batches train (the same step, whichever loader fed it)."""

    def __init__(self, model: str, device: torch.device) -> None:
        self.device = device
        module, self.name = resnet(model)
        self.model = module.to(device, memory_format=torch.channels_last)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.mean, self.std = MEAN.to(device), STD.to(device)

    def train(self, batch: Any) -> None:
        images, labels = batch
        images = images.to(self.device, non_blocking=True).float().sub_(self.mean).div_(self.std)
        images = images.contiguous(memory_format=torch.channels_last)
        labels = labels.to(self.device, non_blocking=True)
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(self.model(images), labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    def settle(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def run_setting(setting: Setting, rounds: int, device: torch.device, root: Path) -> dict[str, Any]:
    warmup = 6
    paths = write_jpegs(root / setting.name, 256, setting.crop + setting.crop // 8)
    length = (rounds * setting.segment + warmup + 4) * setting.batch_size
    kwargs: dict[str, Any] = {"batch_size": setting.batch_size, "shuffle": True, "num_workers": setting.workers,
                              "pin_memory": device.type == "cuda", "drop_last": True}
    logdir = root / f"{setting.name}-logdir"
    vanilla = DataLoader(Jpegs(paths, length, setting.crop), **kwargs)
    watched = loaderscope.watch(DataLoader(Jpegs(paths, length, setting.crop), **kwargs), logdir=logdir,
                                name=f"gpu_train {setting.name}")
    trainer = Trainer(setting.model, device)
    run = alternate(vanilla, watched, rounds=rounds, segment=setting.segment, warmup=warmup, step=trainer)
    watched.close()
    return {"run": run, "model": trainer.name, "trace": [event for path in sorted(logdir.rglob("*.jsonl"))
                                  for event in read_trace(path)[1]]}


def memory_line(trace: list[Any]) -> str:
    """What the probe sampled of the watched run's memory, from its trace file."""
    memory = summary(reduce(trace))["memory"]
    if memory is None:
        return "no memory sample in the trace"
    workers = memory["workers"]
    high = max((w["high_uss"] or 0 for w in workers), default=0) / 2**20
    main = (memory["main"] or {}).get("high_rss") or 0
    in_flight = memory["in_flight_high"] / 2**20
    return (f"{memory['samples']} memory samples ({memory['source']}); main process RSS high {main / 2**30:.2f} GiB, "
            f"{len(workers)} workers' USS high {high:.0f} MiB; in flight high {in_flight:.0f} MiB")


def row(setting: Setting, run: Alternated, model: str) -> list[str]:
    v, w = run.vanilla, run.probe
    low, high = run.interval
    images = setting.batch_size

    def share(side: Any) -> str:
        return f"{side.waiting / sum(side.seconds):.0%}"

    return [setting.name, f"{model} {setting.crop}px, {setting.workers} workers",
            f"{v.batches * images / sum(v.seconds):,.0f}", f"{w.batches * images / sum(w.seconds):,.0f}",
            f"{share(v)} / {share(w)}", f"{statistics.median(run.ratios):.3f} ({low:.3f}–{high:.3f})"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a few short rounds of a small setting: a smoke run")
    parser.add_argument("--rounds", type=int, default=24, help="alternating segment pairs per setting")
    args = parser.parse_args()
    if os.environ.get(MEMORY_ENV, "on").lower() in MEMORY_OFF:
        sys.exit(f"${MEMORY_ENV} turns memory sampling off; this bench measures the probe with it on: unset it")
    if not torch.cuda.is_available() and not args.quick:
        sys.exit("bench/gpu_train.py needs a CUDA device; `--quick` runs a smoke run on the CPU")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = True
    settings, rounds = (QUICK, 3) if args.quick else (SETTINGS, args.rounds)
    table = Table("setting", "workload", "vanilla images/s", "watched images/s", "in next(): vanilla / watched",
                  "ratio (median, 95% CI)")
    notes = []
    with tempfile.TemporaryDirectory(prefix="loaderscope-gpu-train-") as tmp:
        for setting in settings:
            result = run_setting(setting, rounds, device, Path(tmp))
            table.add_row(*row(setting, result["run"], result["model"]))
            notes.append(f"{setting.name}: {memory_line(result['trace'])}")
    console = Console(width=max(Console().width, 150))
    console.print(table)
    for note in notes:
        console.print(note)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    console.print(f"ratio = vanilla seconds / watched seconds per round (1.0: no overhead); {rounds} alternating "
                  f"rounds per setting; {name}; torch {torch.__version__}; {os.cpu_count()} CPUs; bf16 autocast")


if __name__ == "__main__":
    main()
