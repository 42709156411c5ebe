"""Cost-model schema and validation."""

import pytest

from simcoll import load_model
from simcoll.cost_model import model_from_dict
from simcoll.errors import ModelError


def _model(**links):
    return {"name": "m", "links": links or {"nvlink": {"alpha_s": 1e-6, "bandwidth_Bps": 25e9, "source": "x"}}}


def test_beta_and_bandwidth_are_two_spellings_of_one_parameter():
    a = model_from_dict(_model(nvlink={"alpha_s": 0, "beta_s_per_byte": 4e-11, "source": "s"}))
    assert a.link("nvlink").bandwidth_Bps == pytest.approx(25e9)


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"alpha_s": 1e-6, "bandwidth_Bps": 25e9}, "source"),
        ({"alpha_s": 1e-6, "source": "s"}, "exactly one of"),
        ({"alpha_s": -1, "bandwidth_Bps": 25e9, "source": "s"}, "non-negative"),
        ({"alpha_s": 0, "bandwidth_Bps": "fast", "source": "s"}, "must be a number"),
        ({"alpha_s": 0, "bandwidth_Bps": 1, "beta_s_per_byte": 1, "source": "s"}, "exactly one of"),
        ({"alpha_s": 0, "bandwidth_Bps": 1, "colour": 1, "source": "s"}, "unknown field 'colour'"),
    ],
)
def test_bad_link_parameters_are_named(entry, message):
    with pytest.raises(ModelError, match=message):
        model_from_dict(_model(nvlink=entry), where="m.yaml")


def test_switch_concurrency_efficiency_interpolates():
    data = _model()
    data["switches"] = {"nvswitch": {"latency_s": 0, "concurrency_efficiency": [[1, 1.0], [5, 0.6]], "source": "s"}}
    sw = model_from_dict(data).switches["nvswitch"]
    assert sw.efficiency(1) == 1.0 and sw.efficiency(3) == pytest.approx(0.8) and sw.efficiency(9) == 0.6


def test_reduce_time_is_launch_plus_bytes_over_rate():
    data = _model()
    data["compute"] = {"reduce_bandwidth_Bps": 1e9, "reduce_launch_s": 2e-6, "source": "s"}
    assert model_from_dict(data).reduce_time_s(1000) == pytest.approx(3e-6)


def test_what_if_changes_one_link_type():
    base = load_model("dgx1")
    faster = base.with_link("nvlink", bandwidth_Bps=50e9)
    assert faster.link("nvlink").bandwidth_Bps == 50e9 and base.link("nvlink").bandwidth_Bps == 25e9


def test_unknown_model_lists_the_builtins():
    with pytest.raises(ModelError, match="built-ins: .*dgx1"):
        load_model("nope")


def test_the_nccl_environment_reads_nccls_own_spellings_and_saves_back(tmp_path):
    """A model's ``nccl`` section takes NCCL_ALGO / NCCL_PROTO names as NCCL
    prints them (any case) and keeps them in the tuner's spelling."""
    from simcoll.cost_model import load_model_file, save_model

    data = {**_model(), "nccl": {"algorithms": ["Ring", "NVLSTree"], "protocols": ["Simple", "LL128"], "source": "s"}}
    model = model_from_dict(data)
    assert model.nccl.algorithms == ("ring", "nvls_tree") and model.nccl.protocols == ("simple", "ll128")
    save_model(model, tmp_path / "m.yaml")
    assert load_model_file(tmp_path / "m.yaml") == model


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"algorithms": ["Ring"]}, "source"),
        ({"algorithms": ["Butterfly"], "source": "s"}, "unknown name 'Butterfly'"),
        ({"protocols": "Simple", "source": "s"}, "non-empty list"),
        ({"protocols": [], "source": "s"}, "non-empty list"),
        ({"channels": 16, "source": "s"}, "unknown field 'channels'"),
    ],
)
def test_bad_nccl_environments_are_named(entry, message):
    with pytest.raises(ModelError, match=f"m.yaml: nccl.*{message}"):
        model_from_dict({**_model(), "nccl": entry}, where="m.yaml")
