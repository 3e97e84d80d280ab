"""fp8-train: the same GPT trained in FP32, BF16, FP16 and FP8 -- speed, memory, loss curves, scales.

What it measures and why. FP8 GEMMs run at twice the BF16 tensor-core rate on Hopper, but every
FP8 tensor needs a scale, casts cost memory traffic, and small GEMMs do not win (fp8-anchors.md
section 5). This runner trains one GPT from identical initial weights on identical batches in
each precision and records, per step, loss, grad/param norms, update ratio, lr, tokens/s, step
time and memory (steps.csv), and per FP8 tensor its amax, scale and underflow/saturation
fractions (fp8.csv). BF16 runs with several seeds give the seed-to-seed noise band that decides
whether FP8 "matches". On GPU presets a hidden-size sweep (sweep.csv) shows where FP8 starts to pay.
Around every run (runloop.py): per-layer health (layers.csv), alerts (events.csv), the --on-nan
policy, atomic checkpoints, --resume, SIGTERM handling and a live HTML dashboard.

Runs (--runs, comma-separated `precision[:backend]`; precision fp32|bf16|fp16|fp8|mxfp8|mxfp4|nvfp4,
backend auto|te|torchao|native|emulated). Presets (GPU=, common/hardware.py) pick the runs and the model:
    cpu        tiny GPT, fp32 / bf16 (emulated) x3 seeds / fp8 native + emulated / mxfp8, nvfp4 emulated
    h100 h200  hidden 4096, 8 layers, 8K tokens/step, blocks compiled; bf16 x2 seeds, fp8 torchao, te, native
    a100       no FP8 hardware: fp32 vs bf16 vs fp16 + GradScaler
    b200       the h100 set plus mxfp8 and nvfp4 through TransformerEngine
Preset runs whose backend is missing are skipped with the reason; a backend you name yourself
(--runs or --fp8-backend) that cannot run here is an error (exit 2) that says how to get it.

Commands:
    make fp8-train GPU=cpu                                    # CPU preset + report (a few minutes)
    make fp8-train GPU=h100                                   # 1 GPU
    make fp8-train-run GPU=h100 NPROC=8                       # 8 GPUs, FSDP2 (torchrun)
    make fp8-train-demo                                       # injected faults + recovery (CPU)
    make fp8-train-run GPU=cpu ARGS="--resume"                # continue after a crash or SIGTERM
    sbatch --nodes=2 slurm/lab.sbatch fp8-train GPU=h100      # N nodes
    PYTHONPATH=distributed-training python distributed-training/fp8-train/train.py --gpu cpu \\
        --runs bf16,fp8:emulated --steps 50                   # by hand; --help lists every flag
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from pathlib import Path

import torch

import backends
import checkpoint
from alerts import AlertEngine
from common.config import changed_flags, config_dict, parse_config, parse_size
from common.data import load_data
from common.dist import (DistInfo, check_batch_split, distributed, fail, from_rank0, launched_by_torchrun,
                         planned_world, print0, select_device)
from common.failures import PREEMPTED, entrypoint, report
from common.hardware import get_preset
from common.model import GPTConfig
from common.results import ResultsWriter, SchemaMismatch, check_resume, provenance
from common.runs import RunError, RunFolder, check_free, check_resumable, run_dir_for
from faults import parse as parse_faults
from precision import LOW, PrecisionSettings, RunSpec, parse_runs, prepare, select_modules
from runloop import EVENT_COLUMNS, FP8_COLUMNS, LAYER_COLUMNS, STEP_COLUMNS, Preempted, RunLoop
from settings import Config, with_preset
from trainer import StopRun, Trainer, Writers

LAB = Path(__file__).resolve().parent
BENCH_VERSION = "1"


def plan(cfg: Config, device: torch.device, explicit: bool, mcfg: GPTConfig) -> tuple[list, list[str]]:
    """Resolve every run's backend before anything is written: (runnable specs, skipped notes)."""
    specs = parse_runs(cfg.runs, cfg.fp8_backend, cfg.seed, cfg.noise_seeds)
    from common.model import GPT
    with torch.device("meta"):
        select_modules(GPT(mcfg), cfg.fp8_modules, cfg.hp_modules)  # a bad precision map fails here
    late = [f for f in parse_faults(cfg.inject) if f.step >= cfg.steps]
    if late:
        raise ValueError(f"--inject {late[0].kind}@{late[0].step}: the run has steps 0..{cfg.steps - 1} (--steps "
                         f"{cfg.steps}); pick a step inside it")
    if any(f.kind == "overflow" for f in parse_faults(cfg.inject)):
        hp = [s.name for s in specs if s.precision not in LOW]
        if hp:
            raise ValueError(f"--inject overflow@STEP pushes an FP8 tensor out of range; {', '.join(hp)} has none "
                             "(use --runs with FP8 runs only)")
    keep, skipped = [], []
    for s in specs:
        if s.precision in LOW:
            try:
                backends.resolve(s.precision, s.backend, device)
            except backends.BackendUnavailable as e:
                if explicit:
                    raise
                skipped.append(f"{s.name}: {e}")
                continue
        keep.append(s)
    return keep, skipped


def settings(cfg: Config) -> PrecisionSettings:
    return PrecisionSettings(cfg.fp8_modules, cfg.hp_modules, cfg.recipe, cfg.fp8_scaling, cfg.torchao_recipe,
                             bool(cfg.compile))


def build(cfg: Config, spec: RunSpec, mcfg: GPTConfig, env: DistInfo):
    prep = prepare(spec, mcfg, settings(cfg), env.device)
    if env.world_size > 1:  # FSDP2 per block then root (common.fsdp); fp32 params, autocast does bf16
        from torch.distributed.device_mesh import init_device_mesh

        from common.fsdp import apply_fsdp  # imported here: FSDP costs a second of start-up on one rank
        apply_fsdp(prep.raw, init_device_mesh(env.device.type, (env.world_size,)), reshard_after_forward=True)
    return prep


def sweep(cfg: Config, specs: list[RunSpec], env: DistInfo, data, out: Path, prov: dict) -> None:
    """Tokens/s of bf16 vs each FP8 backend across hidden sizes: where FP8 starts to pay (GPU presets)."""
    w = ResultsWriter(out / "sweep.csv", ["d_model", "n_layers", "run", "precision", "precision_backend",
                                          "compiled", "tokens_per_s", "step_time_s", "peak_mem_MiB",
                                          "tokens_per_step"],
                      key=["d_model", "run"], provenance=prov, enabled=env.is_main)
    for d in cfg.sweep_hidden or ():
        mcfg = GPTConfig(vocab_size=data.vocab_size, seq_len=cfg.seq_len, d_model=d, n_layers=4,
                         n_heads=max(1, d // 128))
        for spec in [s for s in specs if s.precision in ("bf16",) + LOW and s.seed == cfg.seed]:
            prep = build(cfg, spec, mcfg, env)
            sc = dataclasses.replace(cfg, steps=cfg.sweep_steps, stats_every=0, fractions_every=0, monitor=False)
            tr = Trainer(sc, spec, prep, env, data, mcfg)
            times = []
            for step in range(cfg.sweep_steps):
                times.append(tr.train_step(step)["step_time_s"])
            t = sorted(times[cfg.sweep_steps // 2:])[len(times[cfg.sweep_steps // 2:]) // 2]  # median, warm half
            row = dict(d_model=d, n_layers=4, run=spec.name, precision=spec.precision, precision_backend=prep.backend,
                       compiled=prep.compiled,
                       tokens_per_s=tr.tokens_per_step / t, step_time_s=t, tokens_per_step=tr.tokens_per_step,
                       peak_mem_MiB=torch.cuda.max_memory_allocated() / 2**20 if env.device.type == "cuda" else None)
            w.write(row)
            print0(f"sweep d_model={d:5d} {spec.name:22s} {row['tokens_per_s']:12,.0f} tokens/s")
            del tr, prep
            free_memory(env.device)  # the next size starts from a clean allocator


def free_memory(device: torch.device) -> None:
    """Drop what the last run left: compiled graphs (they hold the model), garbage, cached blocks."""
    import gc
    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


@functools.lru_cache(maxsize=2)
def _load_data(path: str | None, nbytes: int):
    """The corpus, read once per process (listing the stdlib takes a second; tests call main() often)."""
    return load_data(path, nbytes)


# Flags that do not change what is measured: a run differing from its preset only in them is the
# preset's run (published to results/); CONFIG_IGNORE: what a resumed run may change.
OPERATIONAL = ("gpu", "out", "ckpt_every", "ckpt_dir", "resume", "progress", "dashboard_every", "dashboard_refresh",
               "threads", "log_every", "promote")
CONFIG_IGNORE = ("resume", "progress", "skipped_runs", "promote", "out", "ckpt_dir")


def writers_for(folder: RunFolder | None, env: DistInfo, prov: dict, cfg_json: dict) -> Writers:
    """The run's CSV writers: in the run folder on rank 0, disabled elsewhere."""
    def w(name, cols, key, config=None):
        if folder is None:
            return ResultsWriter(Path(name), cols, key=key, provenance=prov, enabled=False)
        return folder.writer(name, cols, key, prov, config=config, config_ignore=CONFIG_IGNORE)
    return Writers(w("steps.csv", STEP_COLUMNS, ["run", "step"], cfg_json),
                   w("fp8.csv", FP8_COLUMNS, ["run", "step", "module", "role"]),
                   w("layers.csv", LAYER_COLUMNS, ["run", "step", "layer"]),
                   w("events.csv", EVENT_COLUMNS, ["run", "step", "kind", "metric"]))


def run_one(cfg: Config, spec: RunSpec, mcfg: GPTConfig, env: DistInfo, data, writers: Writers, out: Path,
            ckpt_dir: Path, peak: float | None, stop: checkpoint.GracefulStop) -> Path | None:
    """Train one run to its end (or its stop); returns its checkpoint path when it keeps one."""
    prep = build(cfg, spec, mcfg, env)
    print0(f"== {spec.name}: backend {prep.backend}" + (f" ({prep.reason})" if prep.reason else "") +
           "".join(f"; {n}" for n in prep.notes))
    ckpt = ckpt_dir / f"{spec.name}.pt" if (cfg.ckpt_every or cfg.resume) else None
    tr = Trainer(cfg, spec, prep, env, data, mcfg, peak, ckpt, parse_faults(cfg.inject))
    loop = RunLoop(tr, writers, AlertEngine(cfg.thresholds), out / "dashboards" / f"{spec.name}.html")
    start = 0
    if cfg.resume and ckpt is not None and ckpt.exists():
        state = checkpoint.load(ckpt, tr.fingerprint(), allow_pickle=prep.backend == "te")
        tr.restore(state)
        loop.load_health(state["health"])
        start = state["step"]
        print0(f"   resumed from its checkpoint at step {start}")
    elif cfg.resume and writers.steps.done({"run": spec.name, "step": 0}):
        if writers.steps.done({"run": spec.name, "step": cfg.steps - 1}):
            print0("   complete, nothing to resume")
            return None
        raise checkpoint.CheckpointError(f"cannot resume {spec.name}: steps.csv has its rows but there is no "
                                         f"checkpoint {ckpt.name if ckpt else ''} in {ckpt_dir.name}/; "
                                         "rerun without --resume")
    elif ckpt is not None:
        if cfg.resume:
            print0(f"   no checkpoint and no rows for {spec.name}: it had not started; starting it now")
        ckpt.unlink(missing_ok=True)  # a fresh run never resumes from an older run's checkpoint later
        if cfg.on_nan == "rollback":
            tr.save_checkpoint(0, loop.health_state())  # something to roll back to before the first periodic one
    loop.run(start, stop)
    return ckpt


def prune_checkpoints(done: list[Path], keep: int) -> None:
    """Delete the checkpoints of completed runs beyond the newest `keep` (a big model's is ~19 GB)."""
    for path in done[:max(0, len(done) - keep)]:
        path.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(Config, argv, description=__doc__, prog="fp8-train")
    explicit = bool(cfg.runs) or cfg.fp8_backend != "auto"
    try:
        preset = get_preset(cfg.gpu)
    except ValueError as e:
        fail(str(e), 2)
    on_gpu = preset.name != "cpu"
    if on_gpu and not torch.cuda.is_available():
        fail(f"GPU={cfg.gpu} needs a CUDA GPU and torch sees none; use GPU=cpu here", 2)
    changed = changed_flags(cfg, Config(gpu=cfg.gpu), OPERATIONAL)
    cfg = with_preset(cfg, preset.name, bool(cfg.runs))
    threads = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        return _run(cfg, preset, on_gpu, explicit, changed)
    finally:
        torch.set_num_threads(threads)


def out_dir(cfg: Config, preset) -> Path:
    """Where complete runs are published: results/<preset>_ws<N>[_n<nodes>] (h100_ws1, h100_ws8, h100_ws16_n2:
    one world size never replaces another); the run writes into runs/<that name>/ first."""
    world, _, nnodes = planned_world()
    return Path(cfg.out) if cfg.out else LAB / "results" / preset.run_tag(world, nnodes)


def _check(cfg: Config, preset, on_gpu: bool, explicit: bool, out: Path):
    """Everything checkable before the process group: (specs, skipped, data, model, saved config)."""
    mcfg = GPTConfig(seq_len=cfg.seq_len, d_model=cfg.d_model, n_layers=cfg.n_layers, n_heads=cfg.n_heads)
    world, _, nnodes = planned_world()
    check_batch_split(cfg.batch, cfg.grad_accum, world, nnodes)  # every micro-batch splits over the ranks
    # this rank's GPU (LOCAL_RANK) made current first: the backend probes below allocate on it
    specs, skipped = plan(cfg, select_device("cuda" if on_gpu else "cpu"), explicit, mcfg)
    data = _load_data(cfg.data, parse_size(cfg.data_size))
    cfg_json = {**config_dict(cfg), "preset": preset.name, "data": data.source, "data_fingerprint":
                data.fingerprint, "skipped_runs": skipped}
    if not launched_by_torchrun():  # the launcher's check pass, or the one process of a CPU run
        run_dir = run_dir_for(out.parent, out.name)
        check_free(run_dir)
        if cfg.resume:
            check_resumable(run_dir)
            check_resume(run_dir / "steps.csv", STEP_COLUMNS, cfg_json, CONFIG_IGNORE)
    return specs, skipped, data, dataclasses.replace(mcfg, vocab_size=data.vocab_size), cfg_json


def _run(cfg: Config, preset, on_gpu: bool, explicit: bool, changed: list[str]) -> int:
    out = out_dir(cfg, preset)
    try:
        specs, skipped, data, mcfg, cfg_json = _check(cfg, preset, on_gpu, explicit, out)
    except (ValueError, backends.BackendUnavailable, RunError) as e:
        fail(str(e), 2)
    with distributed(device="cuda" if on_gpu else "cpu") as env:
        ckpt_dir = Path(cfg.ckpt_dir) if cfg.ckpt_dir else LAB / "checkpoints" / out.name
        folder, error = None, None
        if env.is_main:
            try:
                folder = RunFolder.open(run_dir_for(out.parent, out.name), out, "resume" if cfg.resume else "fresh")
                writers = writers_for(folder, env, provenance(env, BENCH_VERSION), cfg_json)
            except (SchemaMismatch, RunError) as e:  # resuming into rows written with other settings
                error = str(e)
                if folder is not None:
                    folder.close()
        else:
            writers = writers_for(None, env, provenance(env, BENCH_VERSION), cfg_json)
        if (error := from_rank0(error)) is not None:
            fail(error, 2)
        run_path = folder.path if folder else out
        for note in (folder.notes if folder else []) + [f"skipped {n}" for n in skipped]:
            print0(note)
        try:
            code = _train_all(cfg, specs, mcfg, env, data, writers, run_path, ckpt_dir, preset)
        except BaseException:
            if folder is not None:
                folder.finish(complete=False, changed=changed)
            raise
        if folder is not None:
            for line in folder.finish(complete=code == 0, changed=changed, promote=cfg.promote):
                print(line, flush=True)
    return code


def _train_all(cfg: Config, specs, mcfg: GPTConfig, env: DistInfo, data, writers: Writers, run_path: Path,
               ckpt_dir: Path, preset) -> int:
    completed: list[Path] = []
    with checkpoint.GracefulStop() as stop:
        for spec in specs:
            try:
                ckpt = run_one(cfg, spec, mcfg, env, data, writers, run_path, ckpt_dir, preset.peak_tflops("bf16"),
                               stop)
            except checkpoint.CheckpointError as e:
                fail(str(e), 2)
            except Preempted as e:  # not success: a requeue script must see it (common.failures)
                report(str(e), PREEMPTED, "preempted")
                return PREEMPTED
            except StopRun as e:
                print0(f"{spec.name}: {e}")
                return 3
            if ckpt is not None and env.is_main:
                completed.append(ckpt)
                prune_checkpoints(completed, cfg.keep_ckpts)
            free_memory(env.device)
    if env.is_main and len(specs) > 1:
        import dashboard
        dashboard.write([(run_path, s.name, None) for s in specs], run_path / "dashboard.html",
                        f"fp8-train {run_path.name}: all runs")
    if cfg.sweep_hidden:
        sweep(cfg, specs, env, data, run_path, provenance(env, BENCH_VERSION))
    return 0


if __name__ == "__main__":
    sys.exit(entrypoint(main))
