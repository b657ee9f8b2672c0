"""Evaluation with each sequence split over a sequence-parallel group: every rank of a replica runs the model on
its shard of every window and computes the losses of its shard's tokens alone (its head applied as `loss-head`
says, so the logits' memory per rank falls as 1/P or to one slice); the ranks then exchange the [b, s/P]
losses, and each holds the window's."""
import torch


class SequenceParallelScorer:
    """What evaluation's loss passes call (megatron/evaluation/scoring.py's window_losses reads
    `sequence_losses`), for a model whose `sequence_parallel` is set."""

    def __init__(self, model, device):
        self.model, self.device, self.parallel = model, device, model.sequence_parallel

    def sequence_losses(self, inputs: torch.Tensor, targets: torch.Tensor, vocab_size: int | None) -> torch.Tensor:
        """inputs, targets [b, s] -> losses [b, s] (fp32, CPU) of the whole windows."""
        part = inputs.shape[1] // self.parallel.size
        mine = slice(self.parallel.rank * part, (self.parallel.rank + 1) * part)
        losses = self.model(inputs[:, mine].to(self.device), labels=targets[:, mine].to(self.device),
                            vocab_size=vocab_size)
        return self.parallel.gather(losses.float(), dim=1).cpu()
