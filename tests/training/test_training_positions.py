"""Two training options of the methods issue and the document issue, through the real training step and the
real dataset: `random-positions` (a learned table's rows that change in one DeepSpeed step are exactly the
positions drawn for it) and `eod-mask-loss` (megatron-core's loss mask is zero exactly where the input
token is the end-of-document token)."""
import pytest
import torch
from tests.support.data import data_of
from tests.support.training import rows_one_step_trains, tiny_args

from megatron.data import build_train_valid_test_datasets
from megatron.training.random_positions import draw_positions
from megatron.tokenizer import build_tokenizer


def test_draws_are_sorted_distinct_and_in_range():
    torch.manual_seed(0)
    drawn = draw_positions(64, 256, "cpu")
    assert drawn.shape == (64,) and drawn.dtype == torch.long
    assert bool((drawn[1:] > drawn[:-1]).all()) and 0 <= int(drawn[0]) and int(drawn[-1]) < 256
    assert int(drawn[-1]) >= 64  # 64 of 256: the last draw falls past the training length (p = 1 - 1e-40)


@pytest.mark.parametrize("random_positions", [None, 256])
def test_one_step_trains_exactly_the_rows_of_the_drawn_positions(stdlib_data, tmp_path, random_positions):
    args = tiny_args(stdlib_data, tmp_path, pos_emb="learned", max_position_embeddings=256, num_layers=1,
                     hidden_size=32, num_attention_heads=2, random_positions=random_positions,
                     train_micro_batch_size_per_gpu=2, gradient_accumulation_steps=1, warmup=0.0)
    changed, expected = rows_one_step_trains(
        args, lambda: range(args.seq_length) if random_positions is None else
        draw_positions(args.seq_length, random_positions, "cpu").tolist())
    assert changed == expected
    if random_positions is not None:
        assert max(expected) >= args.seq_length  # rows past the training length were trained


@pytest.mark.parametrize("eod_mask_loss", [False, True])
def test_the_loss_mask_drops_exactly_the_end_of_document_inputs(stdlib_data, tmp_path, eod_mask_loss):
    args = tiny_args(stdlib_data, tmp_path, eod_mask_loss=eod_mask_loss, data_cache_path=str(tmp_path / "cache"),
                     train_iters=2000)
    eod = build_tokenizer(args.tokenizer_run()).eod
    train, _, _ = build_train_valid_test_datasets(*data_of(args))
    seen_eod = 0
    for index in range(min(len(train), 4000)):
        item = train[index]
        tokens, mask = torch.as_tensor(item["tokens"]), torch.as_tensor(item["loss_mask"])
        expected = (tokens != eod).float() if eod_mask_loss else torch.ones_like(mask)
        assert torch.equal(mask.float(), expected), index
        seen_eod += int((tokens == eod).sum())
    assert seen_eod > 0  # the samples do cross documents, so the check had something to check
