"""The training mix of a retrieval probe (megatron/data/probe_mix.py): about the requested fraction of
training samples replaced, each by index alone (so resuming sees the same ones), by a probe sample of
the same shapes whose filler is that sample's own text; the rest, and validation, untouched; a task
that does not fit seq-length is one clear error at start-up."""
import re

import numpy as np
import pytest
import torch

from megatron.data import build_data_loader, build_train_valid_test_datasets
from megatron.data.probe_mix import ProbeMix
from megatron.evaluation.identity import config_hash
from megatron.probes.common import ProbeError
from megatron.neox_arguments import NeoXArgs, NeoXArgsError
from megatron.tokenizer import ByteLevelTokenizer
from tests.support.data import data_of, make_args, write_with_megatron_core

KEYS = NeoXArgs.trained_keys()  # what a config hash is computed over

TOKENIZER = ByteLevelTokenizer()
PAIR = re.compile(r" \[([a-z]{3})=(\d{4})\]")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """60 ASCII documents of 40-400 bytes (1 byte = 1 token = 1 character)."""
    rng = np.random.default_rng(0)
    words = ["def", "return", "self", "value", "(x)", "+", "1", "\n", "    ", "import", "os"]
    documents = [TOKENIZER.tokenize(" ".join(rng.choice(words, size=rng.integers(10, 80)))) for _ in range(60)]
    folder = tmp_path_factory.mktemp("mix")
    return folder, write_with_megatron_core(folder / "text_document", documents)


def datasets(corpus, **values):
    folder, prefix = corpus
    args = make_args(folder, data_path=prefix, split="8,1,1", seq_length=64, train_iters=500, eval_interval=1000,
                     **{"probe_train_task": "kv-retrieval", "probe_train_fraction": 0.3, **values})
    return args, build_train_valid_test_datasets(*data_of(args))


def test_about_the_fraction_is_replaced_by_index_alone_and_the_rest_is_untouched(corpus):
    args, (train, valid, test) = datasets(corpus)
    assert isinstance(train, ProbeMix) and not isinstance(valid, ProbeMix) and not isinstance(test, ProbeMix)
    plain = train.dataset
    assert len(train) == len(plain) >= 2000
    replaced = 0
    for i in range(2000):
        item, base = train[i], plain[i]
        if torch.equal(item["tokens"], base["tokens"]):
            assert all(torch.equal(item[k], base[k]) for k in base)
        else:
            replaced += 1
    assert abs(replaced / 2000 - 0.3) < 0.04  # binomial sd 0.01
    assert all(torch.equal(train[i]["tokens"], train[i]["tokens"]) for i in range(50))  # same item twice
    batch = next(iter(build_data_loader(train, args.data_run(), consumed_samples=8)))  # as training reads it
    assert batch["tokens"].shape == (args.train_micro_batch_size_per_gpu, 64)


def test_a_replaced_sample_is_a_probe_of_the_same_shapes_built_from_its_own_text(corpus):
    _, (train, _, _) = datasets(corpus, probe_train_fraction=1.0)
    depths = []
    for i in range(40):
        item, base = train[i], train.dataset[i]
        assert set(item) == set(base)
        for key in base:
            assert item[key].shape == base[key].shape and item[key].dtype == base[key].dtype
        assert torch.equal(item["position_ids"], base["position_ids"]) and bool(item["loss_mask"].all())
        tokens = torch.cat([item["tokens"], item["labels"][-1:]]).tolist()
        assert item["labels"][:-1].tolist() == tokens[1:-1] and len(tokens) == 65
        text = TOKENIZER.detokenize(tokens)
        found = list(PAIR.finditer(text))
        asked, answer = re.fullmatch(r".* \[([a-z]{3})=(\d{4})", text, re.S).groups()
        assert len(found) == 3 and [m.group(2) for m in found if m.group(1) == asked] == [answer]
        filler = PAIR.sub("", text[:-len(f" [{asked}={answer}")])
        own = TOKENIZER.detokenize(torch.cat([base["tokens"], base["labels"][-1:]]).tolist())
        assert len(filler) == 22 and filler in own  # training never sees evaluation text
        queried = next(m for m in found if m.group(1) == asked)
        depths.append((queried.start() - sum(len(m.group(0)) for m in found if m.start() < queried.start())) / 22)
    assert min(depths) < 0.25 and max(depths) > 0.75  # drawn over [0, 1]


def test_a_task_that_does_not_fit_seq_length_is_one_clear_error(corpus):
    with pytest.raises(ProbeError) as err:
        datasets(corpus, probe_train_task="passkey")
    message = str(err.value)
    assert isinstance(err.value, NeoXArgsError)  # so train.py prints it as one paragraph (run_cli), no traceback
    assert message.startswith("probe-train-task: passkey does not fit a training sample")
    assert "seq-length must be at least 103 (a sample is seq-length + 1 tokens), but it is 64." in message


def test_the_mix_is_part_of_the_training_config_hash(tmp_path):
    plain = make_args(tmp_path).to_dict()
    mixed = make_args(tmp_path, probe_train_task="kv-retrieval", probe_train_fraction=0.5).to_dict()
    other = make_args(tmp_path, probe_train_task="kv-retrieval", probe_train_fraction=0.25).to_dict()
    assert len({config_hash(plain, KEYS), config_hash(mixed, KEYS), config_hash(other, KEYS)}) == 3
    assert config_hash(plain, KEYS) == config_hash(make_args(tmp_path, probe_kv_pairs=5).to_dict(), KEYS)  # evaluation only


def test_probe_train_kv_pairs_sets_the_pairs_of_every_training_prompt_and_the_config_hash(corpus, tmp_path):
    _, (train, _, _) = datasets(corpus, probe_train_fraction=1.0, probe_train_kv_pairs=1)
    for i in range(20):
        text = TOKENIZER.detokenize(torch.cat([train[i]["tokens"], train[i]["labels"][-1:]]).tolist())
        (pair,) = PAIR.finditer(text)
        assert text.endswith(f" [{pair.group(1)}={pair.group(2)}")
    mix = {"probe_train_task": "kv-retrieval", "probe_train_fraction": 0.5}
    one, three = (config_hash(make_args(tmp_path, **mix, probe_train_kv_pairs=n).to_dict(), KEYS) for n in (1, 3))
    assert one != three


@pytest.mark.parametrize("values,message", [
    ({"probe_train_task": "passkey", "probe_train_fraction": 0.5, "probe_train_kv_pairs": 1},
     "probe-train-kv-pairs: is 1, but probe-train-task is 'passkey', not 'kv-retrieval'"),
    ({"probe_train_task": "kv-retrieval", "probe_train_fraction": 0.5, "probe_train_kv_pairs": 0},
     "probe-train-kv-pairs: must be an integer from 1 to 9000"),
])
def test_a_bad_probe_train_kv_pairs_is_one_clear_error(tmp_path, values, message):
    with pytest.raises(NeoXArgsError, match=re.escape(message)):
        make_args(tmp_path, **values)


class OneText(torch.utils.data.Dataset):
    """Every item the same 65 tokens, as GPTDataset's items."""
    def __init__(self, text):
        self.ids = torch.tensor(TOKENIZER.tokenize(text))

    def __len__(self):
        return 10

    def __getitem__(self, index):
        return {"tokens": self.ids[:-1], "labels": self.ids[1:], "loss_mask": torch.ones(64),
                "position_ids": torch.arange(64)}


def test_a_sample_whose_text_holds_the_drawn_value_everywhere_gets_the_next_draw():
    """A table of numbers can hold a drawn value at every filler offset; the run must go on with the
    next key draw (seed, 0, index, 2), not stop."""
    from megatron.probes.kv_retrieval import make_sample
    clean = np.array(TOKENIZER.tokenize("x = f(y) + g(z)\n" * 8))
    first = make_sample(clean, TOKENIZER, 64, 0.5, (7, 0, 3, 1), pairs=1).key  # the value draw 1 would use
    table = (f"{first}," * 20)[:65]
    with pytest.raises(ProbeError, match="no filler of 44 tokens"):
        make_sample(np.array(TOKENIZER.tokenize(table)), TOKENIZER, 64, 0.5, (7, 0, 3, 1), pairs=1)
    mix = ProbeMix(OneText(table), "kv-retrieval", {"pairs": 1}, 1.0, 7, 64, TOKENIZER)
    item = mix[3]
    text = TOKENIZER.detokenize(torch.cat([item["tokens"], item["labels"][-1:]]).tolist())
    (pair,) = PAIR.finditer(text)
    second = make_sample(np.array(TOKENIZER.tokenize(table)), TOKENIZER, 64,
                         float(np.random.default_rng([7, 0, 3]).random(2)[1]), (7, 0, 3, 2), pairs=1)
    assert int(pair.group(2)) == second.key != first and text.endswith(f"={second.key}")
