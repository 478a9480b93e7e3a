"""``Op`` is a plain slotted class (built by the thousand on every hot path); it keeps the checks its pydantic
form made: a known kind, amounts that are numbers >= 0 (stored as floats), whole GEMM rows and kernels."""

from __future__ import annotations

import math

import pytest

from planner.model.ops import OP_KINDS, Op


def test_amounts_are_floats_and_defaults_match_the_old_model():
    op = Op(name="x", kind="gemm", flops=2, weight_bytes=3, gemm_m_tokens=32.0)
    assert (op.flops, op.weight_bytes, op.activation_bytes, op.kv_bytes, op.comm_bytes) == (2.0, 3.0, 0.0, 0.0, 0.0)
    assert all(isinstance(v, float) for v in (op.flops, op.weight_bytes, op.activation_bytes))
    assert op.gemm_m_tokens == 32 and isinstance(op.gemm_m_tokens, int)
    assert (op.compute_dtype, op.kernels, op.bytes) == ("bf16", 1, 3.0)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kind": "matmul"}, "kind must be one of"),
        ({"flops": -1.0}, "flops must be a number >= 0"),
        ({"kv_bytes": -5}, "kv_bytes must be a number >= 0"),
        ({"comm_bytes": math.nan}, "comm_bytes must be a number >= 0"),
        ({"gemm_m_tokens": 2.5}, "gemm_m_tokens must be a whole number"),
        ({"kernels": -1}, "kernels must be >= 0"),
    ],
)
def test_bad_fields_are_refused_by_name(fields, message):
    with pytest.raises(ValueError, match=message) as err:
        Op(**{"name": "attn.q_proj", "kind": "gemm", "flops": 1.0, **fields})
    assert "attn.q_proj" in str(err.value)


def test_replace_checks_the_copy_and_leaves_the_original():
    op = Op(name="mlp.up", kind="gemm", flops=1.0, kernels=2)
    copy = op.replace(name="shared_mlp.up")
    assert (copy.name, copy.kernels, op.name) == ("shared_mlp.up", 2, "mlp.up")
    with pytest.raises(ValueError, match="flops"):
        op.replace(flops=-1.0)


def test_every_kind_is_accepted():
    for kind in OP_KINDS:
        assert Op(name="k", kind=kind, flops=0.0).kind == kind


def test_a_pydantic_field_takes_an_op_or_its_record_and_dumps_the_record():
    from planner.bench.report import OpCount

    row = OpCount(op=Op(name="mlp.up", kind="gemm", flops=4.0, gemm_m_tokens=8), count=2)
    dumped = row.model_dump()
    assert dumped["op"] == {
        "name": "mlp.up",
        "kind": "gemm",
        "flops": 4.0,
        "weight_bytes": 0.0,
        "activation_bytes": 0.0,
        "kv_bytes": 0.0,
        "comm_bytes": 0.0,
        "gemm_m_tokens": 8,
        "compute_dtype": "bf16",
        "kernels": 1,
    }
    for back in (OpCount.model_validate(dumped), OpCount.model_validate_json(row.model_dump_json())):
        assert isinstance(back.op, Op) and back.op.fields() == row.op.fields()
    with pytest.raises(ValueError, match="kind"):
        OpCount.model_validate({"op": {"name": "x", "kind": "matmul", "flops": 1.0}, "count": 1})
