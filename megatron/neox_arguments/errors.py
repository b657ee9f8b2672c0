class NeoXArgsError(ValueError):
    """A mistake in the user's configuration. Entry points print the message alone, no traceback."""
