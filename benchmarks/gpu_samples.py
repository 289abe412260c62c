"""The files benchmarks/gpu_sampler.sh writes: one nvidia-smi sample per line, "MHz, W" or
"MHz, W, reasons" (clocks_event_reasons.active, a hex bitmask), every 100 ms.

read(path) -> [(mhz, watts, reasons or None), ...]: the lines that parse; others (an "[N/A]",
  a line cut short by the sampler's kill) are left out.
busy(samples, limit_w) -> the samples at or above half the power limit (the GPU at work; all of
  them when limit_w is 0 or None).
summary(samples) -> {"samples", "sm_mhz" (mean), "sm_mhz_min", "sm_mhz_max", "watts" (mean),
  "power_capped", "other_slowdown"} or None without samples: the last two are the shares (0-1) of
  the samples whose reasons hold bit 0x4 (SW power cap: the clock lowered to keep the board at its
  power limit) and any of 0x8, 0x20, 0x40, 0x80 (HW slowdown, SW and HW thermal, HW power brake);
  None where the driver gave no reasons. Bits from nvml.h (nvmlClocksEventReason*)."""

SW_POWER_CAP = 0x4
OTHER_SLOWDOWN = 0x8 | 0x20 | 0x40 | 0x80


def read(path):
    out = []
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return out
    for line in lines:
        p = [x.strip() for x in line.split(",")]
        if len(p) not in (2, 3):
            continue
        try:
            mhz, w = float(p[0]), float(p[1])
            reasons = int(p[2], 16) if len(p) == 3 else None
        except ValueError:
            continue
        out.append((mhz, w, reasons))
    return out


def busy(samples, limit_w):
    return [s for s in samples if s[1] >= limit_w / 2] if limit_w else list(samples)


def summary(samples):
    if not samples:
        return None
    mhz = [s[0] for s in samples]
    w = [s[1] for s in samples]
    rs = [s[2] for s in samples if s[2] is not None]
    return {"samples": len(samples), "sm_mhz": sum(mhz) / len(mhz), "sm_mhz_min": min(mhz),
            "sm_mhz_max": max(mhz), "watts": sum(w) / len(w),
            "power_capped": sum(1 for r in rs if r & SW_POWER_CAP) / len(rs) if rs else None,
            "other_slowdown": sum(1 for r in rs if r & OTHER_SLOWDOWN) / len(rs) if rs else None}


def share(x):
    """A share for a table: "93%", or "-" for None."""
    return "-" if x is None else f"{100 * x:.0f}%"
