"""What the benchmarks share: timing configurations in alternating rounds (peak memory is
megatron/device_memory.py's PeakMemory, which the GPU check uses too)."""
import statistics
import time

from tqdm import tqdm


PROCESS_TIME_HELP = ("time in CPU seconds of this process (user + system) instead of wall-clock: on a "
                     "machine shared with other jobs the ratios then measure the work rather than the "
                     "neighbours; run with OMP_NUM_THREADS=1, so that waiting threads are not counted")


METHODS_HELP = ("positional methods to time (pos-emb names); `name:key=value,key=value` times the method with its "
                "own settings, e.g. `path:path-forget-gate=true rotary:rotary-unrotated-fraction=0.25`, beside the "
                "others in the same rounds (--set applies to every row)")


def method_settings(spec: str) -> tuple[str, dict]:
    """`path:path-forget-gate=true` -> ("path", {"path_forget_gate": True}) (values read as --set's)."""
    from megatron.neox_arguments.values import parse_overrides
    name, _, settings = spec.partition(":")
    return name, parse_overrides([item for item in settings.split(",") if item]) if settings else {}


def clock(process_time: bool):
    """The benchmarks' clock: wall-clock seconds, or this process's CPU seconds (PROCESS_TIME_HELP)."""
    return time.process_time if process_time else time.perf_counter


def alternating_rounds(run, names, *, rounds: int, steps: int, warmup: int) -> dict:
    """name -> median seconds per step. `run(name, steps)` runs `steps` steps of one configuration
    and returns the seconds they took. Every configuration first runs `warmup` untimed steps; then
    they take turns for `rounds` rounds, so a shared machine's load drifts over all of them alike."""
    for name in names:
        run(name, warmup)
    seconds = {name: [] for name in names}
    for _ in tqdm(range(rounds), desc="rounds", unit="round"):
        for name in names:
            seconds[name].append(run(name, steps) / steps)
    return {name: statistics.median(s) for name, s in seconds.items()}
