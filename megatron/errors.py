"""The error every user mistake raises, in a module of its own: the config (megatron.neox_arguments)
is read from the model's registries, so model code cannot import the config package to get it."""


class NeoXArgsError(ValueError):
    """A mistake in the user's configuration. Entry points print the message alone, no traceback."""
