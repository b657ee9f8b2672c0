"""A rank program for the long-config launch test: writes the sha256 and length of its `wandb-group`
value and its argv to OUT_DIR/rank<RANK>.json (no process group: the config is all it checks)."""
import hashlib
import json
import os
import sys

sys.path.insert(0, os.getcwd())
from megatron.neox_arguments import NeoXArgs  # noqa: E402

args = NeoXArgs.consume_args()
with open(os.path.join(os.environ["OUT_DIR"], f"rank{os.environ['RANK']}.json"), "w") as f:
    json.dump({"length": len(args.wandb_group), "sha256": hashlib.sha256(args.wandb_group.encode()).hexdigest(),
               "script": os.path.basename(sys.argv[0]), "main_file": os.path.basename(__file__),
               "path0": sys.path[1]}, f)
