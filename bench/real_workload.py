"""Probe overhead on a real workload: JPEG decode + augmentation in 2 workers, unwatched vs watched.

    .venv/bin/python bench/real_workload.py            # 30 alternating rounds of 20 batches per side
    .venv/bin/python bench/real_workload.py --quick    # a smoke run in seconds
    .venv/bin/python bench/real_workload.py --baseline memory-off   # the memory sampling's own cost

The workload is what an image classifier's input pipeline does (what torchvision's ImageFolder with
Resize/RandomCrop/RandomHorizontalFlip/ToTensor/Normalize does; torchvision itself does not import
beside this CPU torch, see tests/stacks/test_torchvision.py): real JPEG files written to a temporary folder
with Pillow, decoded by Pillow's libjpeg in the workers, resized, cropped, flipped and normalised
with torch, collated into batches of 32x3x112x112 floats that cross to the main process through
shared memory.

As in bench/overhead.py (whose segment timing, bootstrap and discarding transport this reuses), one
vanilla and one watched iterator stay alive side by side and alternate short segments (who goes
first alternating), so both see the same machine within a fraction of a second; each round gives one
ratio (vanilla seconds / watched seconds: 1.0 is no overhead, 0.95 is 5% slower). It prints the
median ratio with a bootstrap 95% interval. The watched loader is ``loaderscope.watch(loader,
sink=...)`` whose sink takes the probe's encoded frames and discards them, as a dashboard
transport would send them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from rich.console import Console
from rich.table import Table
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import MemoryOff, Transport, alternate

import loaderscope

warnings.filterwarnings("ignore", message=".*suggested max number of worker.*")
SIZE, CROP = 128, 112
MEAN, STD = torch.tensor([0.485, 0.456, 0.406])[:, None, None], torch.tensor([0.229, 0.224, 0.225])[:, None, None]


def write_jpegs(root: Path, classes: int, per_class: int) -> list[tuple[Path, int]]:
    rng = np.random.default_rng(0)
    samples = []
    for c in range(classes):
        (root / f"class_{c}").mkdir(parents=True)
        for i in range(per_class):
            # smooth noise compresses like a photo more than white noise does
            small = rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)
            image = Image.fromarray(small).resize((SIZE + 32, SIZE + 16), Image.BICUBIC)
            path = root / f"class_{c}" / f"img_{i:03d}.jpg"
            image.save(path, quality=90)
            samples.append((path, c))
    return samples


class JpegFolder(Dataset[tuple[torch.Tensor, int]]):
    """ImageFolder's loader (PIL, RGB) and the usual training transforms; ``length`` may exceed the
    number of files (index modulo files), so one epoch covers every round."""

    def __init__(self, samples: list[tuple[Path, int]], length: int) -> None:
        self.samples, self.length = samples, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[index % len(self.samples)]
        with Image.open(path) as image:
            image = image.convert("RGB").resize((SIZE, SIZE), Image.BILINEAR)
        tensor = torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1).float().div_(255)
        top, left = (int(v) for v in torch.randint(0, SIZE - CROP + 1, (2,)))
        tensor = tensor[:, top:top + CROP, left:left + CROP]
        if torch.rand(()) < 0.5:
            tensor = tensor.flip(-1)
        return (tensor - MEAN) / STD, label


class FrameSink(Transport):
    """overhead.py's discarding transport, also callable for a sink that gets lists of event dicts."""

    def __call__(self, events: list[Any]) -> None:
        self.events += len(events)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a few short rounds: a smoke run")
    parser.add_argument("--rounds", type=int, default=30, help="alternating segment pairs")
    parser.add_argument("--segment", type=int, default=20, help="batches per side per round")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--baseline", choices=["vanilla", "memory-off"], default="vanilla",
                        help="what the watched loader is measured against: unwatched torch, or a watched loader "
                             "that samples no memory (the memory sampling's own cost)")
    args = parser.parse_args()
    rounds, segment = (4, 5) if args.quick else (args.rounds, args.segment)
    warmup = 4
    length = (rounds * segment + warmup + 8) * args.batch_size

    with tempfile.TemporaryDirectory(prefix="loaderscope-jpegs-") as tmp:
        samples = write_jpegs(Path(tmp), classes=4, per_class=32)
        kwargs: dict[str, Any] = {"batch_size": args.batch_size, "shuffle": True, "num_workers": args.workers}
        transport = FrameSink()
        base_transport = FrameSink()
        vanilla = DataLoader(JpegFolder(samples, length), generator=torch.Generator().manual_seed(0), **kwargs) \
            if args.baseline == "vanilla" else \
            MemoryOff(JpegFolder(samples, length), generator=torch.Generator().manual_seed(0), sink=base_transport,
                      **kwargs)
        watched = loaderscope.watch(
            DataLoader(JpegFolder(samples, length), generator=torch.Generator().manual_seed(0), **kwargs),
            sink=transport)
        run = alternate(vanilla, watched, rounds=rounds, segment=segment, warmup=warmup)
        watched.close()
        transport.close()
        if isinstance(vanilla, MemoryOff):
            vanilla.close()
        base_transport.close()

    v, w = run.vanilla, run.probe
    worker_cpu = {"vanilla": run.worker_cpu["vanilla"], "watched": run.worker_cpu["probe"]}
    low, high = run.interval
    base = "vanilla" if args.baseline == "vanilla" else "memory off"
    table = Table("workload", "batches per side", f"{base} batches/s", "watched batches/s",
                  "ratio (median, 95% CI)", "watched CPU/batch: main", "workers", f"{base} CPU/batch", "events/batch")
    table.add_row(
        f"JPEG {SIZE}px decode+augment, {args.workers} workers", f"{w.batches:,}",
        f"{v.batches / sum(v.seconds):,.1f}", f"{w.batches / sum(w.seconds):,.1f}",
        f"{statistics.median(run.ratios):.3f} ({low:.3f}–{high:.3f})",
        f"{(w.cpu / w.batches - v.cpu / v.batches) * 1e3:+.2f} ms",
        f"{(worker_cpu['watched'] / w.batches - worker_cpu['vanilla'] / v.batches) * 1e3:+.2f} ms",
        f"{(v.cpu + worker_cpu['vanilla']) / v.batches * 1e3:.1f} ms",
        f"{transport.events / (w.batches + warmup):.1f}",
    )
    console = Console(width=max(Console().width, 150))
    console.print(table)
    against = "unwatched torch" if args.baseline == "vanilla" else "watched without memory sampling"
    console.print(f"baseline: {against}; ratio = baseline seconds / watched seconds per round (1.0: no overhead); "
                  f"{rounds} alternating "
                  f"rounds of {segment} batches of {args.batch_size}x3x{CROP}x{CROP}; torch {torch.__version__}; "
                  f"{os.cpu_count()} CPUs; {torch.get_num_threads()} torch threads")


if __name__ == "__main__":
    main()
