"""The compile pipeline as data: named steps, ``Repeat`` groups and named ``Group``\\s.

A pipeline is read in one place and edited like a list (a backend inserts its own step after
lowering, or drops one): nothing is called by hand. Every leaf names a step; a step declares
the ``Level`` it needs and the one it leaves behind (IRGen turns a scheduled graph into IR),
so an order that would run a graph pass on IR, or plan memory before IRGen, is refused before
anything runs. Steps marked ``required`` (lowering, the support check, the level changes)
cannot be dropped: a backend reorders and extends, it does not skip the contract.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from glow_core.errors import GlowError

T = TypeVar("T")


def register_once(table: dict[str, T], name: str, value: T, what: str) -> None:
    """Put ``value`` in ``table`` under ``name``; a name given twice is a programming error
    (two passes, steps or mutations would answer to one name), refused at import."""
    if name in table:
        raise TypeError(f"{what} {name!r} registered twice")
    table[name] = value


def registrar(table: dict[str, T], what: str) -> Callable[[str], Callable[[T], T]]:
    """The decorator ``@register(name)`` that puts a function in ``table`` (``register_once``):
    graph passes, IR passes and the fuzzer's mutations are registered this one way."""

    def by_name(name: str) -> Callable[[T], T]:
        def register(fn: T) -> T:
            register_once(table, name, fn, what)
            return fn

        return register

    return by_name


def doc_line(fn: Callable[..., Any]) -> str:
    """The first line of ``fn``'s docstring: what ``glow dump --list-steps`` says of a step."""
    doc = (fn.__doc__ or "").strip().splitlines()
    return doc[0] if doc else ""


class Level(enum.Enum):
    """What a compilation holds when a step runs, in pipeline order."""

    SOURCE = "source"  # a model not imported yet
    GRAPH = "graph"  # a Function of nodes, free to rewrite
    SCHEDULED = "scheduled"  # the graph plus a node order: rewriting it now would stale the order
    IR = "ir"  # the instruction IR
    PLANNED = "planned"  # the IR with its memory plan: moving instructions would stale the plan
    CODE = "code"  # the backend's CompiledFunction


StepFn = Callable[[Any], bool]
"""A step's body: (the Compilation) -> whether it changed anything."""


@dataclass(frozen=True)
class Step:
    """One named step: its body, the levels it needs and gives, and what must precede it."""

    name: str
    run: StepFn = field(repr=False, compare=False)
    needs: Level = Level.GRAPH
    gives: Level | None = None
    """The level afterwards (None: the same as ``needs``)."""
    doc: str = ""
    required: bool = False
    """A pipeline without this step is refused (a backend may move it, never drop it)."""
    after: tuple[str, ...] = ()
    """Steps that must run before this one whenever the pipeline has them."""

    @property
    def result_level(self) -> Level:
        return self.gives or self.needs


@dataclass(frozen=True)
class Repeat:
    """Run ``steps`` again and again until none changes anything (at most ``limit`` rounds)."""

    steps: tuple[Item, ...]
    limit: int = 10

    def __init__(self, *steps: Item, limit: int = 10):
        object.__setattr__(self, "steps", steps)
        object.__setattr__(self, "limit", limit)


@dataclass(frozen=True)
class Group:
    """A named run of steps: timed and dumpable as one (``--after optimize``).

    ``when`` names a step: the group runs only if that step's last run changed something
    (re-optimize after the backend's post-lowering rewrite, and only then).
    """

    name: str
    steps: tuple[Item, ...]
    when: str | None = None

    def __init__(self, name: str, *steps: Item, when: str | None = None):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "steps", steps)
        object.__setattr__(self, "when", when)


Item = str | Step | Repeat | Group
"""A pipeline entry: a registered step's name, a Step, a Repeat or a Group."""


def item_name(item: Item) -> str:
    """The name a path uses for ``item`` (a Repeat is transparent: its steps keep theirs)."""
    if isinstance(item, str):
        return item
    if isinstance(item, Step | Group):
        return item.name
    return "repeat"


@dataclass(frozen=True)
class Pipeline:
    """An ordered tuple of steps, Repeat groups and named Groups.

    Paths name an entry through its groups (``lower/optimize-lowered/cse``); a Repeat adds
    no path segment. Editing returns a new Pipeline, the default is never changed in place.
    """

    steps: tuple[Item, ...]

    def __init__(self, *steps: Item):
        object.__setattr__(self, "steps", steps)

    def names(self) -> list[str]:
        """Every leaf's name in order, groups and repeats expanded."""
        return [item_name(leaf) for _path, leaf in self.leaves()]

    def leaves(self) -> list[tuple[str, str | Step]]:
        """(path, leaf) for every leaf in order."""
        return [(path, item) for path, item, _depth in self.walk() if isinstance(item, str | Step)]

    def walk(self) -> Iterator[tuple[str, Item, int]]:
        """(path, item, depth) for every entry, groups before their steps."""
        yield from _walk(self.steps, "", 0)

    # ---- editing ----------------------------------------------------------------------

    def insert_after(self, path: str, *items: Item) -> Pipeline:
        """A copy with ``items`` right after the entry at ``path``."""
        return self._edit(path, lambda found: (found, *items))

    def insert_before(self, path: str, *items: Item) -> Pipeline:
        """A copy with ``items`` right before the entry at ``path``."""
        return self._edit(path, lambda found: (*items, found))

    def replace(self, path: str, *items: Item) -> Pipeline:
        """A copy with the entry at ``path`` replaced by ``items`` (none: removed)."""
        return self._edit(path, lambda _found: items)

    def without(self, path: str) -> Pipeline:
        """A copy without the entry at ``path``."""
        return self.replace(path)

    def _edit(self, path: str, change: Callable[[Item], tuple[Item, ...]]) -> Pipeline:
        steps, hits = _edit(self.steps, "", path, change)
        if hits != 1:
            known = ", ".join(p for p, _i, _d in self.walk())
            raise GlowError(
                f"pipeline path {path!r} matches {hits} entries, expected one; the paths are: {known}"
            )
        return Pipeline(*steps)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name


def _walk(items: tuple[Item, ...], prefix: str, depth: int) -> Iterator[tuple[str, Item, int]]:
    for item in items:
        if isinstance(item, Repeat):
            yield prefix, item, depth
            yield from _walk(item.steps, prefix, depth + 1)
        elif isinstance(item, Group):
            path = _join(prefix, item.name)
            yield path, item, depth
            yield from _walk(item.steps, path, depth + 1)
        else:
            yield _join(prefix, item_name(item)), item, depth


def _edit(
    items: tuple[Item, ...], prefix: str, path: str, change: Callable[[Item], tuple[Item, ...]]
) -> tuple[tuple[Item, ...], int]:
    out: list[Item] = []
    hits = 0
    for item in items:
        if isinstance(item, Repeat):
            inner, found = _edit(item.steps, prefix, path, change)
            out.append(Repeat(*inner, limit=item.limit))
            hits += found
            continue
        here = _join(prefix, item_name(item))
        if here == path:
            out.extend(change(item))
            hits += 1
        elif isinstance(item, Group):
            inner, found = _edit(item.steps, here, path, change)
            out.append(Group(item.name, *inner, when=item.when) if found else item)
            hits += found
        else:
            out.append(item)
    return tuple(out), hits
