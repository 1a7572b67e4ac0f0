"""docs/results' table of GraphCC's unseen cases is what `ecntune eval-table` makes of the
committed folders, and its deployed seeds what `ecntune pick-seed` chooses (agent/summary.py):
the tables and the reports cannot drift apart."""

import re
from pathlib import Path

import numpy as np
import pytest

from ecntune.agent import summary
from ecntune.agent.evaluate import Comparison

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
GRAPHCC_HELDOUT = [
    "heldout-websearch60-incast16",
    "heldout-websearch60",
    "heldout-alistorage60-incast16",
    "heldout-alistorage60",
    "heldout-fbhadoop70-incast16",
    "heldout-fbhadoop80-incast16",
    "heldout-fbhadoop60-incast16-uplink-down",
    "heldout-fbhadoop60-incast16-2uplinks-down",
    "heldout-fbhadoop60-incast16-branch",
    "heldout-fbhadoop60-incast16-testbed32",
    "heldout-fbhadoop60-incast16-testbed40",
]


def test_the_judged_table_in_docs_is_what_eval_table_makes_of_the_committed_folders():
    judged = [summary.read(RESULTS / "graphcc" / name) for name in GRAPHCC_HELDOUT]
    header, rows = summary.table(judged)
    docs = (RESULTS / "README.md").read_text()
    assert summary.markdown(header, rows) in docs
    # and what the sections say: five GraphCC and five ACC seeds each, none beats the best
    verdicts = [v for j in judged for v in j.verdicts.values()]
    assert len(verdicts) == 10 * len(GRAPHCC_HELDOUT)
    assert not any(v.startswith("beats") for v in verdicts)


def test_a_folder_without_a_report_is_refused_by_name(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="not an `ecntune eval` output folder"):
        summary.read(tmp_path)
    (tmp_path / "report.md").write_text("# something else\n")
    with pytest.raises(ValueError, match="no 'Single best static over the mix' line"):
        summary.read(tmp_path)


def test_the_seeds_docs_deploy_are_what_pick_seed_chooses_on_the_training_mix(ecntune_cli):
    """docs/results "Which seed an operator would deploy": each arm's chosen ACC and PET seed
    is what `ecntune pick-seed` makes of the committed training-mix folder, by the worse of
    mice mean and p99; an arm the folder has no seeds of is refused by name."""
    folder = RESULTS / "star8-20ms-cubic-fresh-train-seeds"
    judged = summary.read(folder)
    docs = (RESULTS / "README.md").read_text()
    for arm in ("z9", "q9", "q9l"):
        row = re.search(rf"^\| `{arm}` \| [^|]+ \| (\S+) \| [^|]+ \| (\S+) \|$", docs, re.M)
        assert row, f"docs/results has no seed-choice row for {arm}"
        for algo, chosen in zip(("acc", "pet"), row.groups(), strict=True):
            best, worse = summary.pick_seed(judged, f"{algo}:{arm}")
            assert best == f"{algo}:{chosen}"
            assert sorted(worse) == [f"{algo}:{arm}{s}" for s in range(5)]
            assert worse[best] == max(judged.mice_rel[best], judged.p99_rel[best])
            assert worse[best] == min(worse.values())
    code, stdout, stderr = ecntune_cli("pick-seed", str(folder), "--arm", "pet:q9")
    assert code == 0, stderr
    assert "| pet:q9 |" in stdout
    assert stdout.rstrip().endswith("| pet:q93 |")
    code, _, stderr = ecntune_cli("pick-seed", str(folder), "--arm", "acc:x")
    assert code == 2
    assert "no agent named acc:x" in stderr


BLIND_MIXES = ["sixth", "seventh", "eighth", "ninth", "tenth", "eleventh", "twelfth", "thirteenth",
               "fourteenth", "fifteenth", "sixteenth", "seventeenth"]  # fmt: skip


def test_the_pooled_table_in_docs_is_what_eval_table_pools_from_every_blind_mix():
    """docs/results "Every blind mix at once": the deployed agents' pooled rows are what
    `eval-table --pool` makes of every committed 200-episode blind mix, none left out."""
    judged = [summary.read(RESULTS / f"star8-20ms-cubic-{n}-heldout") for n in BLIND_MIXES]
    pools = summary.pooled(judged, ["acc:g01l4", "pet:q9l4"])
    assert summary.pooled_markdown(pools) in (RESULTS / "README.md").read_text()
    assert {p.agent: p.mixes for p in pools} == {"acc:g01l4": 9, "pet:q9l4": len(BLIND_MIXES)}


def _mixes(*rel_lo_hi: tuple[float, float, float]) -> list[Comparison]:
    return [Comparison("mice_mean", 1.0, 1.0, *r) for r in rel_lo_hi]


def test_pooling_mixes_that_agree_gives_their_difference_and_no_spread_between_them():
    """Five mixes with the same -2 % [-3, -1]: the pool is -2 %, τ is zero, and the interval,
    holding five mixes' information, is narrower than one mix's but not zero wide."""
    p = summary.pool("acc:x", "mice_mean", _mixes(*[(-0.02, -0.03, -0.01)] * 5))
    assert p.rel == pytest.approx(-0.02, abs=1e-4)
    assert p.tau == 0.0
    assert -0.03 < p.lo < p.rel < p.hi < -0.01
    assert p.mixes == 5


def test_pooling_mixes_that_disagree_widens_the_interval_past_zero():
    """Two tight wins and two tight losses of 5 %: a fixed-effect pool would call the mean
    exactly known; the random-effects pool sees the spread (τ their log ratios' sample
    standard deviation, 5 % times sqrt(4/3), less their own tiny errors) and its interval
    spans zero, so a handful of lucky mixes cannot make a win."""
    tight = [(-0.05, -0.052, -0.048), (0.05, 0.048, 0.052)] * 2
    p = summary.pool("pet:x", "mice_mean", _mixes(*tight))
    assert p.tau == pytest.approx(0.05 * (4 / 3) ** 0.5, rel=0.05)
    assert p.lo < 0 < p.hi
    assert p.hi - p.lo > 0.05
    with pytest.raises(ValueError, match="needs two mixes or more"):
        summary.pool("pet:x", "mice_mean", _mixes((-0.05, -0.06, -0.04)))


def test_eval_table_pools_an_agent_and_draws_the_forest_or_says_what_is_missing(
    tmp_path, ecntune_cli
):
    """--pool over committed folders prints one pooled row per agent, writes the CSV and
    the plot; --forest without --pool, or an agent in fewer than two folders, is refused."""
    folders = [str(RESULTS / f"star8-20ms-cubic-{n}-heldout") for n in ("ninth", "eleventh")]
    forest = tmp_path / "forest.png"
    code, stdout, stderr = ecntune_cli("eval-table", *folders, "--pool", "acc:g01l4",
                                       "--pool-csv", str(tmp_path / "p.csv"),
                                       "--forest", str(forest))  # fmt: skip
    assert code == 0, stderr
    assert re.search(r"^\| acc:g01l4 \| 2 \| −[\d.]+ % \[", stdout, re.M)
    assert forest.stat().st_size > 10_000
    assert len((tmp_path / "p.csv").read_text().splitlines()) == 1 + len(summary.POOLED_METRICS)
    code, _, stderr = ecntune_cli("eval-table", *folders, "--forest", str(forest))
    assert code == 2
    assert "--forest draw what --pool AGENT pools" in stderr
    code, _, stderr = ecntune_cli("eval-table", *folders, "--pool", "pet:g01l0")
    assert code == 2
    assert "pet:g01l0: pooling needs two mixes or more, it ran on 1" in stderr


def test_the_pooled_interval_covers_the_true_difference_about_95_percent_of_the_time():
    """Seven simulated mixes whose true differences scatter by 1 % around −1.5 %, each
    measured with its own standard error: over 1 000 draws (a fixed seed) the pooled 95 %
    interval holds −1.5 % in 93–97.5 % of them (binomial sd 0.7 %), and with no scatter at
    all it errs on the wide side rather than the narrow one."""
    rng = np.random.default_rng(1)

    def coverage(tau: float) -> float:
        hits = 0
        for _ in range(1000):
            se = rng.uniform(0.003, 0.012, 7)
            y = -0.015 + rng.normal(0, tau, 7) + rng.normal(0, se)
            cis = zip(np.expm1(y), np.expm1(y - 1.96 * se), np.expm1(y + 1.96 * se), strict=True)
            p = summary.pool("acc:x", "mice_mean", _mixes(*cis))
            hits += p.lo <= np.expm1(-0.015) <= p.hi
        return hits / 1000

    assert 0.93 <= coverage(0.01) <= 0.975
    assert coverage(0.0) >= 0.95
