"""Each alert fires on a crafted series and stays quiet on a clean one; detector state survives a resume."""

import math

from health.alerts import AlertEngine, PlateauDetector, ScaleJumpDetector, SpikeDetector, Thresholds, nonfinite

T = Thresholds(warmup=20, spike_window=128)


def noisy(n: int, base: float = 1.0, amp: float = 0.1) -> list[float]:
    return [base + amp * math.sin(1.7 * i) for i in range(n)]  # deterministic jitter


def spikes(series, t=T):
    d = SpikeDetector(t)
    return [a for i, v in enumerate(series) if (a := d.observe(i, v))]


def test_grad_spike_sigma_rule():
    clean = noisy(300)
    assert spikes(clean) == []
    crafted = clean.copy()
    crafted[150] = 3.0  # ~20 sigma of the jitter, but only 3x the running max
    hits = spikes(crafted)
    assert [(a.step, a.kind) for a in hits] == [(150, "grad_spike")] and "sigma" in hits[0].message
    crafted[10] = 50.0  # before the warm-up ends: not judged
    assert [a.step for a in spikes(crafted)] == [150]


def test_grad_spike_running_max_rule():
    t = Thresholds(spike_sigma=1e9, warmup=5)  # only the 10x-running-max rule can fire
    series = noisy(50)
    assert spikes(series, t) == []
    series[40] = 11.5
    hits = spikes(series, t)
    assert [a.step for a in hits] == [40] and "running max" in hits[0].message


def test_plateau():
    t = Thresholds(plateau_patience=3, plateau_threshold=1e-3)
    d = PlateauDetector(t)
    improving = [(3.0 - 0.1 * i, 1.0) for i in range(10)]
    assert [a for i, (v, g) in enumerate(improving) if (a := d.observe(i, v, g))] == []
    d = PlateauDetector(t)
    flat = [(2.0, 1.0)] + [(2.0 - 1e-5 * i, 1.0 + 0.01 * i) for i in range(1, 8)]  # no real gain, grads not falling
    hits = [a for i, (v, g) in enumerate(flat) if (a := d.observe(i, v, g))]
    assert [a.step for a in hits] == [3, 6] and hits[0].kind == "plateau"  # once per `patience` evaluations
    d = PlateauDetector(t)
    cooling = [(2.0, 1.0)] + [(2.0, 1.0 - 0.1 * i) for i in range(1, 8)]  # flat loss, grad norm still falling
    assert [a for i, (v, g) in enumerate(cooling) if (a := d.observe(i, v, g))] == []


def test_scale_jumps():
    t = Thresholds(warmup=3, scale_window=8, scale_factor=8)
    clean = [1.0, 1.0, 1.0] + [100.0 * (1 + 0.3 * math.sin(i)) for i in range(60)]  # starts at scale 1 (delayed)
    d = ScaleJumpDetector(t)
    assert [a for i, s in enumerate(clean) if (a := d.observe(i, {"w1.input": s}))] == []
    crafted = clean.copy()
    crafted[30:46] = [100.0 / 4096] * 16  # an outlier in the amax history for 16 steps ...
    d = ScaleJumpDetector(t)
    hits = [a for i, s in enumerate(crafted) for a in d.observe(i, {"w1.input": s})]
    assert [(a.step, a.kind) for a in hits] == [(30, "scale_drop"), (46, "scale_rise")]  # ... then it leaves
    d = ScaleJumpDetector(t)  # E5M2's range is 1.8x E4M3's in binades: a 16x move is within its tolerance
    jumpy = clean[:30] + [s / 16 for s in clean[30:]]
    assert [a for i, s in enumerate(jumpy) for a in d.observe(i, {"g": s}, {"g": "e5m2"})] == []
    d = ScaleJumpDetector(t)
    assert [a.kind for i, s in enumerate(jumpy) for a in d.observe(i, {"g": s}, {"g": "e4m3"})] == ["scale_drop"]
    d = ScaleJumpDetector(t)  # block formats scale per block: no tensor-level alarm
    assert [a for i, s in enumerate(crafted) for a in d.observe(i, {"x": s}, {"x": "mxfp8"})] == []


def test_nonfinite():
    assert nonfinite(3, 2.5, 1.0) is None
    a = nonfinite(3, float("nan"), 1.0)
    assert a.kind == "nonfinite" and a.severity == "critical" and "loss = nan" in a.message
    assert nonfinite(4, 2.0, float("inf")).step == 4


def test_engine_state_round_trip():
    t = Thresholds(warmup=5, scale_window=4, plateau_patience=2)
    grads = [g + 0.002 * i for i, g in enumerate(noisy(60))]  # slowly rising: the plateau needs grads not falling
    grads[45] = 40.0
    scales = [{"a": 1.0 if i < 5 else (10.0 if i < 50 else 0.5)} for i in range(60)]

    def feed(engine, lo, hi):
        out = []
        for i in range(lo, hi):
            out += engine.step(i, 3.0, grads[i], scales[i])
            if i % 10 == 9:
                out += engine.evaluation(i, 2.0)
        return [(a.step, a.kind) for a in out]

    whole = feed(AlertEngine(t), 0, 60)
    first = AlertEngine(t)
    part = feed(first, 0, 30)
    resumed = AlertEngine(t)
    resumed.load_state_dict(first.state_dict())
    assert part + feed(resumed, 30, 60) == whole
    assert {k for _, k in whole} == {"grad_spike", "scale_drop", "plateau"}


def test_an_alert_is_printed_once_for_the_job_not_once_per_rank(capsys):
    """Every rank runs the detectors (and acts on them); rank 0 alone prints, and a disabled progress bar (no
    terminal, --no-progress, any rank but 0) does not print through tqdm.write, which ignores `disable`."""
    from types import SimpleNamespace

    from tqdm import tqdm

    from health.alerts import Alert
    from training.runloop import RunLoop

    alert = Alert(12, "grad_spike", "warning", "grad_norm", 9.0, 3.0, "grad norm 9.0 > 3.0")
    for rank, disabled in ((1, True), (1, False), (0, True)):
        loop = SimpleNamespace(w=None, ids={"run": "fp8-s0"}, last_alert="", _write=lambda *a: None,
                               bar=tqdm(total=1, disable=disabled), tr=SimpleNamespace(env=SimpleNamespace(
                                   is_main=rank == 0)))
        RunLoop._alert(loop, alert)
        loop.bar.close()
        err = [line for line in capsys.readouterr().err.splitlines() if "grad_spike" in line]
        assert err == ([] if rank else ["[warning] fp8-s0 step 12 grad_spike: grad norm 9.0 > 3.0"]), (rank, err)
