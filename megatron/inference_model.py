"""A trained model ready for inference (evaluation, generation): built from the config, weights from
`load` (checkpointing.py's `load_model_weights`), on this rank's device, in eval mode."""
import torch

from megatron.checkpointing import load_model_weights
from megatron.model import GPTModel


def inference_device_and_dtype(neox_args) -> tuple[torch.device, torch.dtype]:
    """This rank's device, and the config's precision there: bf16/fp16 only where the hardware runs
    them fast; CPU runs in fp32."""
    device = torch.device(f"cuda:{neox_args.local_rank}" if torch.cuda.is_available() else "cpu")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(neox_args.precision, torch.float32)
    return device, dtype if device.type == "cuda" else torch.float32


def load_model(neox_args, tokenizer):
    """-> (model, checkpoint step). A missing or mismatched checkpoint is a CheckpointError."""
    device, dtype = inference_device_and_dtype(neox_args)
    model = GPTModel(neox_args, tokenizer.padded_vocab_size)
    iteration = load_model_weights(neox_args, model)
    return model.to(device=device, dtype=dtype).eval(), iteration
