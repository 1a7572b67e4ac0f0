"""Flow-size CDFs: parsing, sampling matches the CDF, load -> arrival rate."""

import numpy as np
import pytest

from ecntune.traffic.workload import WORKLOADS, FlowSizeCDF, arrival_rate, load_cdf


@pytest.mark.parametrize("name", WORKLOADS)
def test_shipped_cdfs_sample_their_own_distribution(name):
    cdf = load_cdf(name)
    sizes = cdf.sample(np.random.default_rng(0), 200_000)
    # empirical CDF at each breakpoint within 1 percentage point of the file
    for s, p in zip(cdf.sizes[1:-1], cdf.probs[1:-1], strict=True):
        assert abs(np.mean(sizes <= s) - p) < 0.01
    assert abs(sizes.mean() / cdf.mean_bytes - 1) < 0.05


def test_websearch_mean_matches_published_value():
    # WebSearch's mean flow is about 1.6 MB (DCTCP paper / HPCC traffic_gen)
    assert 1.5e6 < load_cdf("websearch").mean_bytes < 1.8e6


def test_arrival_rate_fills_the_requested_load():
    cdf = load_cdf("fb_hadoop")
    rate = arrival_rate(cdf, 0.6, 10e9)
    assert rate * cdf.mean_bytes * 8 == pytest.approx(0.6 * 10e9)
    with pytest.raises(ValueError, match="load"):
        arrival_rate(cdf, 1.5, 10e9)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("1 0\n", "two points"),
        ("1 0\n2 50\n", "100%"),
        ("5 0\n1 100\n", "non-decreasing"),
        ("a b\n1 100\n", "expected"),
    ],
)
def test_malformed_cdf_is_refused(text, match):
    with pytest.raises(ValueError, match=match):
        FlowSizeCDF.parse("bad", text)
