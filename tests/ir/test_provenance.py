"""Provenance: nodes emitted inside a user-level ``dp.*`` function record it
(``meta["origin"]``), the record survives JSON, the textual IR and the passes, and a
`NumericalError` names the function (``dp.poisson_deviance``), not only the internal node."""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.api.autodiff import joint_graph
from dpt_ir.ir.graph import ORIGIN
from dpt_ir.ir.records import origin_of, phase_of


def _poisson() -> dp.Graph:
    g = dp.GraphBuilder("pd")
    mean = g.input("mean", (8,))
    counts = g.input("counts", (8,), requires_grad=False)
    g.output("loss", dp.poisson_deviance(dp.exp(mean) - 1.0, counts))
    return g.build()


def test_nodes_of_a_composite_record_it_and_plain_ops_do_not() -> None:
    graph = _poisson()
    origins = {n.name: n.meta.get(ORIGIN) for n in graph.nodes}
    assert origins["exp_0"] is None and origins["sub_2"] is None  # written by the user, outside any dp.* composite
    inside = [n for n in graph.nodes if n.name not in ("exp_0", "constant_1", "sub_2")]
    assert inside and all(n.meta[ORIGIN] == "dp.poisson_deviance" for n in inside)
    assert any(n.op == "log" for n in inside)


def test_the_outermost_function_wins() -> None:
    g = dp.GraphBuilder("blur")
    x = g.input("x", (6, 5))
    g.output("loss", dp.sum(dp.gaussian_filter(x, 1.0)))  # gaussian_filter calls correlate1d per axis
    graph = g.build()
    assert {n.meta.get(ORIGIN) for n in graph.nodes if n.op != "sum"} == {"dp.gaussian_filter"}


def test_origin_round_trips_through_json_and_text() -> None:
    graph = _poisson()
    assert dp.Graph.model_validate_json(graph.model_dump_json()) == graph
    again = dp.Graph.from_text(graph.to_text())
    assert again == graph and origin_of(again, "log_14") == "dp.poisson_deviance"


def test_backward_nodes_name_the_gradient_of_the_function() -> None:
    joint = joint_graph(_poisson(), ["mean"], ["loss"])
    backward = [n.name for n in joint.nodes if phase_of(n) == "backward"]
    described = {origin_of(joint, name) for name in backward}
    assert "the gradient of dp.poisson_deviance" in described
    assert "" in described  # the gradient of the user's own dp.exp has no function to name
    assert "dp.poisson_deviance" not in described


@pytest.fixture(scope="module")
def program() -> dp.Program:
    return dp.compile(_poisson(), wrt=["mean"], device="cpu")


def test_numerical_error_names_the_user_level_function(program: dp.Program) -> None:
    mean = np.zeros(8, np.float32)
    mean[3] = -1.0  # exp(-1) - 1 < 0: a negative Poisson mean, so the log sees a negative ratio
    counts = np.ones(8, np.float32)
    for call, where in ((program.run, "forward"), (program.value_and_grad, "value_and_grad")):
        with pytest.raises(dp.NumericalError) as info:
            call(mean=mean, counts=counts)
        assert str(info.value).startswith(
            f"{where} of 'pd': out-of-domain input at node 'log_14' (op log in dp.poisson_deviance, kernel "
        ), str(info.value)
