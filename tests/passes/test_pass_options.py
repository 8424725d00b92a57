"""Per-pass options are validated (`PassSpec`): a misspelt or ill-typed one raises
ContractError naming the pass and the option and listing the valid ones; a misspelt
`dp.compile` keyword stays Python's TypeError."""

from __future__ import annotations

from typing import Any

import pytest

import dpt_ir as dp
from dpt_ir.ir.kernel_ir import plan_of
from dpt_ir.passes.manager import DEFAULT_PIPELINE, PassSpec, run_pipeline
from dpt_ir.passes.options import CompileOptions

from .graphs import CASES

VALID = (
    r"valid options are \['checks', 'denormals', 'expand', 'factor', 'fuse', 'halo_budget', 'loss', "
    r"'max_inline_consumers', 'product_epilogues', "
    r"'reciprocal', 'recompute'"
)


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"fusee": False}, r"pass 'fusion': unknown option\(s\) \['fusee'\]"),
        ({"fuse": "yes"}, r"pass 'fusion': option 'fuse': Input should be a valid boolean \(found 'yes'\)"),
        ({"max_inline_consumers": 2.5}, r"option 'max_inline_consumers': Input should be a valid integer"),
        ({"halo_budget": "8"}, r"option 'halo_budget': Input should be a valid integer"),
        ({"seed_values": {"loss": "one"}}, r"option 'seed_values.loss': Input should be a valid number"),
    ],
)
def test_bad_pass_option_is_a_contract_error(options: dict[str, Any], fragment: str) -> None:
    with pytest.raises(dp.ContractError, match=fragment) as info:
        PassSpec(name="fusion", options=options)
    assert "valid options are" in str(info.value)
    assert not isinstance(info.value, ValueError)


def test_bad_pass_option_in_a_pipeline_is_refused_before_any_pass_runs() -> None:
    case = CASES["beer"]
    with pytest.raises(dp.ContractError, match=VALID):
        run_pipeline(case.graph, CompileOptions(wrt=case.wrt), pipeline=[PassSpec(name="cse", options={"fus": 1})])


def test_misspelt_pass_spec_field_is_a_contract_error() -> None:
    with pytest.raises(dp.ContractError, match=r"invalid PassSpec: optons: Extra inputs are not permitted"):
        PassSpec(name="fusion", optons={"fuse": False})  # type: ignore[call-arg]


def test_valid_pass_options_are_kept_and_apply() -> None:
    spec = PassSpec(name="fusion", options={"fuse": False, "halo_budget": 3})
    assert spec.options == {"fuse": False, "halo_budget": 3}
    case = CASES["beer"]
    pipeline = [spec if p == "fusion" else p for p in DEFAULT_PIPELINE]
    graph = run_pipeline(case.graph, CompileOptions(wrt=case.wrt), pipeline=pipeline).graph
    assert len(plan_of(graph).groups) == sum(n.op != "constant" for n in graph.nodes)


def test_misspelt_compile_keyword_stays_a_type_error() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'fusee'"):
        dp.compile(CASES["beer"].graph, fusee=False)  # type: ignore[call-arg]
