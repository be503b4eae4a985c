"""torch.hub entry points that expose datasets to loaderscope (``--hub examples:ENTRY``).

    loaderscope run --hub examples:synthetic_images --set num_workers=2
    loaderscope serve --hub examples:synthetic_images      # the page lists it as "hub:synthetic_images"
"""

dependencies = ["torch", "numpy"]


def synthetic_images(samples: int = 512, seed: int = 0):
    """The example training script's compressed-image dataset (decode + augment in the worker)."""
    from train_cnn import CompressedImages

    return CompressedImages(samples, seed)


def pad_batch(batch):
    """collate_fn: pad variable-length sequences into one tensor."""
    from torch.nn.utils.rnn import pad_sequence

    return pad_sequence(batch, batch_first=True)


def length_sorted_text(samples: int = 400, batch_size: int = 16):
    """Variable-length 'sentences' with a length-sorted batch sampler and a padding collate_fn."""
    import torch

    from loaderscope.scenarios.datasets import LengthSortedBatchSampler

    lengths = [(i * 37) % 60 + 4 for i in range(samples)]
    return {
        "dataset": [torch.arange(n) for n in lengths],
        "batch_sampler": LengthSortedBatchSampler(lengths, batch_size, seed=0),
        "collate_fn": pad_batch,
    }
