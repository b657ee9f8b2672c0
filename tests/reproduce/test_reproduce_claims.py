"""The report's claim rules (tools/reproduce/claims.py) on hand-made Table 3 data: each verdict of each
claim comes out each way, from numbers chosen to sit on either side of its rule."""
import numpy as np
import pytest

from tools.analysis.make_tables import Cell, Table3
from tools.analysis.significance import Comparison
from tools.reproduce.claims import BOUNDED_RATIO, claim_verdicts

T, LENGTHS = 64, (64, 128, 512)  # 512 = 8 x T: the one "long" length


def table(ppl: dict, significant: dict = ()) -> Table3:
    """ppl: {method: {length: perplexity}}; significant: {(method, length): "reference" | "other"}, the
    side whose loss is significantly lower than the other's (absent: no significant difference)."""
    significant = dict(significant)
    cells = {}
    for method, row in ppl.items():
        for length, value in row.items():
            comparison = None
            if method != "kerple_log":
                side = significant.get((method, length))
                ref, other = np.log(ppl["kerple_log"][length]), np.log(value)
                comparison = Comparison(0.001 if side else 0.5, "seeds", 3, ref, other, dagger=side == "reference")
            cells["code", method, length] = Cell(ppl_mean=value, seeds=3, comparison=comparison)
    return Table3("nonoverlap", "kerple_log", 0.05, ["code"], {"code": list(ppl)}, list(LENGTHS), {"code": T}, {},
                  cells)


def verdict(t, claim, documents=(), position_length=None, windowed=None):
    return claim_verdicts(t, list(documents), position_length, windowed)["code"][claim - 1][1]


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
def test_claims_need_kerple_log_as_the_reference(reference):
    t = table({"kerple_log": FLAT, "alibi": FLAT})
    t.reference = reference
    assert claim_verdicts(t, [], None, None) == {}
