"""FLOPs against hand-computed values and SC21 eq. 3; step assembly; ZeRO §7 traffic; TP volume and overlap."""

import numpy as np
import pytest

from common.collective_cost import Network
from planner.model.cluster import Cluster
from planner.model.compute import Kernels
from planner.model.costs import ACT_BYTES, dp_collectives, step_costs
from planner.model.degrees import FULL, Degrees
from planner.model.shapes import (Shape, hardware_flops_per_token, layer_forward_flops_per_token, model_flops_per_token,
                                  sc21_flops_per_iteration)


def toy_cluster(**net) -> Cluster:
    links = Network(**{**dict(domain=8, intra_GBps=100.0, nic_GBps=10.0, alpha_step_us=1.0, alpha_level_us=10.0),
                       **net})
    return Cluster(gpu="toy", label="toy", gpus=64, precision="bf16", peak_tflops=100.0, matmul_tflops=80.0,
                   bf16_matmul_tflops=80.0, memory_gb=80.0, hbm_gbps=1000.0, net=links, bf16_peak_tflops=100.0)


GPU_ONLY = Kernels(host="graphs")  # the GPU's assembly alone: a replayed graph costs the host nothing (test_host.py)


def test_flops_by_hand():
    # L=2, h=4, 2 heads of 2 (2 kv heads), f=16, V=8, s=4. One block's weights:
    # (q, k, v, o are 4x4 each = 64; MLP 2·4·16 = 128 -> 192; + 2 norms of 4 -> 200 per block)
    sh = Shape(layers=2, hidden=4, heads=2, kv_heads=2, vocab=8, seq=4, ffn=16)
    assert sh.layer_matmul_params == 192 and sh.layer_params == 200
    # N' = 2 blocks + final norm + head = 400 + 4 + 32 = 436; 6N' + 12·L·h·s = 2616 + 384.
    assert model_flops_per_token(sh) == 3000
    assert layer_forward_flops_per_token(sh) == 2 * 192 + 4 * 4 * 4  # 448: weights + QK^T and AV
    assert hardware_flops_per_token(sh, "full") == 3000 + 2 * 448
    assert hardware_flops_per_token(sh, "selective") == 3000 + 2 * 64
    assert hardware_flops_per_token(sh, "none") == 3000
    gqa = Shape(layers=2, hidden=4, heads=2, kv_heads=1, vocab=8, seq=4, ffn=16)
    assert gqa.layer_matmul_params == 192 - 2 * 4 * 2  # k and v shrink to one head of 2


@pytest.mark.parametrize("L, h, a, s, V, B", [(24, 2304, 24, 2048, 51200, 512), (128, 25600, 160, 2048, 51200, 3072)])
def test_sc21_equation_3(L, h, a, s, V, B):
    # Megatron SC21 eq. 3 counts full recompute; ours is the same but also counts the LayerNorm gains
    # (2h per block + h final, 6 FLOPs each per token) that eq. 3 leaves out.
    sh = Shape(L, h, a, a, V, s, 4 * h)
    ours = hardware_flops_per_token(sh, "full") * B * s
    assert ours - sc21_flops_per_iteration(B, s, L, h, V) == pytest.approx(6 * (2 * h * L + h) * B * s, rel=1e-6)
    assert sc21_flops_per_iteration(1, 1, 1, 1, 0) == 96 * (1 + 1 / 6)  # the formula itself, by hand


def test_step_assembly():
    # step = m x slowest stage + (sum of the other stages) / v + exposed DP + optimizer (stages.py); with no DP
    # (d = 1) the only per-step terms are the pipeline and the optimizer.
    sh = Shape(16, 1024, 8, 8, 1000, 1024, 4096)
    cl = toy_cluster()
    p, v, m = np.array([1, 2, 4, 4, 8]), np.array([1, 1, 1, 2, 4]), np.array([8, 8, 16, 16, 32])
    out = step_costs(sh, cl, Degrees.of(p=p, v=v, m=m), kernels=GPU_ONLY)  # d = 1: no DP traffic at all
    assert out.dp_comm_s.max() == 0 and out.pp_comm_s[0] == 0 and out.pp_comm_s[1] > 0
    busy = out.step_s - out.bubble_s - out.optimizer_s
    np.testing.assert_allclose(out.bubble_s / (busy + out.bubble_s), out.bubble_fraction)
    assert out.bubble_s[0] == 0
    # Stages carry the embedding and the LM head, so the bubble is close to, not exactly, (p-1)/(v·m) of the ideal
    # (SC21 §2.2): (p-1)/(v·m + p - 1) of the pipeline's time.
    np.testing.assert_allclose(out.bubble_fraction[1:], ((p - 1) / (v * m + p - 1))[1:], rtol=0.15)
    assert list(out.split.first) == [16, 8, 4, 4, 2] and list(out.split.last) == [16, 8, 4, 4, 2]


def test_dp_collectives_are_the_shared_models_by_hand():
    # The ring/tree model itself is tested in common/tests/test_collective_cost.py; here its use for ZeRO §7's
    # traffic: all-reduce of g·Ψ, reduce-scatter of g·Ψ, all-gather of the 2-byte weights, latency per bucket.
    cl, psi = toy_cluster(), 100e6  # 3 buckets of 40M: two more latencies than one collective
    ar, rs, ag = (float(x) for x in dp_collectives(psi, 16, 8, 4.0, cl.net))
    assert ar == pytest.approx(2 * 15 / 16 * 4 * psi / 80e9 + 3 * (14e-6 + 2 * 10e-6))
    assert rs == pytest.approx(15 / 16 * 4 * psi / 80e9 + 3 * (7e-6 + 10e-6))
    assert ag == pytest.approx(15 / 16 * 2 * psi / 80e9 + 3 * (7e-6 + 10e-6))
    assert [float(x) for x in dp_collectives(psi, 1, 1, 4.0, cl.net)] == [0.0, 0.0, 0.0]  # no DP, no traffic


def test_tp_volume_is_sc21s():
    # Zero latency: TP time per step = L·m·4 all-reduces of b·s·h bf16,
    # i.e. 8·b·s·h·(t-1)/t elements per layer per micro-batch over the bus (SC21 §3.2).
    sh = Shape(4, 1024, 8, 8, 1000, 512, 4096)
    cl = toy_cluster(alpha_step_us=0.0, alpha_level_us=0.0)
    b, t, m = 2, 4, 3
    plain = Kernels(sequence_parallel=False, host="graphs")  # the GPU's assembly alone (test_host: the host's)
    out = step_costs(sh, cl, Degrees.of(t=t, b=b, m=m), kernels=plain)
    want = sh.layers * m * 8 * b * sh.seq * sh.hidden * (t - 1) / t * ACT_BYTES / 100e9
    assert float(out.tp_comm_s) == pytest.approx(want)
    full = step_costs(sh, cl, Degrees.of(t=t, b=b, m=m, recompute=FULL), kernels=plain)  # the 2 forward ones again
    assert float(full.tp_comm_s) == pytest.approx(want * 6 / 4)
    # Overlap: the backward half hides behind the weight-gradient GEMMs, or nothing hides (SC21-era Megatron).
    hidden = float(out.tp_hidden_s)
    assert 0 < hidden <= want / 2 + 1e-12
    exposed = step_costs(sh, cl, Degrees.of(t=t, b=b, m=m), kernels=plain, tp_overlap=False)
    assert float(exposed.tp_hidden_s) == 0
    assert float(exposed.step_s) == pytest.approx(float(out.step_s) + hidden)


def test_megatrons_sequence_parallelism_gathers_its_column_parallel_inputs_again_in_the_backward():
    # Korthikanti §4.2.2 / Megatron's LinearWithGradAccumulationAndAsyncCommunication: SP keeps 1/t of the q/k/v and
    # MLP-up inputs and all-gathers each again for its weight gradient: 2 all-gathers of b·s·h, one all-reduce's
    # volume, on top of the 4 all-reduce-equivalents (each an all-gather + a reduce-scatter): 5/4 of SC21's volume.
    # It overlaps the activation-gradient GEMM; DTensor's SP (tp_layout_copies) saves the gathered input instead.
    sh = Shape(4, 1024, 8, 8, 1000, 512, 4096)
    cl = toy_cluster(alpha_step_us=0.0, alpha_level_us=0.0)
    b, t, m = 2, 4, 3
    deg = Degrees.of(t=t, b=b, m=m)
    want = sh.layers * m * 8 * b * sh.seq * sh.hidden * (t - 1) / t * ACT_BYTES / 100e9  # 4 all-reduces' worth
    sp = step_costs(sh, cl, deg)  # Megatron's SP (the default stack)
    assert float(sp.tp_comm_s) == pytest.approx(want * 5 / 4)
    assert float(step_costs(sh, cl, deg, kernels=Kernels(sequence_parallel=False)).tp_comm_s) == pytest.approx(want)
    # The extra gathers hide behind the activation-gradient GEMMs here (fast links): the exposed part is unchanged.
    plain = step_costs(sh, cl, deg, kernels=Kernels(sequence_parallel=False))
    assert float(sp.tp_comm_s - sp.tp_hidden_s) == pytest.approx(float(plain.tp_comm_s - plain.tp_hidden_s))
    # Without overlap they are on the critical path: a fifth of SP's TP time more than SC21's four.
    no = step_costs(sh, cl, deg, tp_overlap=False)
    assert float(no.tp_comm_s - no.tp_hidden_s) == pytest.approx(want * 5 / 4)


def test_dp_overlap_and_eager_kernels_cost_time():
    sh = Shape(8, 1024, 8, 8, 1000, 1024, 4096)
    cl = toy_cluster()
    deg = Degrees.of(d=8, b=2, m=4)
    base = step_costs(sh, cl, deg)
    exposed = step_costs(sh, cl, deg, dp_overlap=False)
    assert float(exposed.dp_hidden_s) == 0 < float(base.dp_hidden_s)
    assert float(exposed.step_s) == pytest.approx(float(base.step_s) + float(base.dp_hidden_s))
    # Eager Llama kernels (torchtitan's composite RMSNorm, rotary and SwiGLU) against fused ones.
    fused = step_costs(sh, cl, deg, kernels=Kernels(rope=True))
    eager = step_costs(sh, cl, deg, kernels=Kernels(fused=False, rope=True))
    assert float(eager.step_s) > float(fused.step_s)


def test_recompute_repeats_the_forward_tp_collectives_on_the_critical_path():
    # Without SP (Megatron 2021) a layer's forward runs 2 all-reduces of b·s·h; full recompute runs that forward
    # again inside the backward, so 2 more, and neither the recompute's nor the forward's hide: only the 2 backward
    # ones overlap the weight-gradient GEMMs (tp_overlap). Zero latency: each all-reduce is 2(t-1)/t·S / B.
    sh = Shape(4, 1024, 8, 8, 1000, 512, 4096)
    cl = toy_cluster(alpha_step_us=0.0, alpha_level_us=0.0)
    b, t, m = 2, 4, 3
    one = 2 * (t - 1) / t * ACT_BYTES * b * sh.seq * sh.hidden / 100e9  # one all-reduce, seconds
    kw = dict(kernels=Kernels(sequence_parallel=False))
    plain = step_costs(sh, cl, Degrees.of(t=t, b=b, m=m), **kw)
    full = step_costs(sh, cl, Degrees.of(t=t, b=b, m=m, recompute=FULL), **kw)
    assert float(plain.tp_comm_s) == pytest.approx(sh.layers * m * 4 * one)
    assert float(full.tp_comm_s) == pytest.approx(sh.layers * m * 6 * one)
    exposed = lambda out: float(out.tp_comm_s - out.tp_hidden_s)  # noqa: E731
    assert exposed(full) - exposed(plain) == pytest.approx(sh.layers * m * 2 * one)


def test_tp_comm_overlap_hides_the_forward_collectives_too():
    # Megatron-Core's --tp-comm-overlap pipelines every TP collective with its GEMM: a layer's 4 all-reduce-equivalents
    # hide behind its forward and backward GEMMs as far as they last; the backward-only overlap hides at most 2.
    sh = Shape(4, 1024, 8, 8, 1000, 512, 4096)
    cl = toy_cluster(alpha_step_us=0.0, alpha_level_us=0.0, intra_GBps=1000.0)  # fast links: all of it fits
    deg = Degrees.of(t=4, b=2, m=3)
    bwd_only = step_costs(sh, cl, deg, kernels=GPU_ONLY)
    overlapped = step_costs(sh, cl, deg, kernels=Kernels(tp_comm_overlap=True, host="graphs"))
    # Backward-only overlap hides the 2 reduce-scatter-equivalents and SP's re-gather (costs.py): 3 of 5.
    assert float(bwd_only.tp_hidden_s) == pytest.approx(float(bwd_only.tp_comm_s) * 3 / 5)
    assert float(overlapped.tp_hidden_s) == pytest.approx(float(overlapped.tp_comm_s))
    assert float(overlapped.step_s) == pytest.approx(float(bwd_only.step_s) - float(bwd_only.tp_comm_s) * 2 / 5)


def test_fsdp_pays_a_collective_per_layer_priced_by_its_latency():
    # FSDP gathers and reduce-scatters one unit (a block) per call: ZeRO-3 runs 2 all-gathers and 1 reduce-scatter per
    # layer and micro-batch, each paying its latency (7 ring steps of 1 us on 8 ranks in one domain) however small.
    # Links so fast that only latency is left: 3 x 4 layers x 3 micro-batches x 7 us.
    sh = Shape(4, 256, 8, 8, 1000, 256, 1024)
    cl = toy_cluster(intra_GBps=1e12, nic_GBps=1e12)
    out = step_costs(sh, cl, Degrees.of(d=8, m=3, zero=3))
    assert float(out.dp_comm_s) == pytest.approx(3 * 4 * 3 * 7e-6, rel=1e-6)
    # ZeRO-0 reduces the gradients once per step, one bucket: one all-reduce latency (14 steps).
    assert float(step_costs(sh, cl, Degrees.of(d=8, m=3, zero=0)).dp_comm_s) == pytest.approx(14e-6, rel=1e-6)


def test_fewer_micro_batches_than_stages_are_priced():
    # Issue 29 part 5: m < p runs (Megatron's 1F1B, PyTorch's GPipe): every stage idles p - 1 slots of the m + p - 1,
    # and the first stage holds all m micro-batches. Equal stages of one layer and no head: the formula exactly.
    from planner.model.stages import pipeline_step

    for p, m in ((4, 1), (4, 2), (8, 3), (4, 4), (4, 9)):
        step = float(pipeline_step(m, 1, 1.0, float(p)))  # slowest stage 1 s per micro-batch, p such stages
        assert step == m + p - 1 and (step - m) / step == pytest.approx((p - 1) / (m + p - 1))
    sh = Shape(16, 1024, 8, 8, 1000, 1024, 4096)
    out = step_costs(sh, toy_cluster(), Degrees.of(p=np.array([4, 4]), m=np.array([2, 8])))
    assert out.bubble_fraction[0] == pytest.approx(3 / 5, rel=0.1) and out.bubble_fraction[1] < 0.3
