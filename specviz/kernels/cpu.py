"""What this CPU can run: its instruction-set flags, its last-level cache, and which path of our kernel it takes."""

from __future__ import annotations

import functools
import os
from pathlib import Path

CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")
PATH_SWITCH = "SPECVIZ_KERNEL_ISA"  # "avx2" forces the AVX2 path on an AVX-512 machine (tests and benchmarks use it)


@functools.cache
def flags() -> frozenset[str]:
    """The CPU's flags (/proc/cpuinfo); empty where the OS does not say."""
    try:
        line = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return frozenset()
    return frozenset(line.split(":", 1)[1].split())


def model_name() -> str:
    """The CPU's model name (/proc/cpuinfo), or "" where the OS does not say."""
    try:
        line = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        return ""
    return line.split(":", 1)[1].strip()


def isa() -> str:
    """The widest x86 vector set this CPU has, as a practitioner names it: "AMX", "AVX-512", "AVX2" or "none"."""
    found = flags()
    if "amx_tile" in found:
        return "AMX"
    if "avx512f" in found:
        return "AVX-512"
    return "AVX2" if "avx2" in found else "none"


AVX512_PATH = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512_vnni", "f16c", "fma"})
AVX2_PATH = frozenset({"avx2", "fma", "f16c"})


def kernel_path() -> tuple[str | None, str]:
    """Which path of the w4a8 kernel this process takes ("avx512" or "avx2", None where neither runs) and why, in
    one phrase. $SPECVIZ_KERNEL_ISA=avx2 (or torch told to run its AVX2 kernels, ATEN_CPU_CAPABILITY=avx2) forces
    the AVX2 path on an AVX-512 machine."""
    found = flags()
    forced = os.environ.get(PATH_SWITCH, "").strip().lower() or None
    if forced is None and os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower() in ("avx2", "default"):
        forced = "avx2"
    if forced not in (None, "avx2", "avx512"):
        return None, f"${PATH_SWITCH}={forced!r} is not a path of the kernel (avx512 or avx2)"
    if forced != "avx2" and AVX512_PATH <= found:
        return "avx512", "the CPU has AVX-512 VNNI"
    if forced == "avx512":
        return None, f"${PATH_SWITCH}=avx512 asks for AVX-512 VNNI, which this CPU lacks"
    if AVX2_PATH <= found:
        why = (
            f"${PATH_SWITCH}=avx2 forces it"
            if forced == "avx2" and AVX512_PATH <= found
            else "the CPU has AVX2 and no AVX-512 VNNI"
        )
        return "avx2", why + (", with AVX-VNNI" if "avx_vnni" in found else "")
    return None, "the CPU has neither AVX-512 VNNI nor AVX2 with FMA and F16C"


def has_avx_vnni() -> bool:
    """AVX-VNNI (the 256-bit VPDPBUSD of Alder Lake and Zen 5): the AVX2 path uses it where present."""
    return "avx_vnni" in flags()


def last_level_cache_bytes(caches: Path = CPU_CACHES) -> int | None:
    """The largest cache CPU 0 sees (its L3 on the machines we run on), in bytes; None where the OS does not say."""
    sizes = []
    for index in sorted(caches.glob("index*")):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        number, unit = (text[:-1], text[-1]) if text[-1:].upper() in units else (text, "")
        if number.isdigit():
            sizes.append(int(number) * units.get(unit.upper(), 1))
    return max(sizes) if sizes else None
