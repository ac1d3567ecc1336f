"""The cost model of ``roofprof trace``: FLOPs equal FlopCounterMode's for matmul and
convolution, attention follows the causal mask and GQA, bytes know views, in-place ops,
broadcasts, gathers and casts, and users can register their own op's cost."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from roofprof.tracing import Cost, OpCall, TensorMeta, cost_of, register_cost  # noqa: E402
from roofprof.tracing.costs import causal_pairs  # noqa: E402


def traced(fn, **kw):
    import roofprof

    with torch.no_grad(), roofprof.trace(device="cpu", roofline="none", replay=False, **kw) as t:
        fn()
    return t.result


def by_op(result, name):
    return [r for r in result.ops if r.op == f"aten::{name}"]


def flopcounter(fn):
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as f:
        fn()
    return f.get_total_flops()


def _bind(f, *inputs):
    return lambda: f(*inputs)


CASES = {
    "mm": lambda: _bind(torch.mm, torch.randn(32, 48), torch.randn(48, 16)),
    "bmm": lambda: _bind(torch.bmm, torch.randn(4, 8, 16), torch.randn(4, 16, 8)),
    "linear3d": lambda: _bind(torch.nn.Linear(24, 40), torch.randn(3, 5, 24)),
    "conv2d": lambda: _bind(torch.nn.Conv2d(3, 8, 3, padding=1), torch.randn(2, 3, 16, 16)),
    "conv2d-grouped": lambda: _bind(
        torch.nn.Conv2d(8, 8, 3, stride=2, groups=4), torch.randn(1, 8, 9, 9)
    ),
    "convT": lambda: _bind(torch.nn.ConvTranspose2d(4, 6, 3), torch.randn(1, 4, 5, 5)),
    "conv1d": lambda: _bind(torch.nn.Conv1d(4, 6, 5), torch.randn(2, 4, 30)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_matmul_and_conv_flops_equal_flopcounter(case):
    fn = CASES[case]()
    r = traced(fn)
    ours = sum((o.flops or 0) * o.count for o in r.ops if o.kind in ("matmul", "conv"))
    assert ours == flopcounter(fn) > 0


def test_causal_pairs_top_left():
    assert causal_pairs(5, 5) == 15 and causal_pairs(1, 7) == 1 and causal_pairs(3, 1) == 3


@pytest.mark.parametrize("causal", [False, True])
def test_cpu_sdpa_counts_causal_and_gqa(causal):
    b, hq, hkv, s, d = 2, 8, 2, 32, 16
    q, k, v = torch.randn(b, hq, s, d), torch.randn(b, hkv, s, d), torch.randn(b, hkv, s, d)
    r = traced(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True))
    rows = [o for o in r.ops if o.kind == "attention"]
    pairs = s * (s + 1) // 2 if causal else s * s
    assert sum(o.flops * o.count for o in rows) == 4 * b * hq * pairs * d
    assert (
        flopcounter(
            lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        )
        == 0
    )  # torch's gap


def test_sdpa_bytes_are_qkvo_not_scores():
    q, k, v = (TensorMeta((1, 4, 128, 32), "fp32", storage=i) for i in range(3))
    c = cost_of(
        OpCall(
            "aten::_scaled_dot_product_flash_attention_for_cpu",
            (q, k, v, 0.0, True),
            outputs=(TensorMeta((1, 4, 128, 32), "fp32"),),
        )
    )
    assert c.bytes == 4 * 4 * 128 * 32 * 4 and c.kind == "attention" and "causal" in c.note


def test_views_inplace_broadcast_gather_cast_bytes():
    x = torch.randn(64, 256)
    r = traced(lambda: x.t())
    assert by_op(r, "t")[0].bytes == 0
    r = traced(lambda: x.add_(1.0))
    assert by_op(r, "add_")[0].bytes == 2 * x.numel() * 4  # the slice read and written
    row = x[:, :1].expand(64, 256)
    r = traced(lambda: row + x)
    add = by_op(r, "add")[0]
    assert add.bytes == (64 * 4) + 2 * x.numel() * 4  # the broadcast operand once per row
    r = traced(lambda: x + x)
    assert by_op(r, "add")[0].bytes == 2 * x.numel() * 4  # aliased inputs once
    table = torch.nn.Embedding(10000, 64)
    idx = torch.tensor([[1, 2, 2, 3]])
    r = traced(lambda: table(idx))
    emb = by_op(r, "embedding")[0]
    assert emb.bytes == 3 * 64 * 4 + idx.numel() * 8 + 4 * 64 * 4  # rows touched, never the table
    r = traced(lambda: x.to(torch.bfloat16))
    cast = by_op(r, "_to_copy")[0]
    assert cast.bytes == x.numel() * (4 + 2) and cast.flops == 0


def test_norms_softmax_elementwise_reductions_have_stated_costs():
    x = torch.randn(16, 128)
    ln = torch.nn.LayerNorm(128)
    r = traced(lambda: (ln(x).softmax(-1).sum(), F.gelu(x)))
    kinds = {o.op.split("::")[1]: o for o in r.ops}
    assert kinds["native_layer_norm"].flops == 7 * x.numel()
    assert kinds["_softmax"].flops == 5 * x.numel()
    assert kinds["gelu"].flops == 8 * x.numel() and kinds["gelu"].kind == "elementwise"
    assert kinds["sum"].flops == x.numel() and kinds["sum"].kind == "reduction"
    assert all(o.flops is not None for o in r.ops)


def test_register_cost_for_a_custom_op():
    @torch.library.custom_op("roofprof_test::scale2", mutates_args=())
    def scale2(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @scale2.register_fake
    def _(x):
        return torch.empty_like(x)

    @register_cost("roofprof_test::scale2")
    def _cost(call: OpCall) -> Cost:
        x = call.tensors[0]
        return Cost(flops=x.numel, read_bytes=x.nbytes, write_bytes=x.nbytes, kind="custom")

    x = torch.randn(100)
    r = traced(lambda: scale2(x))
    row = next(o for o in r.ops if o.op == "roofprof_test::scale2")
    assert row.flops == 100 and row.bytes == 800 and row.kind == "custom"


def test_unknown_op_is_time_only_never_dropped():
    assert cost_of(OpCall("mylib::mystery", (TensorMeta((3,)),))) is None
    x = torch.randn(4, 4)
    r = traced(lambda: torch.linalg.qr(x))
    assert any(o.flops is None and "no-cost" in o.flags for o in r.ops)


def test_training_step_flops_equal_flopcounter_and_full_coverage():
    import roofprof

    m = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 14 * 14, 32),
        torch.nn.LayerNorm(32),
    )
    emb = torch.nn.Embedding(100, 16)
    x, idx = torch.randn(4, 3, 16, 16), torch.tensor([1, 2, 3])

    def step():
        (m(x).softmax(-1).sum() + emb(idx).sum()).backward()

    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as f:
        step()
    with roofprof.trace(device="cpu", roofline="none", replay=False) as t:
        step()
    r = t.result
    assert (
        sum(o.flops * o.count for o in r.ops if o.kind in ("matmul", "conv")) == f.get_total_flops()
    )
    assert all(o.flops is not None for o in r.ops)  # every forward and backward op costed
    assert any(m.phase == "backward" for m in r.modules)


# --------------------------------------------------------------------------- grad modes

GRAD_MODES = {
    "grad": lambda: torch.enable_grad(),
    "no_grad": lambda: torch.no_grad(),
    "inference_mode": lambda: torch.inference_mode(),
}
COMPOSITES = {  # what inference mode records undecomposed (aten::linear, aten::matmul, ...)
    "linear": lambda: _bind(torch.nn.Linear(24, 40), torch.randn(6, 24)),
    "linear3d": lambda: _bind(torch.nn.Linear(24, 40, bias=False), torch.randn(3, 5, 24)),
    "matmul-2d": lambda: _bind(torch.matmul, torch.randn(7, 12), torch.randn(12, 9)),
    "matmul-batched": lambda: _bind(torch.matmul, torch.randn(2, 3, 7, 12), torch.randn(12, 9)),
    "matmul-broadcast": lambda: _bind(
        torch.matmul, torch.randn(4, 1, 7, 12), torch.randn(3, 12, 5)
    ),
    "matmul-vector": lambda: _bind(torch.matmul, torch.randn(7, 12), torch.randn(12)),
}


def traced_in(mode, fn):
    import roofprof

    with GRAD_MODES[mode](), roofprof.trace(device="cpu", roofline="none", replay=False) as t:
        fn()
    return t.result


@pytest.mark.parametrize("mode", sorted(GRAD_MODES))
@pytest.mark.parametrize("case", sorted(COMPOSITES))
def test_composite_matmuls_get_their_flops_in_every_grad_mode(case, mode):
    fn = COMPOSITES[case]()
    r = traced_in(mode, fn)
    matmuls = [o for o in r.ops if o.kind == "matmul"]
    assert matmuls and all(o.flops for o in matmuls)
    assert not [o.op for o in r.ops if o.kind == "unknown"]
    # FlopCounterMode counts no aten::mv: the vector case is checked against 2·m·k
    expected = 2 * 7 * 12 if case == "matmul-vector" else flopcounter(fn)
    assert sum(o.flops * o.count for o in matmuls) == expected > 0


@pytest.mark.parametrize("mode", sorted(GRAD_MODES))
def test_embedding_bag_is_a_costed_gather_in_every_grad_mode(mode):
    weight, idx = torch.randn(50, 16), torch.tensor([[1, 2, 3], [4, 5, 6]])
    r = traced_in(mode, lambda: F.embedding_bag(idx, weight, mode="sum"))
    (bag,) = [o for o in r.ops if "embedding_bag" in o.op]
    assert bag.kind == "gather" and bag.flops == 6 * 16  # one add per looked-up element
    assert bag.bytes >= 6 * 16 * 4  # the six rows read
