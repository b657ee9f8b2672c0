"""Text generation: `generate_tokens` (token prompts in, continuations out), with a KV cache that
runs past the training length for every relative positional method; generate.py is its entry point."""
from .errors import GenerationError
from .generation import generate_tokens

__all__ = ["GenerationError", "generate_tokens"]
