from megatron.neox_arguments import NeoXArgsError


class DataError(NeoXArgsError):
    """Bad input data or datasets: the message names the file (and line) and what to do."""
