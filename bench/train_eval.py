"""A training loop with an eval pass between epochs, for bench/fit_accuracy.py.

examples/train_cnn.py's dataset and model; after each training epoch the model is evaluated on a
second loader, as most training scripts do. Run it under ``loaderscope record``: the train loader's
trace then holds the eval passes as gaps between its epochs.

    .venv/bin/loaderscope record -- .venv/bin/python bench/train_eval.py --workers 2
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
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--eval-samples", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()

    torch.manual_seed(0)
    train_loader = DataLoader(CompressedImages(args.samples), batch_size=args.batch_size, shuffle=True,
                              num_workers=args.workers)
    val_loader = DataLoader(CompressedImages(args.eval_samples, seed=1), batch_size=args.batch_size,
                            num_workers=args.workers)
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        net.train()
        for images, labels in train_loader:
            optimizer.zero_grad()
            loss_fn(net(images), labels).backward()
            optimizer.step()
        net.eval()
        correct = 0
        with torch.no_grad():
            for images, labels in val_loader:
                correct += int((net(images).argmax(1) == labels).sum())
        print(f"epoch {epoch}: eval accuracy {correct / args.eval_samples:.2f}", flush=True)


if __name__ == "__main__":
    main()
