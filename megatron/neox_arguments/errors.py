from megatron.errors import NeoXArgsError

__all__ = ["NeoXArgsError"]
