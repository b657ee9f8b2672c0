"""A sweep's `extensions`: each entry fine-tunes its method's plain run at a longer context, as a run of its
own that trains after that run (finetune: true, load = its checkpoints), is evaluated like every run, and is
reported beside its base model's zero-shot result. In-process (the end-to-end run:
tests/e2e/reproduce/test_reproduce_extensions.py)."""
import json
import pathlib
import shlex

import numpy as np
import pytest
import yaml
from scipy import stats

from megatron.evaluation.results import SCHEMA, summarize
from tests.support.reproduce import YARN
from tools.reproduce.__main__ import main  # imported here: execute.py asks ldconfig for libc on import

REPO = pathlib.Path(__file__).resolve().parents[2]

EXTENSIONS = {"rotary": {"yarn-256": {"seq-length": 256, "seq-length-val": 256, "train-iters": 5,
                                      "rotary-scaling": YARN},
                         "base-256": {"seq-length": 256, "train-iters": 5, "rotary-emb-base": 500000,
                                      "train_micro_batch_size_per_gpu": 4}},
              "kerple_log": {256: {"seq-length": 256, "seq-length-val": 256, "train-iters": 5}}}


def spec(tmp_path, **changes) -> dict:
    return {"name": "ext", "scale": "extension test", "profile": ["configs/tiny.yml"],
            "methods": ["kerple_log", "rotary"], "seeds": [1, 2], "datasets": ["stdlib"],
            "data": {"stdlib": {"builder": "stdlib", "prefix": str(tmp_path / "data" / "stdlib_text_document")}},
            "evaluation": {"eval-lengths": [64, 256]}, "set": {"train-iters": 10},
            "extensions": EXTENSIONS, "work_dir": str(tmp_path / "work"), "report_dir": str(tmp_path / "report"),
            **changes}


def load(tmp_path, **changes):
    from tools.reproduce.spec import load_sweep
    path = tmp_path / "sweep.yml"
    path.write_text(yaml.safe_dump(spec(tmp_path, **changes), sort_keys=False))
    return load_sweep(path)


@pytest.mark.parametrize("extensions,message", [
    ({"alibi": {"x": {"seq-length": 256}}}, "`extensions.alibi`: 'alibi' is not one of the grid's methods "
     "(kerple_log, rotary); an extension fine-tunes the plain run of one of them"),
    ({"rotary": {"x": {"train-iters": 5}}}, "`extensions.rotary.x`: sets no seq-length"),
    ({"rotary": {"x": {"seq-length": 256, "finetune": False}}}, "finetune: the sweep sets these for every extension"),
    ({"rotary": {"x": {"seq-length": 256, "load": "/elsewhere", "save": "s"}}}, "load, save: the sweep sets these"),
    ({"rotary": {"x": {"seq-length": 256, "pos-emb": "alibi"}}}, "pos-emb and seed are those of the run it extends"),
    ({"rotary": {"x": {"seq-length": 256, "no-such-key": 1}}}, "`extensions.rotary.x`: no-such-key is not a config key"),
    ({"rotary": {"a b": {"seq-length": 256}}}, "label 'a b': letters, digits"),
    ({"rotary": {}}, "must map a label to a non-empty mapping of NeoX keys"),
    ([{"rotary": {}}], "`extensions`: must map a method to {label: {NeoX key: value, ...}}"),
])
def test_a_bad_extension_is_one_clear_error(tmp_path, extensions, message):
    from tools.reproduce.spec import SweepError
    with pytest.raises(SweepError) as error:
        load(tmp_path, extensions=extensions)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_an_extension_label_may_not_be_a_training_variants_too(tmp_path):
    from tools.reproduce.spec import SweepError
    with pytest.raises(SweepError, match="label 'x' is also a training variant of rotary: both would be reported "
                                         r"as `rotary\+x`"):
        load(tmp_path, training_variants={"rotary": {"x": {"precision": "bf16"}}},
             extensions={"rotary": {"x": {"seq-length": 256}}})


def test_each_extension_follows_its_base_run_and_fine_tunes_its_checkpoints(tmp_path):
    from tools.reproduce.runs import plan_runs
    sweep = load(tmp_path)
    assert set(sweep.extensions["kerple_log"]) == {"256"}  # a YAML number as a label is its text
    runs = plan_runs(sweep, [sweep.data["stdlib"]])
    assert [str(r) for r in runs[:5]] == ["stdlib/kerple_log/seed1", "stdlib/kerple_log+256/seed1",
                                          "stdlib/rotary/seed1", "stdlib/rotary+yarn-256/seed1",
                                          "stdlib/rotary+base-256/seed1"]
    base, yarn = runs[2], runs[3]
    assert yarn.extends is base and yarn.after is base and yarn.base is None and base.after is None
    train = yarn.training_overrides()
    assert train["finetune"] is True and train["load"] == str(base.checkpoints)
    assert train["save"] == str(yarn.checkpoints) != train["load"]
    assert yarn.checkpoints == tmp_path / "work/stdlib/rotary+yarn-256/seed1/checkpoints"
    assert train["tensorboard_dir"] == str(tmp_path / "work/stdlib/rotary+yarn-256/seed1/tensorboard")
    assert (train["seq_length"], train["rotary_scaling"]) == (256, YARN)
    evaluate = yarn.evaluation_overrides()  # the extension's own checkpoints, as trained
    assert evaluate["load"] == str(yarn.checkpoints) and "finetune" not in evaluate
    # The run's config reads each value as its --set does: the checkpoint's keys, the hash evaluate.py writes.
    args = yarn.args()
    assert (args.seq_length, args.train_iters, args.finetune) == (256, 5, True)
    assert args.rotary_scaling == {"type": "yarn", "factor": 4, "original_max_position": 64}
    assert runs[4].args().rotary_emb_base == 500000 and runs[4].args().train_micro_batch_size_per_gpu == 4
    assert yarn.args().train_micro_batch_size_per_gpu == base.args().train_micro_batch_size_per_gpu  # not changed
    assert len({r.identity.config_hash for r in runs[2:5]}) == 3
    assert str(yarn.label) == "rotary+yarn-256" and str(runs[1].label) == "kerple_log+256"


def test_the_dry_run_lists_each_extension_after_its_base_with_its_commands(tmp_path, capsys, monkeypatch):
    path = tmp_path / "sweep.yml"
    path.write_text(yaml.safe_dump(spec(tmp_path, seeds=[1]), sort_keys=False))
    monkeypatch.chdir(REPO)
    assert main([str(path), "--dry-run"]) == 0
    plan, commands = capsys.readouterr().out.split("# Commands\n")
    assert "Trainings: 5: 0 done, 5 to do; 3 of them extensions, each trained after the run it extends" in plan
    trainings = [shlex.split(c) for c in commands.splitlines() if " train.py " in c]
    folders = [next(a for a in c if a.startswith("save=")).split("/")[-3] for c in trainings]
    assert folders == ["kerple_log", "kerple_log+256", "rotary", "rotary+yarn-256", "rotary+base-256"]
    yarn = trainings[3]
    assert "finetune=true" in yarn and f"load={tmp_path}/work/stdlib/rotary/seed1/checkpoints" in yarn
    assert "seq_length=256" in yarn and 'rotary_scaling={"type": "yarn", "factor": 4, "original-max-position": 64}' in yarn
    evaluations = [shlex.split(c) for c in commands.splitlines() if " evaluate.py " in c]
    assert f"load={tmp_path}/work/stdlib/rotary+yarn-256/seed1/checkpoints" in evaluations[3]
    assert not any(a.startswith("finetune") for a in evaluations[3])


def test_an_extension_of_a_base_run_trained_differently_is_never_reused(tmp_path):
    from tools.reproduce.runs import RunFailed, check_training_config, plan_runs
    sweep = load(tmp_path)
    yarn = plan_runs(sweep, [sweep.data["stdlib"]])[3]
    (yarn.checkpoints / "global_step5").mkdir(parents=True)
    stamp = {"config_hash": yarn.identity.config_hash, "extends": yarn.extends.identity.config_hash}
    (yarn.directory / "training_config.json").write_text(json.dumps(stamp))
    assert check_training_config(yarn) == yarn.identity.config_hash
    (yarn.directory / "training_config.json").write_text(json.dumps({**stamp, "extends": "another"}))
    with pytest.raises(RunFailed, match=r"holds a fine-tune of a base run of a different training config \(the sweep "
                                        "or profile of stdlib/rotary/seed1 changed since\); delete"):
        check_training_config(yarn)


LENGTHS, SEEDS, CHUNKS = (64, 256, 1024), (1, 2, 3), 20


def result(method, pos_emb, T, seed, level, extension=None) -> dict:
    """A result file of a hand-made run: loss `level(L)` plus a per-seed offset every run of the seed shares."""
    rng, records = np.random.default_rng([seed, len(method)]), []
    for L in LENGTHS:
        losses = level(L) + 0.03 * seed + rng.normal(0, 0.01, (CHUNKS, 1)) + np.zeros((CHUNKS, 2))
        records.append({"length": L, "mode": "nonoverlap", **summarize(losses, L, "nonoverlap", np.arange(CHUNKS) * L)})
    name = f"stdlib_{method}_seed{seed}_step10_0123abcd"
    return {"schema": SCHEMA, "path": name, "results": records, "evaluation": {},
            "run": {"name": name, "method": method, "pos_emb": pos_emb, "variant": method.partition("+")[2] or None,
                    "attention_window": None, "seed": seed, "dataset": "stdlib", "train_length": T,
                    "checkpoint_step": 10, **({"extension": extension} if extension else {})}}


def test_the_section_pairs_each_extension_with_its_base_at_every_length(tmp_path):
    """p-values against scipy's paired t-test on the per-seed losses (an independent reference)."""
    from tools.reproduce.figures import ppl_ratios
    from tools.reproduce.variants import extensions_section
    sweep = load(tmp_path, extensions={"rotary": {"yarn-256": {"seq-length": 256, "rotary-scaling": YARN}}})
    base = lambda L: 2.0 + 0.5 * np.log2(L / 64)  # noqa: E731  zero-shot: worse with length
    extended = lambda L: 1.95 + (0.4 if L > 256 else 0.0)  # noqa: E731
    documents = ([result("rotary", "rotary", 64, s, base) for s in SEEDS]
                 + [result("rotary+yarn-256", "rotary", 256, s, extended, {"label": "yarn-256"}) for s in SEEDS])
    drawn = []
    section = extensions_section(sweep, documents, lambda figure, stem: drawn.append(stem))
    assert "training lengths: rotary 64, rotary+yarn-256 256" in section
    assert drawn == [] and ".png" not in section  # no probe results: no heatmaps of the extensions
    rows = {int(r.split(" | ")[2]): r.split(" | ") for r in section.splitlines() if r.startswith("| rotary+yarn-256")}
    assert sorted(rows) == list(LENGTHS)
    for L, cells in rows.items():
        loss = {m: [next(r["loss"] for r in d["results"] if r["length"] == L) for d in documents if d["run"]["method"] == m]
                for m in ("rotary", "rotary+yarn-256")}
        p = stats.ttest_rel(loss["rotary"], loss["rotary+yarn-256"]).pvalue
        assert cells[5] == f"p = {p:.2g}"
        assert float(cells[3]) == pytest.approx(np.mean([np.exp(x) for x in loss["rotary"]]), rel=1e-3)
        assert cells[6].strip(" |") == ("**lower**" if p < 0.05 and np.mean(loss["rotary+yarn-256"]) <
                                        np.mean(loss["rotary"]) else "**higher**" if p < 0.05 else "–")
    # The figure's ratios: each method against its own training length, nothing below it.
    ratios = ppl_ratios(documents)["stdlib"]
    assert sorted(ratios["rotary"]) == [1, 4, 16] and sorted(ratios["rotary+yarn-256"]) == [1, 4]


def test_the_reports_copy_of_an_extensions_result_carries_its_label_and_base(tmp_path):
    from tools.reproduce.inputs import labelled, relabelled
    from tools.reproduce.runs import plan_runs
    sweep = load(tmp_path)
    yarn = plan_runs(sweep, [sweep.data["stdlib"]])[3]
    written = str(yarn.written_label)  # what evaluate.py writes: the pos-emb and the scaling's own label
    assert written.startswith("rotary+yarn4-")
    document = labelled(result(written, "rotary", 256, 1, lambda L: 2.0), yarn)
    assert document["run"]["method"] == "rotary+yarn-256" and relabelled(document)
    assert document["run"]["extension"] == {"label": "yarn-256", "keys": sweep.extensions["rotary"]["yarn-256"],
                                            "base": "rotary"}
    assert document["run"]["name"] == "stdlib_rotary+yarn-256_seed1_step10_0123abcd"
