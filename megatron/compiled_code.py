"""Where compiled code is kept: never shared between runs that would compile it differently.

- torch's inductor (the `flex` path's CPU kernels) keeps compiled kernels in one folder per user, and
  its cache key does not include the CPU code path (`ATEN_CPU_CAPABILITY`): a kernel compiled on the
  AVX-512 code path and reused under forced AVX2 (or the other way round) returned wrong numbers
  (docs/known-issues.md). Each torch version and CPU capability gets a folder of its own.
- DeepSpeed JIT-builds its CPU shared-memory comm op into torch's per-user extensions folder at the
  first launch; two virtualenvs overwrite each other's build there, so launches kept rebuilding it
  (40-110 s each). In a virtualenv it is kept inside the virtualenv, built once.

A folder the user set (TORCHINDUCTOR_CACHE_DIR, TORCH_EXTENSIONS_DIR) is used as it is. Called by the
code that compiles or builds (attention's flex kernel, the process-group start-up) before it does.
"""
import os
import sys

# The inductor folder this module chose. A child process inherits it with TORCHINDUCTOR_CACHE_DIR; when
# the two still agree the folder was ours, not the user's, and the child chooses for its own CPU code path.
CHOSEN_INDUCTOR_DIR = "NEOX_CHOSEN_INDUCTOR_CACHE_DIR"


def torch_default_inductor_dir() -> str:
    """The folder inductor uses when nobody sets one (it writes it into TORCHINDUCTOR_CACHE_DIR itself,
    at import of some of torch's modules, so a set variable alone does not mean the user set it)."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    return os.path.abspath(default_cache_dir())


def inductor_cache_dir() -> str:
    """torch's default inductor folder, one sub-folder per torch version and CPU capability."""
    import torch
    capability = torch.backends.cpu.get_cpu_capability().lower()  # honours ATEN_CPU_CAPABILITY
    return os.path.join(torch_default_inductor_dir(), f"torch-{torch.__version__}-{capability}")


def keep_compiled_code_apart() -> None:
    """Point inductor's cache at this CPU code path's folder and, in a virtualenv, torch's extension
    builds at the virtualenv, unless the user chose either folder."""
    inherited = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if inherited in (None, torch_default_inductor_dir(), os.environ.get(CHOSEN_INDUCTOR_DIR)):
        chosen = inductor_cache_dir()
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.environ[CHOSEN_INDUCTOR_DIR] = chosen
    if sys.prefix != sys.base_prefix:
        os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(sys.prefix, "torch_extensions"))
        # torch builds extensions with `ninja` from PATH; the virtualenv has one (a DeepSpeed dependency)
        # that a `.venv/bin/python` run without activating the virtualenv would not find.
        venv_bin = os.path.dirname(sys.executable)
        if venv_bin not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = venv_bin + os.pathsep + os.environ.get("PATH", "")
