"""hvd.elastic.ElasticSampler: horovod.torch.elastic's sampler (the same order of samples
and the same state_dict), which remembers how far the epoch got so that a restart does not
train the same samples twice."""

import math
import random

import torch.utils.data

from ..mpi_ops import rank, size


class ElasticSampler(torch.utils.data.Sampler):
    """Like DistributedSampler: the dataset's indices (shuffled by `seed + epoch` when
    `shuffle`, the same permutation on every rank) cut into hvd.size() interleaved parts,
    padded by repeating the first ones so every rank gets as many. `record_batch` counts what
    the whole job has processed this epoch (batch_size per rank); state_dict() is
    {"epoch", "processed_num"}, and reset()/load_state_dict() start from the first index not
    processed yet. Call set_epoch(e) at the end of an epoch: it starts the count again."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """batch_size samples were processed on every rank."""
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self):
        """Re-partitions what is left of the epoch over the job's ranks."""
        self.num_replicas = size()
        self.rank = rank()
        indices = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(indices)
        self.remaining_indices = indices[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = self.remaining_indices[:]
        if indices:
            while len(indices) < self.total_size:
                indices += indices[:self.total_size - len(indices)]
        self.indices = indices[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
