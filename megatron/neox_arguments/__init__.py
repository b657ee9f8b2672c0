"""Configuration: typed groups (groups.py) merged into one `NeoXArgs`, loaded from YAML."""
from .errors import NeoXArgsError
from .groups import POS_EMB_ALIASES, POS_EMB_CHOICES
from .neox_args import NeoXArgs, decode_config, encode_config, parse_overrides, run_cli

__all__ = ["NeoXArgs", "NeoXArgsError", "POS_EMB_CHOICES", "POS_EMB_ALIASES", "encode_config",
           "decode_config", "parse_overrides", "run_cli"]
