"""The report's claim rules (tools/reproduce/claims.py) on hand-made Table 3 data: each verdict of each
claim comes out each way, from numbers chosen to sit on either side of its rule."""
import numpy as np
import pytest

from tools.analysis.make_tables import Cell, Table3
from tools.analysis.significance import Comparison
from tools.reproduce.claims import BOUNDED_RATIO, Claims, claim_verdicts, rules_text

# The KERPLE paper's claims, with the methods configs/reproduce/*.yml name in `claims:`.
KERPLE = Claims("kerple_log", "alibi", "t5", ("sinusoidal", "rotary"), ("alibi", "t5", "kerple_log", "kerple_power"))

T, LENGTHS = 64, (64, 128, 512)  # 512 = 8 x T: the one "long" length


def table(ppl: dict, significant: dict = (), reference: str = "kerple_log") -> Table3:
    """ppl: {method: {length: perplexity}}; significant: {(method, length): "reference" | "other"}, the
    side whose loss is significantly lower than the other's (absent: no significant difference)."""
    significant = dict(significant)
    cells = {}
    for method, row in ppl.items():
        for length, value in row.items():
            comparison = None
            if method != reference:
                side = significant.get((method, length))
                ref, other = np.log(ppl[reference][length]), np.log(value)
                comparison = Comparison(0.001 if side else 0.5, "seeds", 3, ref, other, dagger=side == "reference")
            cells["code", method, length] = Cell(ppl_mean=value, seeds=3, comparison=comparison)
    return Table3("nonoverlap", reference, 0.05, ["code"], {"code": list(ppl)}, list(LENGTHS), {"code": T}, {},
                  cells)


def verdict(t, claim, documents=(), position_length=None, windowed=None):
    return claim_verdicts(KERPLE, t, list(documents), position_length, windowed)["code"][claim - 1][1]


FLAT = {64: 10.0, 128: 9.5, 512: 9.4}
BLOWN = {64: 10.0, 128: 15.0, 512: 10.0 * BOUNDED_RATIO}  # exactly at the rule: blows up


def test_claim1_blow_up_versus_bounded():
    assert verdict(table({"kerple_log": FLAT, "alibi": FLAT, "sinusoidal": BLOWN, "rotary": BLOWN}), 1) == "confirmed"
    assert verdict(table({"kerple_log": FLAT, "alibi": FLAT, "sinusoidal": BLOWN, "rotary": FLAT}), 1) == "partly confirmed"
    just_under = {64: 10.0, 128: 12.0, 512: 10.0 * BOUNDED_RATIO - 0.01}
    assert verdict(table({"kerple_log": FLAT, "alibi": FLAT, "sinusoidal": just_under}), 1) == "not confirmed"
    assert verdict(table({"kerple_log": BLOWN, "sinusoidal": BLOWN}), 1) == "not confirmed"  # nothing bounded
    assert verdict(table({"kerple_log": FLAT, "alibi": FLAT}), 1) == "not assessed"


def test_claim2_kerple_log_against_alibi():
    worse = {64: 10.1, 128: 9.8, 512: 9.9}
    assert verdict(table({"kerple_log": FLAT, "alibi": worse}, {("alibi", 512): "reference"}), 2) == "confirmed"
    assert verdict(table({"kerple_log": FLAT, "alibi": worse}), 2).startswith("partly confirmed")
    better_at_train = {**worse, 64: 9.9}
    assert verdict(table({"kerple_log": FLAT, "alibi": better_at_train},
                         {("alibi", 512): "reference", ("alibi", 64): "other"}),
                   2) == "not confirmed (ALiBi significantly better at L = [64])"
    better = {64: 10.0, 128: 9.5, 512: 9.0}
    assert verdict(table({"kerple_log": FLAT, "alibi": better}), 2) == "not confirmed (not better at long lengths)"
    assert verdict(table({"kerple_log": FLAT}), 2) == "not assessed"


def test_claim3_t5_competitive_then_degrading():
    degrading = {64: 10.1, 128: 10.5, 512: 14.0}
    assert verdict(table({"kerple_log": FLAT, "t5": degrading}, {("t5", 512): "reference"}), 3) == "confirmed"
    # competitive at T (within 3%) but not significantly worse at the longest length
    assert verdict(table({"kerple_log": FLAT, "t5": degrading}), 3) == "partly confirmed"
    # far worse at T (and significantly so), and no worse a trend than KERPLE-log's
    poor = {64: 12.0, 128: 11.4, 512: 11.28}
    assert verdict(table({"kerple_log": FLAT, "t5": poor}, {("t5", 64): "reference"}), 3) == "not confirmed"
    assert verdict(table({"kerple_log": FLAT}), 3) == "not assessed"


def position_documents(full_tail: float, windowed_tail: float, far: float, seeds=(1, 2, 3), L=512):
    """kerple_log and its windowed run: position-wise loss 2.0 up to T, then the given levels (the full
    run's last L/8 positions at `far`), with a little per-seed noise so a paired test has spread."""
    documents = []
    for seed in seeds:
        noise = 0.001 * seed
        full = np.r_[np.full(T, 2.0), np.full(L - T - L // 8, full_tail), np.full(L // 8, far)] + noise
        windowed = np.r_[np.full(T, 2.0), np.full(L - T, windowed_tail)] - noise
        for window, curve in ((None, full), (T, windowed)):
            documents.append({"run": {"dataset": "code", "pos_emb": "kerple_log", "attention_window": window,
                                      "seed": seed},
                              "results": [{"length": L, "mode": "position", "position_loss": curve.tolist()}]})
    return documents


def test_claim4_position_wise_loss_against_the_windowed_run():
    t = table({"kerple_log": FLAT})
    assert verdict(t, 4, position_documents(1.9, 2.1, 1.8), 512, "kerple_log") == "confirmed"
    assert verdict(t, 4, position_documents(1.9, 2.1, 1.95), 512, "kerple_log") == "partly confirmed"  # not falling
    assert verdict(t, 4, position_documents(2.1, 1.9, 2.2), 512, "kerple_log") == "not confirmed"
    assert verdict(t, 4, position_documents(1.9, 2.1, 1.8), 512, None) == "not assessed"
    assert verdict(t, 4, position_documents(1.9, 2.1, 1.8), 128, "kerple_log") == "not assessed"  # no curve at 128


@pytest.mark.parametrize("reference", ["alibi"])
def test_claims_need_their_reference_as_the_tables_reference(reference):
    t = table({"kerple_log": FLAT, "alibi": FLAT})
    t.reference = reference
    assert claim_verdicts(KERPLE, t, [], None, None) == {}


def test_the_claims_name_the_methods_the_study_file_gives_them():
    """Other methods in the claims' roles: the same rules, worded with those methods (ALiBi the reference, FoX
    the anchor, rotary the competitive one; `none` blows up, the KERPLE family stays bounded)."""
    claims = Claims("alibi", "fox", "rotary", ("none",), ("kerple_log", "kerple_power", "alibi"))
    worse = {64: 10.1, 128: 9.8, 512: 9.9}
    t = table({"alibi": FLAT, "fox": worse, "rotary": {64: 10.1, 128: 10.5, 512: 14.0}, "none": BLOWN,
               "kerple_log": FLAT}, {("fox", 512): "reference", ("rotary", 512): "reference"}, reference="alibi")
    rows = claim_verdicts(claims, t, [], None, None)["code"]
    assert rows[0][:2] == ("1. None blow up beyond the training length; KERPLE, ALiBi stay bounded", "confirmed")
    assert rows[1][:2] == ("2. ALiBi is at least as good as fox at every length and better at long lengths", "confirmed")
    assert rows[1][2].startswith("ALiBi vs fox ppl: L=64: 10 vs 10.1")
    assert rows[2][:2] == ("3. rotary is competitive near the training length and degrades at long lengths", "confirmed")
    assert rows[2][2].startswith("L=64: rotary 10.1 vs ALiBi 10 (p = 0.5)")
    assert rows[3] == ("4. ALiBi's position-wise loss keeps falling past the training length, below the windowed baseline",
                       "not assessed", "needs position_length and windowed_baseline: alibi")
    assert "rotary *competitive*: within 3% of ALiBi" in rules_text(claims)


def test_the_kerple_claims_keep_the_papers_words():
    rows = claim_verdicts(KERPLE, table({"kerple_log": FLAT}), [], None, None)["code"]
    assert [claim for claim, _, _ in rows] == [
        "1. Sinusoidal and rotary blow up beyond the training length; ALiBi, T5, KERPLE stay bounded",
        "2. KERPLE-log is at least as good as ALiBi at every length and better at long lengths",
        "3. T5 is competitive near the training length and degrades at long lengths",
        "4. KERPLE-log's position-wise loss keeps falling past the training length, below the windowed baseline"]
    assert rows[0][2] == "needs sinusoidal or rotary, and ALiBi, T5 or KERPLE"


# ------------------------------------------------------------------------------------ the `claims:` key
CLAIMS = ("claims: {reference: kerple_log, anchor: alibi, competitive: t5, blow-up: [sinusoidal, rotary], "
          "bounded: [alibi, t5, kerple_log, kerple_power]}\n")


def load(tmp_path, text):
    from tests.support.ablation import SWEEP
    from tools.reproduce.spec import load_sweep
    path = tmp_path / "sweep.yml"
    path.write_text(SWEEP + text)
    return load_sweep(path)


def test_the_claims_key_is_optional(tmp_path):
    assert load(tmp_path, "").claims is None
    assert load(tmp_path, CLAIMS).claims == {"reference": "kerple_log", "anchor": "alibi", "competitive": "t5",
                                             "blow_up": ("sinusoidal", "rotary"),
                                             "bounded": ("alibi", "t5", "kerple_log", "kerple_power")}


@pytest.mark.parametrize("text,message", [
    ("claims: {reference: kerple_log}\n", "`claims`: must be a mapping with the keys reference, anchor, competitive, "
                                          "blow-up, bounded"),
    (CLAIMS.replace("competitive: t5", "competitive: [t5]"), "`claims.competitive`: must be one method"),
    (CLAIMS.replace("blow-up: [sinusoidal, rotary]", "blow-up: []"), "`claims.blow-up`: must be a non-empty list"),
    (CLAIMS.replace("anchor: alibi", "anchor: alibbi"), "`claims.anchor`: 'alibbi' is not a pos-emb"),
    (CLAIMS.replace("reference: kerple_log", "reference: t5"), "`claims.reference`: 't5' must be one of the grid's"),
])
def test_a_bad_claims_key_is_one_clear_error(tmp_path, text, message):
    from tools.reproduce.spec import SweepError
    with pytest.raises(SweepError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load(tmp_path, text)
