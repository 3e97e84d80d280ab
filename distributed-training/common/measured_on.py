"""What was measured where: the paragraph near the top of every report, generated from its CSVs.

A report must never say in hand-written prose which results exist ("no GPU run yet" outlives the first
GPU run). This reads the provenance columns every result row carries (common/results.py: hardware,
backend, world size, nodes, torch, commit, time) and lists, per machine, the files, world sizes, nodes,
versions, commits and dates: GPU results first, then CPU runs, then models (fake process groups,
projections). Where no GPU result exists it says so and names the command that makes one; where every
GPU row is from a single GPU it says that no multi-GPU result exists yet.

    lines = measured_on.paragraph(results, ["bench_*.csv", "correctness_*.csv"], "`make tp-attention-gpu`")
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, NamedTuple

from .csvread import Schema, read_rows

KINDS = {"nccl": "GPU", "gloo": "CPU"}  # any other backend (fake, model) is a model, not a machine measured
_PROVENANCE = Schema("result", {"hardware": str, "backend": str}, allow_empty=True)


class Source(NamedTuple):
    """The rows of one machine (hardware + backend) across a report's files."""
    hardware: str
    backend: str
    files: tuple[str, ...]
    world_sizes: tuple[int, ...]
    nnodes: tuple[int, ...]
    torch_versions: tuple[str, ...]
    commits: tuple[str, ...]
    days: tuple[str, ...]  # UTC dates, first and last

    @property
    def kind(self) -> str:
        return KINDS.get(self.backend, "model")

    def describe(self) -> str:
        ranks = ", ".join(map(str, self.world_sizes))
        nodes = ", ".join(map(str, self.nnodes))
        where = [self.backend]
        if self.world_sizes and self.kind != "model":  # a model's "rank" is one of a world it only simulates
            where.append(f"{ranks} rank{'s' if self.world_sizes != (1,) else ''}")
        if self.nnodes and self.nnodes != (1,):
            where.append(f"{nodes} nodes")
        if self.torch_versions:
            where.append("torch " + ", ".join(self.torch_versions))
        if self.commits:
            where.append(_few("commit", self.commits))
        if self.days:
            where.append(" to ".join(dict.fromkeys(self.days)))
        return f"{self.hardware} ({'; '.join(where)}): " + ", ".join(f"`{f}`" for f in self.files)


def _few(label: str, items: tuple[str, ...], n: int = 3) -> str:
    shown = ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")
    return f"{label}{'s' if len(items) > 1 else ''} {shown}"


def _ints(values: Iterable[str]) -> tuple[int, ...]:
    out = set()
    for v in values:
        try:
            out.add(int(float(v)))
        except (TypeError, ValueError):  # a model's row has no world size
            pass
    return tuple(sorted(out))


def sources(results: Path, patterns: Iterable[str]) -> list[Source]:
    """One Source per (hardware, backend) over every file matching `patterns` in `results`, GPUs first."""
    groups: dict[tuple[str, str], list[tuple[str, dict]]] = {}
    files = sorted({p for pattern in patterns for p in Path(results).glob(pattern)})
    for path in files:
        for row in read_rows(path, _PROVENANCE):
            groups.setdefault((row["hardware"], row["backend"]), []).append((path.name, row))
    out = []
    for (hardware, backend), rows in groups.items():
        col = lambda k: [r.get(k) or "" for _, r in rows]  # noqa: E731
        days = sorted(d[:10] for d in col("timestamp_utc") if d)
        out.append(Source(hardware, backend, tuple(dict.fromkeys(f for f, _ in rows)), _ints(col("world_size")),
                          _ints(col("nnodes")), tuple(sorted(set(filter(None, col("torch_version"))))),
                          tuple(dict.fromkeys(c[:12] for c in col("git_commit") if c)),
                          (days[0], days[-1]) if days else ()))
    order = {"GPU": 0, "CPU": 1, "model": 2}
    return sorted(out, key=lambda s: (order[s.kind], s.hardware))


def paragraph(results: Path, patterns: Iterable[str], gpu_command: str) -> list[str]:
    """Markdown lines: what this report's CSVs were measured on, GPU results first; what is missing.
    gpu_command: markdown naming the command(s) that make GPU results, e.g. "`make tp-attention-gpu`"."""
    srcs = sources(results, patterns)
    gpu = [s for s in srcs if s.kind == "GPU"]
    lines = ["**What was measured where** (generated from the result files' provenance columns):", ""]
    lines += [f"- {s.kind}: {s.describe()}" for s in srcs]
    if not gpu:
        lines.append(f"- GPU: no result is committed yet; {gpu_command} on a GPU node makes them.")
    elif all(s.world_sizes == (1,) for s in gpu):
        lines.append("- Multi-GPU: no result yet; every GPU row here is from a single GPU.")
    elif all(s.nnodes in ((), (1,)) for s in gpu):
        lines.append("- Multi-node: no GPU result across nodes yet.")
    return lines + [""]
