"""Shrinking a failing recipe while it keeps failing the same way (same ``Result.signature``).

Two reductions, each replayed in a worker like any case: drop the recipe's steps one at a
time (mutations, byte damage), then cut the graph after as few nodes as still fail
(``spec.truncate``, by bisection: a failure caused at node k usually needs nodes 1..k only).
Every candidate costs one case run, so the number of tries is capped; a hang costs its
timeout per try, so hangs get fewer.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import onnx

from fuzz.spec import Recipe
from fuzz.supervisor import Result, Supervisor

MAX_TRIES = 24
MAX_TRIES_HANG = 4


def minimize(supervisor: Supervisor, failure: Result) -> Result:
    """The smallest failing variant of ``failure`` found within the try budget."""
    tries = MAX_TRIES_HANG if failure.outcome == "hang" else MAX_TRIES
    best = failure

    def attempt(candidate: Recipe) -> bool:
        nonlocal best, tries
        if tries <= 0:
            return False
        tries -= 1
        [result] = supervisor.run([candidate])
        if result.signature == failure.signature:
            best = result
            return True
        return False

    if best.recipe["bytes"] is not None:
        attempt({**best.recipe, "bytes": None})
    index = 0
    while index < len(best.recipe["mutations"]):
        steps = best.recipe["mutations"]
        if not attempt({**best.recipe, "mutations": steps[:index] + steps[index + 1 :]}):
            index += 1
    if best.recipe["bytes"] is None:
        _bisect_truncation(best, attempt)
    return best


def _bisect_truncation(failure: Result, attempt: Callable[[Recipe], bool]) -> None:
    """Try keeping fewer nodes: the smallest count that still fails, assuming that keeping
    more nodes than a failing count fails too."""
    try:
        count = len(onnx.load_from_string(failure.model).graph.node)
    except Exception:  # an unparsable model has no nodes to cut
        return
    low, high = 1, count - 1
    while low <= high:
        middle = (low + high) // 2
        if attempt(copy.deepcopy({**failure.recipe, "truncate": middle})):
            high = middle - 1
        else:
            low = middle + 1
