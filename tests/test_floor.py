"""Floor calibration rules, checked by hand."""

import pytest

from adiyan.retrieval.floor import best_threshold, recall_threshold


def test_youden_by_hand():
    rel = [0.9, 0.8, 0.7, 0.4]
    irr = [0.5, 0.3, 0.2, 0.1]
    # t=0.7: TPR 3/4, FPR 0 → J 0.75; t=0.4: TPR 1, FPR 1/4 → J 0.75 (tie: lower wins → 0.4)
    t, j, tpr, fpr = best_threshold(rel, irr)
    assert (t, j, tpr, fpr) == (0.4, 0.75, 1.0, 0.25)


def test_recall_rule_by_hand():
    rel = [0.2 + i / 100 for i in range(20)]  # 0.20 .. 0.39
    irr = [0.1, 0.25, 0.3]
    # 95% of 20 = 19 kept → drop the single lowest (0.20) → floor 0.21; irrelevant ≥ 0.21: 0.25, 0.3
    t, j, tpr, fpr = recall_threshold(rel, irr, 0.95)
    assert t == pytest.approx(0.21) and tpr == 0.95 and fpr == pytest.approx(2 / 3)
    assert recall_threshold(rel, irr, 1.0)[0] == pytest.approx(0.20)
    with pytest.raises(ValueError):
        recall_threshold([], irr)
