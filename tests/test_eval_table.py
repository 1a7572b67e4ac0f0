"""docs/results' table of GraphCC's unseen cases is what `ecntune eval-table` makes of the
committed folders, and its deployed seeds what `ecntune pick-seed` chooses (agent/summary.py):
the tables and the reports cannot drift apart."""

import re
from pathlib import Path

import pytest

from ecntune.agent import summary

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
