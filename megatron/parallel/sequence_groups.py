"""The process groups of sequence parallelism, and the `mpu` DeepSpeed's engine reads them from.

Ranks are laid out as data-parallel replicas of P consecutive ranks: rank g is shard g % P of replica g // P.
A replica's P ranks split every sequence (sequence group: consecutive ranks); the ranks holding the same shard of
different replicas are a data-parallel group (stride P). DeepSpeed's engine, given this object as `mpu`, sums the
gradients over all ranks and divides by the replicas (engine.py's `_reduce_non_expert_gradients`: the
sequence-data-parallel group, averaged over its size / P), so each rank's loss is its share of its replica's loss
(`loss_share`). No tensor or pipeline parallelism: the model-parallel group is each rank alone.
"""
import torch.distributed as dist


def shard_of(rank: int, size: int) -> tuple[int, int]:
    """(data-parallel replica, sequence shard) of global `rank` with sequence-parallel-size `size`."""
    return rank // size, rank % size


class SequenceParallelGroups:
    """Build once per run, on every rank, after the process group exists (every rank creates every group, in
    the same order, as torch.distributed.new_group requires)."""

    def __init__(self, size: int):
        world, rank = dist.get_world_size(), dist.get_rank()
        self.size, self.replicas = size, world // size
        self.replica, self.shard = shard_of(rank, size)
        self.sequence_group = self.data_parallel_group = self.model_parallel_group = None
        for replica in range(self.replicas):
            group = dist.new_group(list(range(replica * size, (replica + 1) * size)))
            if replica == self.replica:
                self.sequence_group = group
        for shard in range(size):
            group = dist.new_group(list(range(shard, world, size)))
            if shard == self.shard:
                self.data_parallel_group, self.data_parallel_ranks = group, list(range(shard, world, size))
        for other in range(world):
            group = dist.new_group([other])
            if other == rank:
                self.model_parallel_group = group
        self.world_group = dist.group.WORLD

    # --- what DeepSpeed's engine and utils/groups.py ask an mpu
    def get_sequence_parallel_group(self):
        return self.sequence_group

    def get_sequence_parallel_world_size(self) -> int:
        return self.size

    def get_sequence_parallel_rank(self) -> int:
        return self.shard

    def get_sequence_data_parallel_group(self):
        return self.world_group  # every rank: a replica's shards and the replicas

    def get_sequence_data_parallel_world_size(self) -> int:
        return self.size * self.replicas

    def get_sequence_data_parallel_rank(self) -> int:
        return dist.get_rank()

    def get_data_parallel_group(self):
        return self.data_parallel_group

    def get_data_parallel_group_ranks(self) -> list[int]:
        return self.data_parallel_ranks

    def get_data_parallel_world_size(self) -> int:
        return self.replicas

    def get_data_parallel_rank(self) -> int:
        return self.replica

    def get_model_parallel_group(self):
        return self.model_parallel_group

    def get_model_parallel_world_size(self) -> int:
        return 1

    def get_model_parallel_rank(self) -> int:
        return 0



def loss_share(loss, loss_mask, group):
    """A sequence-parallel rank's share of its replica's loss: `loss` is the mean over this rank's kept tokens
    (lm_loss); the share is their sum over the kept tokens of the whole sequences (every shard of `group`), so
    the shares of a replica's ranks add up to its loss, and their gradients to its gradient."""
    kept = loss_mask.sum().to(loss.dtype)
    total = kept.detach().clone()
    dist.all_reduce(total, group=group)
    return loss * kept / total.clamp(min=1.0)


def sequence_shard(batch: dict, shard: int, size: int) -> dict:
    """Shard `shard` of `size` of every [b, s] tensor of a batch (tokens, labels, loss mask, positions, document
    ids): tokens shard*s/size .. (shard+1)*s/size - 1, so positions and document ids stay the sequence's own."""
    length = batch["tokens"].shape[1]
    part = length // size
    return {k: v[:, shard * part:(shard + 1) * part].contiguous() if v.dim() == 2 and v.shape[1] == length else v
            for k, v in batch.items()}
