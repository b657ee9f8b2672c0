from megatron.errors import NeoXArgsError


class ExportError(NeoXArgsError):
    """An export that cannot be done as asked (missing checkpoint, a target that cannot hold the
    model); entry points print it as one paragraph, without a traceback."""
