"""Every attention strategy by name, and the strategies of each `attention-impl` path in the order
a path takes them: the first that can run (its `can_run` is None) computes the forward."""
from megatron.model.attention.blocked import Blocked
from megatron.model.attention.fla_kernels import FlaKernels
from megatron.model.attention.flex import Flex
from megatron.model.attention.learnable_table import (BlockedTableGradient, SdpaTableGradient, ToeplitzTableGradient,
                                                      ToeplitzWeightedTableGradient)
from megatron.model.attention.sdpa import Sdpa, SdpaSink, SdpaWrittenOut
from megatron.model.attention.sdpa_mask_gradient import SdpaMaskGradient
from megatron.model.attention.token_terms import BlockedTokenTerms
from megatron.model.attention.toeplitz import Toeplitz, ToeplitzWrittenOut
from megatron.model.attention.triton_flash import TritonFlash

# The last of `sdpa` and of `blocked` runs every method: those paths always have a strategy.
PATH_STRATEGIES = {
    "sdpa": (SdpaTableGradient, SdpaSink, Sdpa, SdpaWrittenOut),
    "blocked": (ToeplitzTableGradient, Toeplitz, ToeplitzWrittenOut, ToeplitzWeightedTableGradient, BlockedTableGradient,
                BlockedTokenTerms, Blocked),
    "flex": (Flex,),
    "fla": (FlaKernels,),
    "triton": (TritonFlash,),
    "sdpa_mask_gradient": (SdpaMaskGradient, Sdpa, SdpaWrittenOut),
}
# Sdpa and SdpaWrittenOut are the `sdpa` path's (their `path`), also taken by `sdpa_mask_gradient`.
STRATEGIES = {strategy.name: strategy for strategies in PATH_STRATEGIES.values() for strategy in strategies}


def strategy_for(path: str, inputs):
    """(the strategy `path` takes for this forward, None) or (None, why the path cannot run here)."""
    reasons = []
    for strategy in PATH_STRATEGIES[path]:
        reason = strategy.can_run(inputs)
        if reason is None:
            return strategy, None
        reasons.append(reason)
    return None, reasons[-1]
