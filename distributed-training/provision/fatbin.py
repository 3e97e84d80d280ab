"""A CUDA library reduced to the GPU architectures one node has: the offline kit's TransformerEngine core.

TransformerEngine's core wheel (`transformer_engine_cu13`, 276 MB) carries its kernels compiled for every
architecture from sm_75 to sm_120 in one shared library. A node with one kind of GPU runs one of them: for an
H100 or H200 only the sm_90 code (about 18 MB of 264 MB). This module keeps those and blanks the rest, so the
wheel compresses to what a 64 MiB carry to a lent node allows.

Where the code lives. nvcc puts device code in the ELF section `.nv_fatbin`: a run of fat binaries, one per
translation unit, each a 16-byte header and a list of entries (one per architecture: an ELF "cubin" or PTX),
each entry a header and a payload. The host code registers each fat binary by its start address
(`__cudaRegisterFatBinary`, pointers in `.nvFatBinSegment`), and the driver reads the header's size and picks
the best entry for the GPU it runs on. So entries can be removed inside a fat binary without moving any fat
binary: the kept entries slide to the front, the header's size shrinks, and the freed tail is zeroed. No
address, relocation or symbol changes, and the file keeps its size (zeros compress to nothing).

Layout, as read from the files (NVIDIA documents no format; `cuobjdump --list-elf` on the result is the check):
    fat binary header    u32 magic 0xBA55ED50, u16 version, u16 header size, u64 size of the entries
    entry header         u16 kind (1 PTX, 2 ELF), u16, u32 header size, u64 payload size, ..., u32 arch at 28
                         (75, 80, 89, 90, 100, ...; sm_90a and sm_90 both read 90)

    python -m provision.fatbin list libtransformer_engine.so          # architectures and bytes
    python -m provision.fatbin prune libtransformer_engine.so --keep 90
"""

from __future__ import annotations

import argparse
import struct
import sys
from collections import Counter
from pathlib import Path
from typing import NamedTuple

MAGIC = 0xBA55ED50
HEADER = struct.Struct("<IHHQ")  # magic, version, header size, size of the entries that follow
ENTRY = struct.Struct("<HHIQ")  # kind, unknown, header size, payload size
ARCH_OFFSET = 28
KINDS = {1: "ptx", 2: "elf"}


class FatbinError(ValueError):
    pass


class Entry(NamedTuple):
    start: int  # offset in the section
    length: int  # header and payload
    kind: str
    arch: int


class Fatbin(NamedTuple):
    start: int
    header_size: int
    end: int
    entries: tuple[Entry, ...]


def section(data: bytes | bytearray, name: bytes = b".nv_fatbin") -> tuple[int, int] | None:
    """(file offset, size) of an ELF64 little-endian section, or None when the file has none."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise FatbinError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    names_off, = struct.unpack_from("<Q", data, shoff + shstrndx * shentsize + 0x18)
    for i in range(shnum):
        base = shoff + i * shentsize
        name_at, = struct.unpack_from("<I", data, base)
        end = data.index(b"\0", names_off + name_at)
        if bytes(data[names_off + name_at:end]) == name:
            off, size = struct.unpack_from("<QQ", data, base + 0x18)
            return off, size
    return None


def parse(sec: bytes | bytearray) -> list[Fatbin]:
    """Every fat binary of a `.nv_fatbin` section, in order (alignment padding between them skipped)."""
    out, pos = [], 0
    while pos + HEADER.size <= len(sec):
        magic, _, hsize, size = HEADER.unpack_from(sec, pos)
        if magic != MAGIC:
            pos += 8  # fat binaries start 8-aligned; anything else is padding
            continue
        entries, e, end = [], pos + hsize, pos + hsize + size
        while e < end:
            kind, _, ehsize, psize = ENTRY.unpack_from(sec, e)
            arch, = struct.unpack_from("<I", sec, e + ARCH_OFFSET)
            entries.append(Entry(e, ehsize + psize, KINDS.get(kind, str(kind)), arch))
            e += ehsize + psize
        if e != end:
            raise FatbinError(f"fat binary at {pos:#x}: its entries end at {e:#x}, its header says {end:#x}")
        out.append(Fatbin(pos, hsize, end, tuple(entries)))
        pos = end
    return out


def inventory(fatbins: list[Fatbin]) -> Counter:
    """Payload bytes per (kind, arch)."""
    c: Counter = Counter()
    for fb in fatbins:
        for e in fb.entries:
            c[(e.kind, e.arch)] += e.length
    return c


def prune_section(sec: bytearray, keep: set[int]) -> tuple[int, int]:
    """Keep only the entries for `keep` architectures, in place; (bytes freed, fat binaries left whole).

    A fat binary with no entry for `keep` is left as it is (blanking it would leave the library without that
    code even where it is asked for); so is one whose kept entries would lose their 8-byte alignment.
    """
    freed, whole = 0, 0
    for fb in parse(sec):
        kept = [e for e in fb.entries if e.arch in keep]
        if not kept or any(e.length % 8 for e in fb.entries):
            whole += 1
            continue
        body = b"".join(bytes(sec[e.start:e.start + e.length]) for e in kept)
        head = bytearray(sec[fb.start:fb.start + fb.header_size])
        struct.pack_into("<Q", head, 8, len(body))
        new = bytes(head) + body
        sec[fb.start:fb.end] = new + bytes(fb.end - fb.start - len(new))
        freed += fb.end - fb.start - len(new)
    return freed, whole


def prune_file(data: bytes, keep: set[int]) -> tuple[bytes, int, int]:
    """An ELF file's bytes with its device code reduced to `keep`; (new bytes, bytes freed, fat binaries whole)."""
    where = section(data)
    if where is None:
        return data, 0, 0
    off, size = where
    out = bytearray(data)
    sec = bytearray(out[off:off + size])
    freed, whole = prune_section(sec, keep)
    out[off:off + size] = sec
    return bytes(out), freed, whole


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fatbin", description=__doc__.split("\n\n")[0])
    ap.add_argument("cmd", choices=("list", "prune"))
    ap.add_argument("library", type=Path)
    ap.add_argument("--keep", default="90", help="architectures to keep, e.g. 90 or 90,100")
    args = ap.parse_args(argv)
    try:
        data = args.library.read_bytes()
        if args.cmd == "list":
            where = section(data)
            fatbins = parse(data[where[0]:where[0] + where[1]]) if where else []
            for (kind, arch), n in sorted(inventory(fatbins).items()):
                print(f"{kind} sm_{arch}: {n / 1e6:8.1f} MB")
            return 0
        keep = {int(a) for a in args.keep.split(",")}
        new, freed, whole = prune_file(data, keep)
        args.library.write_bytes(new)
        print(f"{args.library.name}: kept sm_{','.join(map(str, sorted(keep)))}, blanked {freed / 1e6:.1f} MB"
              + (f"; {whole} fat binaries left whole" if whole else ""))
    except (OSError, FatbinError, ValueError, struct.error) as e:
        print(f"fatbin: error: {args.library}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
