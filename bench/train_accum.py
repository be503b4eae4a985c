"""A training loop with gradient accumulation, for bench/fit_accuracy.py.

examples/train_cnn.py's dataset; the model gets a wide head so that its optimizer step is heavy,
and the loop steps the optimizer every ``--accumulate`` batches (after clipping the gradients), as
large-batch training does on a small device. The loader's step is then uneven: three light steps
(forward, backward) and a heavy one. Run it under ``loaderscope record``:

    .venv/bin/loaderscope record -- .venv/bin/python bench/train_accum.py --workers 2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from train_cnn import CompressedImages

HEAD = 2048  # the wide head: ~4M parameters, whose momentum update is the heavy step


def model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(8), nn.Flatten(), nn.Linear(16 * 64, HEAD), nn.ReLU(), nn.Linear(HEAD, HEAD),
        nn.ReLU(), nn.Linear(HEAD, 10),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--accumulate", type=int, default=4)
    args = parser.parse_args()

    torch.manual_seed(0)
    loader = DataLoader(CompressedImages(args.samples), batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers)
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        for step, (images, labels) in enumerate(loader, start=1):
            (loss_fn(net(images), labels) / args.accumulate).backward()
            if step % args.accumulate == 0:
                nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad()
        print(f"epoch {epoch}: {step} batches", flush=True)


if __name__ == "__main__":
    main()
