from megatron.errors import NeoXArgsError


class DataError(NeoXArgsError):
    """Bad input data or datasets: the message names the file (and line) and what to do."""
