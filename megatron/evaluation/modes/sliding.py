"""`sliding`: the non-overlapping chunks' targets, each scored once with up to L tokens of context
from the stream before it (windows advance by `eval-stride`, default L/2)."""
import functools

from ..scoring import sliding_losses
from . import register


@register("sliding", "the same targets, each scored once with L-stride+1 ... L tokens of context")
def score(context) -> dict:
    stride = min(context.settings.stride or max(context.length // 2, 1), context.length)
    losses = context.losses("sliding", functools.partial(sliding_losses, stride=stride))
    return {**context.summary(losses), "stride": stride}
