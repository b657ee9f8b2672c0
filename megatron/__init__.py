"""GPT-NeoX-style training for length extrapolation.

`megatron-core` installs `megatron/core` as a namespace package; extending `__path__` lets
`import megatron.core` resolve to it while `megatron.model` etc. resolve here.
"""
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)
