"""Which GPU architectures the installed faiss can run on; fails the CUDA image's build unless they
cover the GPUs vsbench targets.

Why: a CUDA library runs on a GPU only if it holds machine code (SASS) for that GPU's architecture
family, or PTX of an architecture at most the GPU's, which the driver compiles at load. faiss-gpu-cu12
1.14.1 held SASS for sm_70 and sm_80 only and no PTX: imported fine, built fine, and failed every
search on an H100 (sm_90) with "no kernel image is available". Nothing short of a GPU showed it, so
this reads the kernels' architectures from the library files themselves, on any machine.

    python images/cuda_check.py                 # the installed faiss, must cover sm_80 and sm_90
    python images/cuda_check.py --require 80,90,100 path/to/libfaiss.so

Standard library only: it runs in the image before anything else is trusted.
"""

from __future__ import annotations

import argparse
import struct
import sys
from collections.abc import Iterable
from pathlib import Path

FATBIN_MAGIC = struct.pack("<I", 0xBA55ED50)  # the header of each embedded CUDA fat binary
KINDS = {1: "ptx", 2: "sass"}
REQUIRED = (80, 90)  # A100, H100/H200: the GPU nodes vsbench's pipelines ask for


def fatbin_archs(data: bytes) -> set[tuple[str, int]]:
    """``{("sass" | "ptx", sm)}`` of every entry of every fat binary in ``data`` (a shared library).

    A fat binary: magic, u16 version, u16 header size, u64 size; then entries, each with u16 kind
    (1 PTX, 2 ELF/SASS), u16 version, u32 header size, u64 padded payload size, ... u32 sm at offset 28."""
    found: set[tuple[str, int]] = set()
    start = data.find(FATBIN_MAGIC)
    while start >= 0:
        header_size, = struct.unpack_from("<H", data, start + 6)
        size, = struct.unpack_from("<Q", data, start + 8)
        entry, end = start + header_size, min(start + header_size + size, len(data))
        while entry + 32 <= end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
            sm, = struct.unpack_from("<I", data, entry + 28)
            if kind in KINDS:
                found.add((KINDS[kind], sm))
            if entry_header == 0:
                break
            entry += entry_header + payload
        start = data.find(FATBIN_MAGIC, start + 4)
    return found


def runs_on(archs: set[tuple[str, int]], sm: int) -> bool:
    """SASS of the same major architecture at most ``sm`` (sm_80 code runs on sm_86, never on sm_90),
    or PTX of an architecture at most ``sm`` (compiled by the driver)."""
    return any(kind == "sass" and a // 10 == sm // 10 and a <= sm for kind, a in archs) or \
        any(kind == "ptx" and a <= sm for kind, a in archs)


def faiss_libraries() -> list[Path]:
    """The shared libraries of the installed faiss (``faiss/*.so`` and the wheel's ``*.libs``)."""
    import faiss  # noqa: PLC0415 - only this function needs it

    package = Path(faiss.__file__).parent
    return sorted({*package.glob("*.so*"), *package.parent.glob("faiss*.libs/*.so*")})


def check(paths: Iterable[Path], required: Iterable[int]) -> list[str]:
    """One line per required architecture that no kernel of ``paths`` runs on (empty: all covered)."""
    archs: set[tuple[str, int]] = set()
    for path in paths:
        archs |= fatbin_archs(Path(path).read_bytes())
    listed = ", ".join(f"{kind} sm_{sm}" for kind, sm in sorted(archs, key=lambda a: (a[1], a[0]))) or "none"
    return [f"no GPU code for sm_{sm} (found: {listed})" for sm in required if not runs_on(archs, sm)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="shared libraries (default: the installed faiss's)")
    parser.add_argument("--require", default=",".join(map(str, REQUIRED)),
                        help="compute capabilities that must run, e.g. 80,90 (default: %(default)s)")
    args = parser.parse_args(argv)
    paths = args.paths or faiss_libraries()
    problems = check(paths, [int(x) for x in args.require.split(",") if x.strip()])
    for problem in problems:
        print(f"cuda_check: faiss: {problem}", file=sys.stderr)
    if not problems:
        print(f"cuda_check: faiss runs on sm_{', sm_'.join(args.require.split(','))} ({len(paths)} libraries)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
