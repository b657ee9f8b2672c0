"""The error generation raises for a user mistake (a bad prompt, key or length): entry points print
it as one paragraph, without a traceback."""
from megatron.errors import NeoXArgsError


class GenerationError(NeoXArgsError):
    """Generation cannot run as asked."""
