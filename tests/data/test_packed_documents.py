"""Document masking for packed samples (`reset-attention-mask`, `reset-position-ids`): the document ids
and positions agree with megatron-core's own masks and positions; a packed sample gives exactly the
logits and gradients of running each of its documents alone, for every kind of positional method on
every attention path; the flex path's tile classification agrees with the dense mask; bad combinations are
one-paragraph errors. The compiled flex kernel and training through train.py: tests/e2e/data/."""
import pytest
import torch
from megatron.core.datasets.gpt_dataset import _get_ltor_masks_and_position_ids
from tests.support.data import data_of

from megatron.data import build_train_valid_test_datasets
from megatron.data.packed_documents import document_ids, positions_in_documents, samples_across_documents
from megatron.errors import NeoXArgsError
from megatron.model.attention import FLEX_BLOCK, flex_block_mask
from megatron.neox_arguments import NeoXArgs
from megatron.tokenizer import build_tokenizer
from tests.support.hf_export import tiny_config
from tests.support.packed_documents import (EOD, LENGTH, METHODS, alone_and_packed, documents_of, model_of,
                                            packed_rows)
from tests.support.training import tiny_args


def test_ids_and_positions_are_megatron_cores():
    """megatron-core's reset positions and its document attention mask, row by row, are the ones the ids make."""
    tokens = packed_rows()
    ids = document_ids(tokens, EOD)
    positions = positions_in_documents(ids)
    for row in range(tokens.shape[0]):
        masked, _, theirs = _get_ltor_masks_and_position_ids(tokens[row], EOD, True, True, False, True)
        assert torch.equal(positions[row], theirs)
        visible = (ids[row][:, None] == ids[row][None, :]) & torch.ones(LENGTH, LENGTH, dtype=torch.bool).tril()
        assert torch.equal(visible, ~masked[0])  # megatron-core's mask is True where a key is hidden
        assert [int(n) for n in ids[row].bincount()] == [end - start for start, end in documents_of(tokens[row])]


@pytest.mark.parametrize("impl", ["sdpa", "blocked", "auto"])
@pytest.mark.parametrize("method", METHODS)
def test_a_packed_sample_gives_the_logits_of_each_document_alone(method, impl):
    model = model_of(method, attention_impl=impl).eval()
    with torch.no_grad():
        alone, packed = alone_and_packed(model, packed_rows())
    torch.testing.assert_close(packed, alone, atol=2e-5, rtol=0)


@pytest.mark.parametrize("impl", ["sdpa", "blocked", "auto"])
@pytest.mark.parametrize("method", ["alibi+ssmax", "rotary+ssmax", "alibi", "fox", "cable"])
def test_running_positions_give_each_document_alone_for_relative_methods(method, impl):
    """reset-attention-mask without reset-position-ids: positions run on across documents, which a relative
    method does not see; ssmax's n is the keys a query sees in its own document (issue 38: it was the
    position + 1, 0.056 off), so these rows too give each document's logits alone."""
    model = model_of(method, attention_impl=impl).eval()
    with torch.no_grad():
        alone, packed = alone_and_packed(model, packed_rows(), reset_positions=False)
    torch.testing.assert_close(packed, alone, atol=2e-5, rtol=0)


@pytest.mark.parametrize("impl", ["sdpa", "blocked"])
@pytest.mark.parametrize("method", ["rotary", "kerple_log", "t5", "kerple_bias_weight", "fire", "alibi+ssmax",
                                    "learned", "fox", "cope", "kerple_log+dape2", "stickbreaking", "path"])
def test_and_the_gradients_of_each_document_alone(method, impl):
    """Training: the gradient of every parameter through the packed sample equals the sum over its documents run
    alone (the learnable tables' gradients on the side included: table_gradient.py with per-row masks)."""
    model = model_of(method, attention_impl=impl).train()
    tokens = packed_rows(1)
    weights = torch.randn(2, LENGTH, model.vocab_size, generator=torch.Generator().manual_seed(2))
    grads = []
    for alone in (True, False):
        model.zero_grad()
        logits = alone_and_packed(model, tokens)[0 if alone else 1]
        (logits * weights).sum().backward()
        grads.append({name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and any("pos_embs" in name for name in grads[0]) == \
        any(True for _ in model.positional_embeddings()[0].parameters())
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-4, rtol=1e-4, msg=name)


def test_masking_alone_keeps_positions_running():
    """reset-attention-mask without reset-position-ids: a relative method still equals each document alone
    (its terms see distances only); an absolute one does not (its positions run on across documents)."""
    tokens = packed_rows()
    with torch.no_grad():
        alone, packed = alone_and_packed(model_of("alibi").eval(), tokens, reset_positions=False)
        torch.testing.assert_close(packed, alone, atol=2e-5, rtol=0)
        alone, packed = alone_and_packed(model_of("learned").eval(), tokens, reset_positions=False)
        assert not torch.allclose(packed, alone, atol=1e-3)
        without = model_of("learned").eval()(tokens)
        assert not torch.allclose(packed, without, atol=1e-3)  # and the mask did hide the other documents


@pytest.mark.parametrize("window", [None, 70])
def test_flex_tiles_agree_with_the_dense_mask(window):
    """Each 128 x 128 tile the block mask marks full has every pair visible, each it skips has none, and
    the rest are partial: by the dense mask written from its definition."""
    generator = torch.Generator().manual_seed(0)
    length = 3 * FLEX_BLOCK + 37
    ends = torch.rand(2, length, generator=generator) < 0.004
    ends[1, 200] = ends[1, 255] = True  # a document inside one tile, one across a tile boundary
    ids = ends.long().cumsum(1) - ends.long()
    positions = torch.arange(length)
    mask = flex_block_mask(positions, window, length, ids)
    padded = length + -length % FLEX_BLOCK
    i = torch.arange(padded)
    padded_ids = torch.cat([ids, ids[:, -1:].expand(-1, padded - length)], 1)
    visible = (i[None, :] <= i[:, None]) & (padded_ids[:, :, None] == padded_ids[:, None, :])
    if window is not None:
        clamped = i.clamp(max=length - 1)  # padded positions repeat the last one
        visible &= clamped[:, None] - clamped[None, :] < window
    tiles = padded // FLEX_BLOCK
    per_tile = visible.view(2, tiles, FLEX_BLOCK, tiles, FLEX_BLOCK).permute(0, 1, 3, 2, 4).flatten(3)
    every, some = per_tile.all(-1), per_tile.any(-1)
    full = torch.zeros(2, tiles, tiles, dtype=torch.bool)
    partial = torch.zeros(2, tiles, tiles, dtype=torch.bool)
    for row in range(2):
        for q in range(tiles):
            full[row, q, mask.full_kv_indices[row, 0, q, :mask.full_kv_num_blocks[row, 0, q]].long()] = True
            partial[row, q, mask.kv_indices[row, 0, q, :mask.kv_num_blocks[row, 0, q]].long()] = True
    assert torch.equal(full, every)
    assert torch.equal(partial, some & ~every)
    lower = torch.ones(tiles, tiles, dtype=torch.bool).tril()  # tiles causality alone would keep
    assert bool((some & ~every).any()) and bool((lower & ~some).any())  # partial tiles and skipped ones to check
    assert bool(every.any()) == (window is None)  # a 70-token window leaves no tile whole


def test_reset_positions_need_the_document_mask():
    with pytest.raises(NeoXArgsError, match="reset-position-ids: is set without reset-attention-mask.*negative "
                                            "distance"):
        NeoXArgs.from_dict(tiny_config("alibi", reset_position_ids=True))
    with pytest.raises(NeoXArgsError, match="reset-position-ids: is set together with random-positions 64"):
        NeoXArgs.from_dict(tiny_config("alibi", reset_position_ids=True, reset_attention_mask=True,
                                       random_positions=64))


def test_per_row_positions_must_step_inside_documents():
    model = model_of("rotary").eval()
    tokens = packed_rows()
    ids = document_ids(tokens, EOD)
    positions = positions_in_documents(ids)
    positions[0, 2] += 1  # a jump inside the first document
    with pytest.raises(ValueError, match="step by 1 inside each document"):
        model(tokens, position_ids=positions, document_ids=ids)


def test_every_split_carries_document_ids_and_reset_positions(stdlib_data, tmp_path):
    args = tiny_args(stdlib_data, tmp_path, reset_attention_mask=True, reset_position_ids=True,
                     data_cache_path=str(tmp_path / "cache"))
    eod = build_tokenizer(args.tokenizer_run()).eod
    crossed = 0
    for split in build_train_valid_test_datasets(*data_of(args)):
        for index in range(min(len(split), 50)):
            item = split[index]
            tokens = torch.as_tensor(item["tokens"])
            _, _, theirs = _get_ltor_masks_and_position_ids(tokens, eod, True, True, False, False)
            assert torch.equal(item["position_ids"], theirs)
            assert torch.equal(item["document_ids"], document_ids(tokens, eod))
            crossed += int(item["document_ids"][-1])
    assert crossed > 0  # samples do span several documents


def test_the_share_of_samples_across_documents_is_what_the_samples_hold(stdlib_data, tmp_path):
    """The banner's count, read from megatron-core's sample index, against the samples themselves: a sample
    spans a boundary when its input tokens hold an EOD before the last (its document ids reach 1)."""
    args = tiny_args(stdlib_data, tmp_path, reset_attention_mask=True, data_cache_path=str(tmp_path / "cache"))
    for split in build_train_valid_test_datasets(*data_of(args))[1:]:  # valid and test: every sample read in a second
        across = sum(int(split[index]["document_ids"][-1] > 0) for index in range(len(split)))
        assert samples_across_documents(split) == (across, len(split))
        assert 0 < across < len(split)
