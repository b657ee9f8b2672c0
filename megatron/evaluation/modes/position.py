"""`position`: mean loss at each position 0 .. L-1 over the non-overlapping chunks (the paper's Figure 5).

It reads the same loss matrix as `nonoverlap` (scored once when both are asked for) and averages it
over chunks instead of over positions."""
import math

import numpy as np

from ..scoring import nonoverlap_losses
from . import register


def position_fields(losses: np.ndarray) -> dict:
    """Mean and standard error over chunks at each position of a [chunks, L] loss matrix."""
    losses = losses.astype(np.float64)
    n = len(losses)
    return {"position_loss": losses.mean(axis=0).tolist(),
            "position_stderr": (losses.std(axis=0, ddof=1) / math.sqrt(n)).tolist() if n > 1 else None}


@register("position", "mean loss at each position 0...L-1 (from the non-overlapping pass)")
def score(context) -> dict:
    losses = context.losses("nonoverlap", nonoverlap_losses)
    return {**context.summary(losses), **position_fields(losses)}
