"""The one place a run's config becomes its `length-schedule` (megatron/length_schedule.py's LengthSchedule), which
the data, checkpoint and training records carry and deepy.py's --dry-run tables."""
from megatron.length_schedule import LengthSchedule, parse_schedule


def length_schedule_of(neox_args) -> LengthSchedule | None:
    """The run's schedule (checked with the config), or None without one."""
    if neox_args.length_schedule is None:
        return None
    paths = neox_args.train_data_paths or []
    weights = neox_args.train_data_weights or [1.0] * len(paths)  # NeoX: equal weights when none are given
    return parse_schedule(neox_args.length_schedule, neox_args.seq_length, len(paths),
                          tuple(float(w) for w in weights) if paths else None)
