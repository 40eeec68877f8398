"""One case through glow, then through the oracles: the outcome of a case (runs in a worker).

Glow's part comes first and its result is reported before any oracle runs, so a crash or a
hang inside onnxruntime or ``onnx.reference`` can never be charged to glow. The outcomes:

- ``refused``: glow raised a GlowError (always allowed);
- ``raw-exception``: anything else escaped glow's load, compile or run (a failure);
- ``agreed``: glow ran, both oracles ran and agreed, and glow matched them;
- ``wrong-answer``: the oracles agreed and glow returned something else (a failure);
- ``unchecked``: glow ran, but the oracles refused the model, disagreed, or could not run;
- ``not-run``: glow loaded and compiled the model, but its inputs could not be made
  (undefined element type, negative or enormous dims).

``crash`` and ``hang`` are decided by the supervisor, which sees the worker die or stall.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx

from fuzz import oracle

FAILURES = frozenset({"raw-exception", "wrong-answer", "crash", "hang"})
"""Outcomes that fail a case: glow broke one of the promises the fuzzer checks."""

_GLOW_PACKAGES = ("glow_core", "glow_interpreter", "glow_cpu", "glow_opencl")
IMPORTERS = "glow_core/frontends/"

Report = Callable[[dict[str, Any]], None]


def glow_frames(err: BaseException) -> list[str]:
    """The frames of ``err``'s traceback inside glow packages, outermost first, each as
    ``package/path.py:function`` (no line number, so a site survives unrelated edits)."""
    frames = []
    for frame in traceback.extract_tb(err.__traceback__):
        parts = Path(frame.filename).parts
        for package in _GLOW_PACKAGES:
            if package in parts:
                inner = parts[len(parts) - parts[::-1].index(package) - 1 :]
                frames.append(f"{'/'.join(inner)}:{frame.name}")
    return frames


def _error(err: BaseException) -> dict[str, Any]:
    message = str(err).splitlines()[0] if str(err) else ""
    frames = glow_frames(err)
    importing = [f for f in frames if f.startswith(IMPORTERS)]
    return {
        "type": type(err).__name__,
        "message": message[:300],
        # The site is where it was raised; ``via`` the innermost ONNX importer frame above it,
        # which owns a failure raised in the builder or a type rule on the importer's behalf.
        "site": frames[-1] if frames else "outside glow",
        "via": importing[-1] if importing else "",
        "traceback": "".join(traceback.format_exception(err))[-4000:],
    }


def backend_options(backend: str) -> dict[str, Any] | None:
    """One thread where the backend has a thread option: workers run side by side."""
    from glow_core.plugins import get_backend

    fields = type(get_backend(backend).parse_options(None)).model_fields
    return {"threads": 1} if "threads" in fields else None


def run_glow(model_bytes: bytes, backend: str, feeds: dict | None) -> tuple[dict[str, Any], Any]:
    """Glow's result (outcome and error) and its outputs (None unless it ran)."""
    import glow_core
    from glow_core.errors import GlowError

    try:
        session = glow_core.load(model_bytes, backend=backend, options=backend_options(backend))
        if feeds is None:
            return {"outcome": "not-run"}, None
        outputs = session.run(feeds)
    except GlowError as err:
        return {"outcome": "refused", "error": _error(err)}, None
    except (Exception, RecursionError, MemoryError) as err:  # what the fuzzer hunts
        return {"outcome": "raw-exception", "error": _error(err)}, None
    return {"outcome": "ran"}, outputs


def check_case(model_bytes: bytes, backend: str, feeds_seed: int, report: Report) -> dict[str, Any]:
    """Run one model; ``report`` gets progress events, the returned dict is the final result."""
    try:
        model = onnx.load_from_string(model_bytes)
        feeds, why_not = oracle.make_feeds(model, feeds_seed)
    except Exception as err:  # unparsable bytes: glow must refuse them too
        model, feeds, why_not = None, None, f"the model does not parse: {type(err).__name__}"
    report({"event": "stage", "stage": "glow"})
    glow, outputs = run_glow(model_bytes, backend, feeds)
    if glow["outcome"] == "not-run":
        glow["note"] = why_not
    report({"event": "glow", **glow})
    if glow["outcome"] != "ran":
        return glow
    report({"event": "stage", "stage": "oracle"})
    return {**glow, **_judge(model_bytes, feeds or {}, outputs)}


def _judge(model_bytes: bytes, feeds: dict, outputs: Any) -> dict[str, Any]:
    """``agreed``, ``wrong-answer`` or ``unchecked`` (with why) for glow's ``outputs``."""
    expected = {}
    for name, run in (
        ("onnxruntime", oracle.onnxruntime_outputs),
        ("onnx.reference", oracle.reference_outputs),
    ):
        try:
            expected[name] = run(model_bytes, feeds)
        except Exception as err:  # an oracle refusing a mutant is expected
            return {"outcome": "unchecked", "note": f"{name} refused: {type(err).__name__}"}
    split = oracle.disagreement(expected["onnx.reference"], expected["onnxruntime"])
    if split is not None:
        return {"outcome": "unchecked", "note": f"oracles disagree: {split}"}
    wrong = oracle.disagreement(outputs, expected["onnxruntime"])
    if wrong is not None:
        return {
            "outcome": "wrong-answer",
            "note": wrong,
            "error": _wrong_site(model_bytes, outputs, expected),
        }
    return {"outcome": "agreed"}


def _wrong_site(model_bytes: bytes, outputs: Any, expected: dict[str, Any]) -> dict[str, Any]:
    """Where a wrong answer comes from, as a failure site: the op type of the node computing
    the first wrong output (``onnx:Abs``), so that distinct wrong answers are grouped, and
    minimized, apart; the graph is cut after that node and the site stays the same."""
    first = next(
        (
            name
            for name in expected["onnxruntime"]
            if oracle.disagreement({name: outputs.get(name)}, {name: expected["onnxruntime"][name]})
            is not None
        ),
        "",
    )
    graph = onnx.load_from_string(model_bytes).graph
    producer = next((n.op_type for n in graph.node if first in n.output), "input")
    return {"type": "", "message": "", "site": f"onnx:{producer}", "via": "", "traceback": ""}
