"""train.py's banner (megatron/training/banner.py): the run's name and folder, the method with every switch that
changes the model, and document masking's share of samples (counted: tests/data/test_packed_documents.py)."""
from megatron.neox_arguments import NeoXArgs
from megatron.neox_arguments.to_training import run_banner
from megatron.training.banner import masking_line, method_and_switches, model_line, run_line
from tests.support.training import TINY


def args(**overrides):
    """The banner's record of configs/tiny.yml with `overrides`, as train.py builds it."""
    return run_banner(NeoXArgs.from_ymls([TINY], overrides))


def test_every_switch_that_changes_the_model_is_named():
    hybrid = args(layer_pattern=[{"pos_emb": "alibi", "attention_window": 32}, {"pos_emb": "kerple_log"}],
                  attention_temperature={"type": "ssmax"}, random_positions=1024, attention_window=48,
                  reset_attention_mask=True)
    assert method_and_switches(hybrid) == ("kerple_log + layers[alibi/w32, kerple_log] + ssmax + random positions "
                                           "<1024 + docmask + window 48")
    assert method_and_switches(args()) == "kerple_log"
    assert model_line(args(pos_emb="alibi"), 149_248, 0) == (
        "model: 149,248 parameters, pos-emb alibi, fp32, ZeRO stage 0, 1 rank(s)")


def test_the_run_line_names_the_run_and_where_it_is_filed(tmp_path):
    assert run_line(args(run_name="KERPLE-log, masked", run_dir=str(tmp_path))) == (
        f'run: "KERPLE-log, masked", filed in {tmp_path}')
    assert run_line(args(save=str(tmp_path / "ckpt"))) == f"run: unnamed (no run-name), checkpoints in {tmp_path}/ckpt"
    assert run_line(args()) == "run: unnamed (no run-name), no checkpoints kept (set run-dir or save)"


def test_masking_says_how_much_of_the_data_it_changes():
    assert masking_line(args(), 10, 100) is None  # masking off: no line
    few = masking_line(args(reset_attention_mask=True), 646, 168_805)
    assert few == ("document masking on (reset-attention-mask): 646 of 168,805 training samples (0.4%) span a "
                   "document boundary; masking changes only those -- on this data it changes little: documents "
                   "are long next to seq-length 64")
    many = masking_line(args(reset_attention_mask=True, reset_position_ids=True), 900, 1000)
    assert many.startswith("document masking on (reset-attention-mask, positions restart in each document): 900 of "
                           "1,000 training samples (90.0%)") and "changes little" not in many
