"""Who does what in a scenario: defaults and rejected names, before anything starts."""

import pytest

from ecntune.fabric.scenario import Scenario, resolve

HOSTS = ["h1", "h2", "h3", "h4"]


def test_defaults_are_all_to_all_with_the_last_host_as_receiver():
    roles = resolve(Scenario(incast_degree=2), HOSTS)
    assert roles.receiver == "h4"
    assert roles.workload == {h: [d for d in HOSTS if d != h] for h in HOSTS}
    assert roles.incast_senders == ["h1", "h2"]
    assert roles.probe_src is None


def test_explicit_roles_keep_the_prober_out_of_the_incast():
    sc = Scenario(workload_hosts=("h1",), workload_dsts=("h1", "h4"), receiver="h2",
                  incast_degree=2, probe_src="h1")  # fmt: skip
    roles = resolve(sc, HOSTS)
    assert roles.workload == {"h1": ["h4"]}
    assert roles.incast_senders == ["h3", "h4"]
    assert resolve(Scenario(workload_hosts=()), HOSTS).workload == {}


@pytest.mark.parametrize(
    ("scenario", "match"),
    [
        (Scenario(receiver="h9"), "no hosts"),
        (Scenario(probe_src="x"), "no hosts"),
        (Scenario(incast_degree=4), "needs as many"),
    ],
)
def test_impossible_roles_are_refused(scenario, match):
    with pytest.raises(ValueError, match=match):
        resolve(scenario, HOSTS)


def test_invalid_scenarios_are_refused():
    with pytest.raises(ValueError, match="unknown workload"):
        Scenario(workload="nope")
    with pytest.raises(ValueError, match="load"):
        Scenario(load=0)
    for late in (-1.0, 20.0):
        with pytest.raises(ValueError, match="incast_from_s"):
            Scenario(duration_s=20.0, incast_from_s=late)
