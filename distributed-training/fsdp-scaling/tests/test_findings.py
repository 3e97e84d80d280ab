"""Every sentence that compares or explains is picked by the data: change the committed CSVs (in memory) and the
sentence changes. In-process, without plots: the opening and the body's judgements from the rows alone."""

import pytest

import findings
import report
from common.findings import block

RES = report.LAB / "results"


@pytest.fixture(scope="module")
def committed():
    return {k: report.read(k) for k in ("scaling_*.csv", "at_scale.csv", "comms_*.csv", "projection.csv",
                                        "overlap_*.csv")}


def _opening(d):
    lines = findings.opening(d["scaling_*.csv"], d["at_scale.csv"], d["comms_*.csv"], d["projection.csv"],
                             d["overlap_*.csv"])
    block(lines, one_screen=True)  # fits one screen, whatever the data
    return {f.label: f.text for f in lines}


def test_memory_follows_the_at_scale_rows(committed):
    assert "to 0.104 MiB ([ZeRO-3](../../docs/glossary.md#zero)), as the ZeRO formula says (ZeRO-1: +6.7%" in \
        _opening(committed)["Answer"]
    a = committed["at_scale.csv"].copy()
    z3 = (a["strategy"] == "zero3") & (a["world_size"] == 128)
    a.loc[z3, "param_bytes"] += 4 * 2**20  # 4 MiB more than the formula
    after = _opening({**committed, "at_scale.csv": a})["Answer"]
    assert "to 4.1 MiB" in after and "3859% off the ZeRO formula" in after


def test_time_is_a_cost_only_beyond_the_spread(committed):
    before = _opening(committed)["Time"]
    assert "hsdp weak +100%, zero3 weak +87%, zero2 weak +57%, hsdp strong +21% and 2 more; 4 show no difference" \
        in before
    s = committed["scaling_*.csv"].copy()
    slow = (s["strategy"] == "zero3") & (s["mode"] == "weak")
    s.loc[slow, ["step_time_ms", "step_time_min_ms", "step_time_max_ms"]] /= 1.8  # zero3 weak 1.8x faster
    wide = (s["strategy"] == "hsdp") & (s["mode"] == "strong")
    s.loc[wide, "step_time_min_ms"] = 150.0  # hsdp strong's fastest step now under plain training's slowest
    after = _opening({**committed, "scaling_*.csv": s})["Time"]
    assert "zero3 weak" not in after.split(";")[0] and "hsdp strong" not in after and "6 show no difference" in after


def test_time_speaks_for_one_gpu_set_and_pools_a_repeated_configuration(committed):
    """Another GPU's one-rank rows beside the committed ones (issue 44: a lookup then returned several rows), and the
    same configuration measured twice: the sentence names the newest set's GPU, and a repeat widens the spread."""
    import pandas as pd
    s = committed["scaling_*.csv"]
    one = s[(s["backend"] == "nccl") & (s["world_size"] == 1)]
    other = one.assign(hardware="1x NVIDIA H200", timestamp_utc="2099-01-01T00:00:00Z")
    assert "1x H200" in _opening({**committed, "scaling_*.csv": pd.concat([s, other])})["Time"].replace("NVIDIA ", "")
    rerun = one[one["strategy"] == "single"].copy()
    rerun[["step_time_min_ms", "step_time_max_ms"]] *= [0.1, 10.0]  # a noisy rerun of plain training
    after = _opening({**committed, "scaling_*.csv": pd.concat([s, rerun])})["Time"]
    assert "beyond its" in after and "hsdp weak" not in after  # nothing differs beyond the pooled spread


def test_the_projection_and_its_captions_follow_the_rows(committed):
    p = committed["projection.csv"]
    assert "needs 129 GB/GPU of states under DDP (no fit), 19 GB under ZeRO-3" in _opening(committed)["At scale"]
    assert "above the GPU's 80 GB at every count: ddp; the others fit from 8 GPUs on" in findings.answer_caption(p, 80)
    assert "every strategy fits from 8 GPUs on" in findings.answer_caption(p, 140)
    big = p[p["model"] == "8b"]
    assert "every point lies below the dashed 1.0" in findings.projection_caption(big)
    over = big.assign(comm_ms=big["comm_ms"].where(big["strategy"] != "zero1", big["compute_ms"] * 2))
    assert "above the dashed 1.0 (zero1)" in findings.projection_caption(over)
    assert "does not win there" in findings.across_nodes(p)
    hsdp = p.assign(efficiency_no_overlap=p["efficiency_no_overlap"].where(p["strategy"] != "hsdp", 0.99))
    assert "HSDP's smaller cross-node traffic wins" in findings.across_nodes(hsdp)
    assert findings.tidy("predicted MFU 0.46-0.46 of 989") == "predicted MFU 0.46 of 989"
    assert findings.tidy("MFU 0.15-0.34, 1-rank, 8-80") == "MFU 0.15-0.34, 1-rank, 8-80"


def test_losses_and_the_per_step_cost_follow_the_rows(committed):
    s = committed["scaling_*.csv"]
    cpu, gpu = s[s["backend"] == "gloo"], s[s["backend"] == "nccl"]
    assert findings.losses(cpu) == "The strategies' last losses are identical at every world size and mode."
    assert "spread by up to 0.012 (1 of 2" in findings.losses(gpu)
    assert "agree within 0.0004" in findings.losses(cpu.assign(loss_last=cpu["loss_last"] + cpu["world_size"] * 1e-4
                                                                * (cpu["strategy"] == "ddp")))
    flags = findings.loss_flags(gpu)
    assert flags[0].startswith("**Flag: strong mode at 1 rank, the last losses spread by 0.0123.**")
    assert "zero2, zero3, hsdp start at 6.000445" in flags[0]
    same = gpu.assign(loss_first=6.0)
    assert "Their first losses agree" in findings.loss_flags(same)[0]
    assert "The weak step of zero2, zero3 and hsdp is no shorter" in findings.per_step(gpu)
    quick = gpu.copy()
    weak = quick["mode"] == "weak"
    quick.loc[weak, ["step_time_ms", "step_time_min_ms", "step_time_max_ms"]] = [[60.0, 59.0, 61.0]] * int(weak.sum())
    assert "no per-step cost stands out" in findings.per_step(quick)


def test_the_memory_caption_says_where_the_formula_stops_holding(committed):
    a = committed["at_scale.csv"]
    caption = findings.memory_caption(a)
    assert "every world size: ddp and hsdp; off it from 16 ranks: zero1; from 1024 ranks: zero2 and zero3" in caption
    assert "every measured point lies on its formula line" in findings.memory_caption(a[a["strategy"] == "ddp"])


def test_one_screen_holds_for_every_committed_set_alone(committed):
    s = committed["scaling_*.csv"]
    for name, g in s.groupby("set"):
        _opening({**committed, "scaling_*.csv": g})
    assert "No GPU projection yet" in _opening({**committed, "projection.csv": committed["projection.csv"].iloc[0:0]})[
        "At scale"]
