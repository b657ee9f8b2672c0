"""A trivial rank program for the launcher test: joins the process group, all-reduces, and writes
what it saw to OUT_DIR/rank<N>.json."""
import json
import os
import sys

import deepspeed
import torch
import torch.distributed as dist

sys.path.insert(0, os.getcwd())
from megatron.neox_arguments import NeoXArgs  # noqa: E402

args = NeoXArgs.consume_args()
deepspeed.init_distributed(dist_backend="gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
with open(os.path.join(os.environ["OUT_DIR"], f"rank{dist.get_rank()}.json"), "w") as f:
    json.dump({"rank": dist.get_rank(), "world_size": dist.get_world_size(), "pos_emb": args.pos_emb,
               "train_batch_size": args.train_batch_size, "all_reduce_sum": total.item()}, f)
dist.destroy_process_group()  # gloo threads alive at exit abort the process
