"""`nonoverlap`: every chunk of L + 1 tokens scored on its own (the paper's protocol)."""
from ..scoring import nonoverlap_losses
from . import register


@register("nonoverlap", "independent chunks of L+1 tokens (the paper's protocol)")
def score(context) -> dict:
    return context.summary(context.losses("nonoverlap", nonoverlap_losses))
