"""The benchmarks' flags: one frozen dataclass, its presets, and the training Config of one timed mode.

The presets are functions returning a complete BenchConfig, one per device (cpu(): toy sizes, modes interleaved;
cuda(): hidden 1024-8192, 8K tokens per step); --gpu picks one and every other flag overrides it
(common.config.parse_preset; --help shows the preset's values). The run-folder flags are common.runner.RunFlags'. The
targets are the issues' (6: the emulated FP8 step at most 1.5x the fp32 step on CPU; 7: monitoring under 5% of the
step).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from common.hardware import get_preset
from common.runner import RunFlags
from precision.modes import parse_runs
from training.settings import Config
from training.settings import preset as training_preset

TARGET_EMULATED_VS_FP32 = 1.5  # issue 6
TARGET_MONITOR_PCT = 5.0  # issue 7
PARTS = ("step", "gemm", "monitor", "kernels")


@dataclass(frozen=True, kw_only=True)
class BenchConfig(RunFlags):
    runs: tuple[str, ...] = field(metadata={"help": "modes to time"})
    hidden: tuple[int, ...] = field(metadata={"help": "hidden sizes"})
    n_layers: int = field(default=2, metadata={"help": "blocks"})
    batch: int = field(default=8, metadata={"help": "sequences per step"})
    seq_len: int = field(metadata={"help": "tokens per sequence"})
    warmup: int = field(default=3, metadata={"help": "untimed steps per mode (compilation happens here)"})
    iters: int = field(default=15, metadata={"help": "timed steps per mode"})
    compile: bool = field(metadata={"help": "compile each block"})
    fp8_scaling: str = field(default="delayed", metadata={"help": "per-tensor FP8 scaling of the te, native and "
                                                                  "emulated modes", "choices": ["delayed", "current"]})
    monitor_run: str = field(metadata={"help": "run whose monitoring cost is measured (on a GPU fp8:torchao: "
                                               "compiled, its amax probes ride in the graph)"})
    monitor_hidden: int = field(metadata={"help": "hidden size for the monitoring benchmark"})
    monitor_iters: int = field(default=100, metadata={"help": "timed steps with monitoring on and off"})
    parts: tuple[str, ...] = field(default=("step", "gemm", "monitor"), metadata={"help": f"of {', '.join(PARTS)}"})
    kernels_baseline: str = field(default="", metadata={"help": "kernels: also count with this commit's "
                                                                "fp8_linear.py (e.g. 2fbc6b4)"})
    threads: int = field(default=0, metadata={"help": "torch threads (0 = default)"})

    def __post_init__(self):
        if self.iters < 1 or self.warmup < 0 or self.batch < 1 or self.seq_len < 1 or self.n_layers < 1:
            raise ValueError("--iters/--batch/--seq-len/--n-layers must be >= 1, --warmup >= 0")
        if not self.parts or not set(self.parts) <= set(PARTS):
            raise ValueError(f"--parts takes {', '.join(PARTS)}; got {','.join(self.parts) or '(none)'}")
        if not self.runs or not self.hidden:
            raise ValueError("--runs and --hidden each need at least one value")
        if any(h < 16 or h % 16 for h in self.hidden + (self.monitor_hidden,)):
            raise ValueError(f"--hidden sizes must be multiples of 16 (FP8 GEMM shapes), got {self.hidden}")
        if self.resume:  # each launch measures its parts afresh: a resumed one would measure its rows twice
            raise ValueError("--resume: fp8-train-bench measures every part it is given afresh; a stopped "
                             "launch's rows are published with `python -m common.runs promote "
                             "runs/<preset>_ws1-bench --merge`")
        parse_runs(self.runs, "auto", 0, 1)  # a bad mode is a ValueError here, before anything runs


def cpu() -> BenchConfig:
    """Toy sizes on 2 cores, every mode against fp32 (issue 6's target is the emulated step vs fp32's)."""
    return BenchConfig(gpu="cpu", runs=("fp32", "bf16", "fp8:emulated", "fp8:native"), hidden=(128, 256, 512),
                       seq_len=128, compile=False, monitor_run="fp8:emulated", monitor_hidden=128)


def cuda() -> BenchConfig:
    """One GPU: hidden 1024-8192 at 8K tokens per step, every block compiled."""
    return BenchConfig(gpu="h100", runs=("bf16", "fp8:torchao", "fp8:native", "fp8:te", "fp8:te-fused"),
                       hidden=(1024, 2048, 4096, 8192), seq_len=1024, compile=True, monitor_run="fp8:torchao",
                       monitor_hidden=4096)


def preset(gpu: str = "auto") -> BenchConfig:
    """The preset --gpu picks (auto: this machine's), with --gpu as given; an unknown one is a ValueError."""
    return dataclasses.replace(cpu() if get_preset(gpu).name == "cpu" else cuda(), gpu=gpu)


def train_config(b: BenchConfig, d_model: int, steps: int, **kw) -> Config:
    """The training Config of one timed mode at one hidden size: the preset's, sized by the benchmark's flags."""
    return dataclasses.replace(
        training_preset("cpu" if b.gpu == "cpu" else "h100"), gpu=b.gpu, batch=b.batch, seq_len=b.seq_len,
        d_model=d_model,
        n_layers=b.n_layers, n_heads=max(1, d_model // 128 if d_model >= 1024 else d_model // 64), steps=steps,
        lr=1e-3, warmup=1, val_every=0, log_every=10 ** 9, progress=False, compile=b.compile, ckpt_every=0,
        fp8_scaling=b.fp8_scaling, **kw)
