"""Bounded searches for the inverse questions: the largest batch or sequence that still fits,
the fewest pipeline stages that fit.

Memory grows monotonically with batch size and sequence length, so a doubling phase followed by
a bisection finds the boundary in O(log n) estimates; every search is capped in steps so no
request can trigger an unbounded computation, and checks before each evaluation whether its
work was cancelled (service/estimator/cancel.py: a deadline passed, the client left), so a
search of costly setups stops within one evaluation.
"""

from __future__ import annotations

from collections.abc import Callable

from service.estimator.cancel import checkpoint

# Each search evaluates the predicate at most this many times (2 × log2(10^9) < 64).
MAX_SEARCH_STEPS = 64


def _checked(predicate: Callable[[int], bool]) -> Callable[[int], bool]:
    def evaluate(n: int) -> bool:
        checkpoint()
        return predicate(n)

    return evaluate


def largest_true(predicate: Callable[[int], bool], lo: int, hi: int) -> int | None:
    """The largest n in [lo, hi] with predicate(n) true, assuming it is true up to a point.

    Returns None when predicate(lo) is false. Exponential probing from `lo` first, so small
    answers (the common case) cost few evaluations, then bisection.
    """
    predicate = _checked(predicate)
    if lo > hi or not predicate(lo):
        return None
    steps = 1
    good, step = lo, 1
    bad: int | None = None
    # Probe lo+1, lo+2, lo+4, ... until the predicate fails or hi is passed.
    while steps < MAX_SEARCH_STEPS:
        probe = min(lo + step, hi)
        steps += 1
        if predicate(probe):
            good = probe
            if probe == hi:
                return hi
            step *= 2
        else:
            bad = probe
            break
    if bad is None:
        return good
    return _bisect(predicate, good, bad, steps)


def smallest_true(
    predicate: Callable[[int], bool], lo: int, hi: int, *, monotone: bool = True
) -> int | None:
    """The smallest n in [lo, hi] with predicate(n) true, or None.

    Checked at ``lo`` first (the common answer). ``monotone``: true from some point on, so
    one check at ``hi`` tells whether any n is, then a bisection. Otherwise the predicate may
    turn false again above the answer: doubling from ``lo`` up to ``hi`` finds a true point
    (a true stretch narrower than one doubling can be stepped over), then a bisection between
    it and the last false one. Capped at :data:`MAX_SEARCH_STEPS` evaluations.
    """
    predicate = _checked(predicate)
    if lo > hi:
        return None
    if predicate(lo):
        return lo
    steps = 1
    bad, good = lo, None
    if monotone:
        if lo < hi:
            steps += 1
            if predicate(hi):
                good = hi
    else:
        while good is None and bad < hi and steps < MAX_SEARCH_STEPS:
            probe = min(hi, bad * 2)
            steps += 1
            if predicate(probe):
                good = probe
            else:
                bad = probe
    if good is None:
        return None
    return _bisect(predicate, good, bad, steps)


def _bisect(predicate: Callable[[int], bool], good: int, bad: int, steps: int) -> int:
    """Narrow ``good`` (predicate true) and ``bad`` (false) to neighbours, on either side of
    each other, within what is left of :data:`MAX_SEARCH_STEPS` after ``steps``; the last
    true point found."""
    while abs(good - bad) > 1 and steps < MAX_SEARCH_STEPS:
        mid = (good + bad) // 2
        steps += 1
        if predicate(mid):
            good = mid
        else:
            bad = mid
    return good
