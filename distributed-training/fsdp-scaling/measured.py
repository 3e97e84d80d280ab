"""Section 3 of fsdp-scaling's REPORT.md: the measured sweeps, one result set at a time (scaling_*.csv).

Per set: whether every strategy trained the same losses (the appendix holds every row), throughput, scaling
efficiency E(N) = T(N) / (N T(1)) and peak memory per rank, the efficiency plot, and for a sweep of one rank
what one rank can and cannot show (each wrapper's own cost, beside the timing noise).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

import report_plots
from common.hardware import parse_run_tag
from common.markdown import frame, number

ORDER = ["single", "ddp", "zero1", "zero2", "zero3", "hsdp"]
MiB = 2**20


def table(df: pd.DataFrame, spec: str = ".3g") -> str:
    return frame(df, fmt=lambda v: number(v, spec))


def efficiency(s: pd.DataFrame) -> pd.DataFrame:
    """E(N) per (hardware file, strategy, mode) against the same strategy's world-size-1 row."""
    base = s[s["world_size"] == 1].set_index(["hardware", "strategy", "mode"])["tokens_per_s"]
    s = s.join(base.rename("t1"), on=["hardware", "strategy", "mode"])
    return s.assign(efficiency=s["tokens_per_s"] / (s["world_size"] * s["t1"]))


def section_measured(s: pd.DataFrame, results: Path) -> list[str]:
    """One subsection per result set (a sweep: hardware, its world sizes, its nodes): rows of a tiny CPU model
    and a GPU model, or of a sweep to 1 GPU and one to 8, never share a table or an average."""
    out = []
    for name, g in s.groupby("set", sort=False):
        cpu = (g["backend"] == "gloo").all()
        tag = parse_run_tag(name)
        worlds = ", ".join(str(n) for n in sorted(set(g["world_size"])))
        nodes = f" on {tag.nnodes} nodes" if tag and tag.nnodes > 1 else ""
        out += [f"### {g['hardware'].iloc[0]}: world size {worlds}{nodes}"
                + (" (CPU: contention, not scaling)" if cpu else "") + f" — `{name}.csv`", ""]
        out += measured_one(g, name.removeprefix("scaling_"), results)
    return out


def measured_one(s: pd.DataFrame, tag: str, results: Path) -> list[str]:
    s = efficiency(s)
    single = s[(s["strategy"] == "single") & (s["world_size"] == 1)].set_index("mode")["step_time_ms"]
    one = s[(s["world_size"] == 1) & (s["strategy"] != "single")]
    over = ", ".join(f"{r.strategy} {r.mode} {r.step_time_ms / single[r.mode] - 1:+.0%}" for r in one.itertuples()
                     if r.mode in single)
    spread_pct = (s["step_time_max_ms"] / s["step_time_min_ms"] - 1).median()
    names = {"tokens_per_s": "tok/s", "efficiency": "E", "peak": "peak MiB", "mfu": "MFU"}
    values = [v for v in names if v != "mfu" or s["mfu"].notna().any()]  # MFU: GPU rows only
    piv = s.assign(peak=s["peak_mem_bytes"] / MiB).pivot_table(index=["mode", "strategy"], columns="world_size",
                                                               values=values)
    piv = piv.reindex(sorted(piv.index, key=lambda k: (k[0], ORDER.index(k[1]))))
    piv = piv[[c for m in values for c in piv.columns if c[0] == m and (m, c[1]) != ("efficiency", 1)]]
    piv.columns = [f"{names[m]} N={n}" for m, n in piv.columns]
    agree = s.groupby(["world_size", "mode"])["loss_last"].agg(lambda x: x.max() - x.min())
    out = [f"Same tokens, same losses: the strategies' last losses spread by at most {agree.max():.2g} at any world "
           f"size and mode ({int((agree <= LOSS_AGREE).sum())} of {len(agree)} within {LOSS_AGREE:g}; the appendix "
           "has every row" + (" and explains the spread" if (agree > LOSS_AGREE).any() else "") + ").", "",
        *([] if set(s["world_size"]) == {1} else [  # one rank: one_rank() below has the same, with its noise
            f"Wrapper overhead at world size 1 against plain training (`single`), step time: {over or 'n/a'}. "
            f"Noise: the timed steps of one row spread by a median of {spread_pct:.0%} (max / min - 1); on a "
            "shared machine differences below that are not findings.", ""]),
        "Throughput T (tokens/s, all ranks), efficiency E = T(N) / (N T(1)), and peak memory per rank "
        f"({s['mem_method'].iloc[0]}; the largest rank). Model {s['model'].iloc[0]}, {_batches(s)}, grad-accum "
        f"{int(s['grad_accum'].iloc[0])}:", "", table(piv.reset_index()), ""]
    if set(s["world_size"]) == {1}:  # E(1) = 1 by definition: a plot of it carries no information
        return out + one_rank(s)
    return out + [plot_or_why(s, tag, results), ""]


def plot_or_why(s: pd.DataFrame, tag: str, results: Path) -> str:
    """The efficiency plot; a set without world-size-1 rows (one launch across nodes) has no T(1) to divide by."""
    if not s["efficiency"].notna().any():
        return ("No efficiency here: this set has no world-size-1 run to divide by (a launch across nodes "
                "measures one world size); compare its tokens/s with a single-node sweep's table.")
    png = report_plots.scaling(s[s["strategy"] != "single"], results / f"scaling_measured_{tag}.png")
    return (f"![measured scaling](results/{png.name})\n\n*What to see:* measured efficiency per strategy as ranks are "
            "added (1.0 = perfect scaling); on CPU the ranks share the cores, so the fall measures contention.")


def loss_agreement(s: pd.DataFrame) -> list[str]:
    """The last losses of every strategy at one world size and mode, which must agree; a spread above
    LOSS_AGREE is flagged, and split by the first step's loss (before any update): a difference there
    is different arithmetic, not different training."""
    spread = s.groupby(["world_size", "mode"])["loss_last"].agg(["min", "max"]).reset_index()
    spread["spread"] = spread["max"] - spread["min"]
    spread["agree"] = spread["spread"].map(lambda v: "yes" if v <= LOSS_AGREE else "**no**")
    out = ["Same tokens, same losses: every strategy at a given world size and mode trains on the same global "
           "batch, so the loss after the last step must agree (the tests check the same at 1e-5 against one "
           f"process in fp32 on CPU; here a spread above {LOSS_AGREE:g} is flagged):", "", table(spread, ".6g"), ""]
    for r in spread[spread["spread"] > LOSS_AGREE].itertuples():
        g = s[(s["world_size"] == r.world_size) & (s["mode"] == r.mode)]
        groups = g.groupby(g["loss_first"].round(6), sort=True)["strategy"].apply(list)
        within = g.groupby(g["loss_first"].round(6))["loss_last"].agg(lambda x: x.max() - x.min()).max()
        means = g.groupby(g["loss_first"].round(6))["loss_last"].mean()
        line = (f"**Flag: {r.mode} mode at {r.world_size} rank(s), the last losses spread by {r.spread:.4f}.** ")
        if len(groups) > 1:
            line += ("They differ already at the first step, before any update: "
                     + "; ".join(f"{', '.join(v)} start at {k:.6f}" for k, v in groups.items())
                     + f". Within each group the first losses agree and the last ones spread by at most {within:.4f} "
                     f"(run-to-run nondeterminism of GPU kernels over {int(g['steps'].iloc[0])} steps); between the "
                     f"groups' means by {means.max() - means.min():.4f}. " + MIXED_PRECISION)
        else:
            line += ("Their first losses agree, so the arithmetic is the same and the spread grew during training "
                     "(nondeterministic kernels); these CSVs do not say more.")
        out += [line, ""]
    return out


LOSS_AGREE = 1e-3
MIXED_PRECISION = (
    "The groups are the two ways the strategies compute in bf16 (strategies.py): single, DDP and ZeRO-1 run "
    "under torch.autocast (matmuls in bf16; norms, softmax and the loss in fp32 on fp32 weights), the FSDP2 "
    "strategies (zero2, zero3, HSDP) through MixedPrecisionPolicy(param_dtype=bf16), which casts every "
    "parameter, norm weights and embeddings included, to bf16 for the whole forward. Same data, different "
    "rounding: the losses agree only to bf16 precision, and the CPU tests (fp32) show the strategies themselves "
    "agree to 1e-5. Why the strong mode amplifies its first-step difference far more than the weak mode does "
    "is not determined by these CSVs (one 20-step run per row).")


def _cost(r: pd.Series, ref: pd.Series) -> str:
    """Step time against a reference row: median (fastest steps)."""
    return (f"{r['step_time_ms'] / ref['step_time_ms'] - 1:+.0%} "
            f"({r['step_time_min_ms'] / ref['step_time_min_ms'] - 1:+.0%})")


def one_rank(s: pd.DataFrame) -> list[str]:
    """What a sweep of one rank can and cannot show, and the per-rank cost of each wrapper it does show."""
    one = s[s["world_size"] == 1].set_index(["mode", "strategy"])
    rows = []
    for (mode, strat), r in sorted(one.iterrows(), key=lambda kv: (kv[0][0], ORDER.index(kv[0][1]))):
        vs = [_cost(r, one.loc[(mode, ref)]) if (mode, ref) in one.index and strat != ref else "–"
              for ref in ("single", "ddp")]
        ratio = (f"{r['step_time_ms'] / one.loc[('strong', strat), 'step_time_ms']:.2f}"
                 if mode == "weak" and ("strong", strat) in one.index else "–")
        rows.append([mode, strat, f"{r['step_time_ms']:.1f} ({r['step_time_min_ms']:.1f}-{r['step_time_max_ms']:.1f})",
                     *vs, ratio, f"{r['peak_mem_bytes'] / MiB:,.0f}"])
    single = one.xs("single", level="strategy")["step_time_ms"] if "single" in one.index.get_level_values(1) else None
    both = single is not None and {"weak", "strong"} <= set(single.index)
    compute = f"{single['weak'] / single['strong']:.2f}" if both else "n/a"
    noise = (s["step_time_max_ms"] / s["step_time_min_ms"] - 1).median()
    costly = [(mode, strat, r) for (mode, strat), r in one.iterrows() if (mode, "single") in one.index
              and r["step_time_ms"] / one.loc[(mode, "single"), "step_time_ms"] - 1 > noise]
    found = "; ".join(f"{strat} in {mode} mode {_cost(r, one.loc[(mode, 'single')])} vs single"
                      + (f", {_cost(r, one.loc[(mode, 'ddp')])} vs DDP" if (mode, "ddp") in one.index else "")
                      for mode, strat, r in costly)
    return ["**One rank: what it can and cannot show.** Every row here ran on one GPU, so there is nothing to "
            "communicate with and nothing to scale: E(1) = 1 by definition, and no scaling plot is drawn (it would "
            "be a row of points at 1.0). Scaling efficiency, communication cost and overlap need N >= 2 "
            "(`make fsdp-scaling-run GPU=h100 NPROC=8`). What one rank does show is each wrapper's own cost per "
            "step when its collectives run over a group of one (FSDP2's all-gathers and reduce-scatters become "
            "copies, plus its bf16 casts and sharded optimizer step), measured against plain training and DDP, "
            "and the memory of one full replica:", "",
            table(pd.DataFrame(rows, columns=["mode", "strategy", "step ms median (min-max)",
                                              "vs single: median (fastest)", "vs DDP: median (fastest)",
                                              "weak / strong step time", "peak MiB"])), "",
            (f"Measured per-rank costs above the timing noise ({noise:.0%}): {found}. " if found else
             f"No wrapper costs more than the timing noise ({noise:.0%}) at one rank. ")
            + f"The weak mode's micro-batch is half the strong mode's, so compute alone makes its step about "
            f"{compute}x as long (`single`). A wrapper whose weak step is not shorter than its strong one costs "
            "time that does not shrink with the batch: per-step work, not per-token work. These CSVs do not split "
            "that work further; the GPU profile (overlap.py) does, at N >= 2.", ""]

def _batches(s: pd.DataFrame) -> str:
    """The batch of each scaling mode the sweep ran (a sweep may run one mode only)."""
    parts = []
    if (s["mode"] == "strong").any():
        parts.append(f"strong = {int(s[s['mode'] == 'strong']['effective_batch'].iloc[0])} sequences per step in all")
    if (s["mode"] == "weak").any():
        parts.append(f"weak = {int(s[s['mode'] == 'weak']['effective_batch'].min())} per rank")
    return ", ".join(parts)
