"""The data plane's number formats (p4src/encoding.py) and the committed artifacts' freshness."""

import math
import random

import pytest

from ecntune.p4src import PROGRAM
from ecntune.p4src import encoding as enc


def test_marking_probability_is_the_red_formula():
    regs = enc.encode_thresholds(20_000, 200_000, 0.4)
    for q in (0, 19_999, 20_000, 20_001, 110_000, 199_999):
        want = 0.0 if q <= 20_000 else 0.4 * (q - 20_000) / 180_000
        fixed_point_error = max(q - 20_000, 0) / enc.SLOPE_ONE  # the documented bound
        assert enc.marking_probability(q, regs) == pytest.approx(want, abs=fixed_point_error)
    assert enc.marking_probability(200_000, regs) == 1.0
    assert enc.marking_probability(10**9, regs) == 1.0


def test_edge_cases_need_no_division_in_the_data_plane():
    step = enc.encode_thresholds(5_000, 5_000, 0.3)  # kmin == kmax: a step at kmax
    assert step.slope == 0
    assert enc.marking_probability(4_999, step) == 0.0
    assert enc.marking_probability(5_000, step) == 1.0
    never_between = enc.encode_thresholds(0, 100, 0.0)
    assert enc.marking_probability(50, never_between) == 0.0
    assert enc.marking_probability(100, never_between) == 1.0
    full = enc.encode_thresholds(0, 1, 1.0)  # the steepest slope fits the 64-bit register
    assert full.slope == enc.SLOPE_ONE
    assert full.slope < 2**64
    assert enc.encode_thresholds(0, 0, 0.5).kmax == 1  # kmax 0 would mean "disabled"


@pytest.mark.parametrize(
    ("kmin", "kmax", "pmax", "match"),
    [(10, 5, 0.1, "kmin <= kmax"), (0, 2**33, 0.1, "4 GiB"), (0, 10, 1.5, "pmax"),
     (0, math.nan, 0.1, "finite"), (-1, 10, 0.1, "kmin <= kmax")],
)  # fmt: skip
def test_nonsense_settings_are_refused(kmin, kmax, pmax, match):
    with pytest.raises(ValueError, match=match):
        enc.encode_thresholds(kmin, kmax, pmax)


def test_control_packets_round_trip_and_refuse_bad_input():
    regs = enc.encode_thresholds(1_000, 9_000, 0.05)
    payload = enc.ecn_config_payload(7, regs)
    assert enc.parse_ecn_config(payload) == (7, regs)
    assert len(payload) == 20
    with pytest.raises(ValueError, match="port"):
        enc.ecn_config_payload(256, regs)
    with pytest.raises(ValueError, match="interval"):
        enc.interval_payload(0)
    with pytest.raises(ValueError, match="needs"):
        enc.parse_ecn_config(payload[:10])
    _, interval = enc.parse_ecn_config(enc.interval_payload(0.01))
    assert interval.kmin == 10_000


def test_digest_decodes_into_port_telemetry():
    fields = dict.fromkeys(enc.DIGEST_FIELDS, 0)
    fields.update(port=3, interval_us=10_000, tx_bytes=12_500, kmin=5_000, kmax=200_000,
                  pmax=100, sender_bitmap=0b1011, elephant_bytes=4_000)  # fmt: skip
    port, t = enc.decode_digest(fields, link_bps=10e6)
    assert port == 3
    assert t.interval_s == pytest.approx(0.01)
    assert t.pmax == pytest.approx(0.01)
    assert t.link_bps == 10e6
    assert 2.9 < t.senders < 3.2
    with pytest.raises(ValueError, match="lacks"):
        enc.decode_digest({"port": 1}, 1e9)


@pytest.mark.parametrize("n", [1, 4, 16, 40])
def test_linear_counting_error_is_what_the_docstring_says(n):
    rng = random.Random(n)
    errors = []
    for _ in range(2000):
        bitmap = 0
        for _ in range(n):
            bitmap |= 1 << rng.randrange(64)
        errors.append(enc.senders_from_bitmap(bitmap) - n)
    mean = sum(errors) / len(errors)
    rel_std = math.sqrt(sum(e * e for e in errors) / len(errors)) / n
    t = n / 64
    predicted = math.sqrt(64 * (math.exp(t) - t - 1)) / n
    assert abs(mean) < 0.1 * n + 0.2
    assert rel_std < 1.5 * predicted + 0.05


def test_committed_artifacts_match_their_sources():
    assert PROGRAM.json_path.exists(), "p4src/build/ecn.json is missing: run `make p4`"
    assert PROGRAM.stale() == []
    manifest = PROGRAM.manifest()
    assert manifest["p4c_version"]
    assert set(manifest["sha256"]) >= {"ecn.p4", "headers.p4", "ecn.json", "ecn.p4info.txtpb"}


@pytest.mark.p4c
def test_recompiling_reproduces_the_committed_artifacts(tmp_path):
    from ecntune.p4src.compile import compile_into

    compile_into(PROGRAM, tmp_path)
    for artifact in PROGRAM.artifacts():
        assert (tmp_path / artifact.name).read_bytes() == artifact.read_bytes(), artifact.name


def test_the_telemetry_contract_matches_the_p4_program():
    """ecntune/telemetry.py's digest constants are the ones the P4 source counts with."""
    import re

    from ecntune.agent import features
    from ecntune.telemetry import ELEPHANT_BYTES, SENDER_BITS

    headers = (PROGRAM.json_path.parents[1] / "headers.p4").read_text()
    const = PROGRAM.constants()
    assert const["ELEPHANT_BYTES"] == ELEPHANT_BYTES
    assert int(re.search(r"bit<(\d+)> sender_bitmap;", headers)[1]) == SENDER_BITS
    # the in-switch policy's key arithmetic (agent/features.py switch_keys)
    assert const["QLEN_KEY_AT_ALPHA"] == features.QLEN_KEY_AT_ALPHA
    assert const["FULL_KEY"] == features.FULL_KEY
    assert const["LOG2_PMAX_ONE"] == int(features.log2_16(features.PMAX_BP_ONE))
