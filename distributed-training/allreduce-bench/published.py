"""Published collective bandwidths to set beside ours, only where the hardware and rank count match.

Every figure is a large-message busbw in GB/s (1e9 B/s) from nccl-tests or an equivalent
torch.distributed benchmark, with its source, as collected in ../shared/reference/allreduce-anchors.md
sections 3.2-3.4. The report shows a row only next to one of our runs on the same preset (common.hardware)
with the same number of ranks on one node: a number measured on other hardware is not a reference.
"""

from __future__ import annotations

from typing import NamedTuple


class Published(NamedTuple):
    preset: str  # common.hardware preset name
    collective: str
    ranks: int  # GPUs, all on one node
    busbw_GBps: float
    setting: str
    source: str


GTC24 = "NVIDIA GTC24 S62129 slide 'NCCL Tests Allreduce Bus Bandwidth', reproduced in stas00/ml-engineering"
GTC25 = "NVIDIA GTC25 S72583 slide, reproduced in stas00/ml-engineering network/README.md"
MLENG = "stas00/ml-engineering network/README.md (8xH200, nccl-tests -z 1, 16 GiB)"

PUBLISHED: tuple[Published, ...] = (
    Published("a100", "all_reduce", 8, 232.0, "NVLink3, ring", GTC24),
    Published("a100-40gb", "all_reduce", 8, 232.0, "NVLink3, ring", GTC24),
    Published("h100", "all_reduce", 8, 370.0, "NVLink4, ring (NVLS off)", GTC24 + "; nccl-tests issue #212"),
    Published("h100", "all_reduce", 8, 480.0, "NVLink4 SHARP (NVLS, NCCL's default)", GTC24 + "; nccl-tests #212"),
    Published("h200", "all_reduce", 8, 367.2, "ring (NVLS off)", MLENG),
    Published("h200", "all_reduce", 8, 480.0, "NVLS", MLENG),
    Published("h200", "all_gather", 8, 361.4, "default", MLENG),
    Published("h200", "reduce_scatter", 8, 362.9, "default", MLENG),
    Published("b200", "all_reduce", 8, 700.0, "NVLink5, ring", GTC25),
    Published("b200", "all_reduce", 8, 850.0, "NVLink5 SHARP", GTC25),
)


def matching(preset: str, collective: str, ranks: int, nnodes: int) -> list[Published]:
    """The published figures for exactly this hardware, collective and single-node rank count."""
    if nnodes != 1:
        return []
    return [p for p in PUBLISHED if (p.preset, p.collective, p.ranks) == (preset, collective, ranks)]
