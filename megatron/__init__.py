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


class _DeferMegatronCore:
    """Imports `megatron.core` and `megatron.core.utils` without running their bodies until a name they define
    is asked for. This project uses only megatron-core's datasets and its learning-rate schedule, which need
    nothing of the package but `utils.log_single_rank` (defined in `_rank_utils`); the package's `__init__` and
    `utils` import its tensor-parallel, transformer, distributed-checkpoint and inference stacks (Triton,
    torch.distributed.tensor, the inductor): about 4 of the 6.8 CPU-seconds every train.py / evaluate.py process
    spent importing (`python -X importtime -c "import megatron.training.loop"`). Any other name
    (`megatron.core.mpu`, `megatron.core.utils.get_model_config`) or any other part of megatron-core runs the
    real bodies first, in a plain import's order, so the package behaves as installed.
    """
    DEFERRED = ("megatron.core", "megatron.core.utils")
    LIGHT = tuple(f"megatron.core.{part}" for part in (  # parts that need only the deferred names
        "datasets", "tokenizers", "_rank_utils", "msc_utils", "optimizer_param_scheduler", "package_info"))

    def __init__(self):
        self.pending = {}  # name -> (module, its real loader) until its body has run

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.DEFERRED:
            import importlib.machinery
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is not None:
                spec.loader = _DeferredLoader(self, spec.loader)
            return spec
        if fullname.startswith("megatron.core.") and not fullname.startswith(self.LIGHT):
            self.run("megatron.core")
        return None  # the ordinary finders find it

    def run(self, name: str) -> None:
        if name == "megatron.core.utils":
            self.run("megatron.core")  # whose body imports utils (and may run it)
        if name in self.pending:
            module, loader = self.pending.pop(name)
            del module.__getattr__
            loader.exec_module(module)


class _DeferredLoader:
    def __init__(self, finder: _DeferMegatronCore, loader):
        self.finder, self.loader = finder, loader

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        name, finder = module.__name__, self.finder

        def __getattr__(attribute: str):
            if attribute.startswith("__"):  # the import system's probes (__path__, ...) are not a use
                raise AttributeError(f"module {name!r} has no attribute {attribute!r}")
            if name == "megatron.core.utils" and attribute == "log_single_rank":
                from megatron.core._rank_utils import log_single_rank  # what utils binds it to
                module.log_single_rank = log_single_rank
            else:
                finder.run(name)
            return getattr(module, attribute)

        module.__getattr__ = __getattr__
        finder.pending[name] = (module, self.loader)


import sys  # noqa: E402

sys.meta_path.insert(0, _DeferMegatronCore())
del sys
