"""SGLang's new_token_ratio on its way down (pinned: SGLang 0.5.23, `srt/managers/scheduler.py`; S5): one
subtraction of the decay per decode step, to a floor; the path from the initial ratio made once per scheduler, so
that the fast path's decode steps are looked up, not subtracted one by one (the same floats)."""

from __future__ import annotations

from servesim.engines.sglang.server_args import SGLangConfig


def decayed(ratio: float, times: int, decay_path: tuple) -> float:
    """`times` decode steps' decay (one subtraction each, as SGLang makes them: the same floats). A ratio on the
    path down from the initial one (the usual case: it starts there and goes back there when idle) is looked
    up on that path, made once."""
    if not times:
        return ratio
    path, where, decay, low = decay_path
    i = where.get(ratio)
    if i is not None:
        return path[min(i + times, len(path) - 1)]
    for _ in range(times):
        if ratio <= low:  # at the floor it stays
            return low
        ratio = max(ratio - decay, low)
    return ratio


def decay_path(sg: SGLangConfig) -> tuple[list[float], dict[float, int], float, float]:
    """The ratios from the initial one down to the floor, one decode step apart, each one's position (the
    first), and the decay and floor."""
    init, decay, low = sg.ratio_init, sg.ratio_decay, sg.ratio_min
    if init <= low or decay <= 0:  # (then the step-by-step loop decides)
        return [init], {}, decay, low
    path, ratio = [init], init
    while ratio > low and len(path) < 1_000_000:
        ratio = max(ratio - decay, low)
        path.append(ratio)
    if path[-1] > low:  # (too slow a decay to list)
        return path, {}, decay, low
    where: dict[float, int] = {}
    for i, r in enumerate(path):
        where.setdefault(r, i)
    return path, where, decay, low
