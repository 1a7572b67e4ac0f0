"""docs/results' table of GraphCC's unseen cases is what `ecntune eval-table` makes of the
committed folders (agent/summary.py): the table and the reports cannot drift apart."""

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
