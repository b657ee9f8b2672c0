"""GPT-NeoX-style training for length extrapolation.

`megatron-core` installs `megatron/core` as a namespace package; extending `__path__` lets
`import megatron.core` resolve to it while `megatron.model` etc. resolve here.
"""
import warnings
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

# megatron-core announces at import that it falls back to torch when apex / Transformer Engine are
# absent; this project never needs them, so the notice is noise in every tool's output.
warnings.filterwarnings("ignore", message="Transformer Engine and Apex are not installed")
