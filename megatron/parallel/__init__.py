"""Parallelism beyond data parallelism: sequence parallelism's process groups and its data and loss shares."""
from .sequence_groups import SequenceParallelGroups, loss_share, sequence_shard, shard_of

__all__ = ["SequenceParallelGroups", "loss_share", "sequence_shard", "shard_of"]
