"""A TORCHINDUCTOR_CACHE_DIR the user set must be writable: torch makes that folder when its compiler is
imported (megatron-core imports it in every entry point) and the flex path compiles its kernels there, so a
folder it cannot write (a file, read-only, a full disk) ends in chained tracebacks deep in torch."""
import os
import tempfile

from megatron.errors import NeoXArgsError
from megatron.quoting import quote


def check_inductor_dir_writable() -> None:
    """The folder is made and a block written and removed, or one paragraph says why not."""
    folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not folder:
        return
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-probe-", buffering=0) as probe:
            probe.write(b"\0" * 4096)  # a full disk still lets an empty file be made
    except OSError as err:
        raise NeoXArgsError(
            f"TORCHINDUCTOR_CACHE_DIR={quote(folder)} cannot be written ({quote(err.strerror or str(err))}): torch "
            "creates that folder when its compiler is imported, and attention-impl 'flex' compiles its kernels "
            "there; nothing was run. Point TORCHINDUCTOR_CACHE_DIR at a writable folder with free space, or unset "
            "it (torch's default is under the temporary folder); attention-impl 'auto' or 'blocked' compile "
            "nothing and give the same numbers.") from None
