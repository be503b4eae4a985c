"""A training loop over two zipped loaders, for bench/fit_accuracy.py.

Each step takes a training batch and a batch of a second loader (here the validation set, as a
loop that tracks a held-out loss every step does), each its own DataLoader with its own workers:
``for batch, held_out in zip(train_loader, val_loader)``. Each loader's trace then holds, outside its
own ``next()``, the time the loop spent in the other's. Run it under ``loaderscope record``:

    .venv/bin/loaderscope record -- .venv/bin/python bench/train_zip.py --workers 1
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from train_cnn import CompressedImages, model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=384)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()

    torch.manual_seed(0)
    train_loader = DataLoader(CompressedImages(args.samples), batch_size=args.batch_size, shuffle=True,
                              num_workers=args.workers)
    val_loader = DataLoader(CompressedImages(args.samples, seed=1), batch_size=args.batch_size,
                            num_workers=args.workers)
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        held_out = 0.0
        for (images, labels), (val_images, val_labels) in zip(train_loader, val_loader, strict=False):
            optimizer.zero_grad()
            loss_fn(net(images), labels).backward()
            optimizer.step()
            with torch.no_grad():
                held_out += float(loss_fn(net(val_images), val_labels))
        print(f"epoch {epoch}: held-out loss {held_out:.2f}", flush=True)


if __name__ == "__main__":
    main()
