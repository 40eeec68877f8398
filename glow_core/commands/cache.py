"""``glow cache info|clear``: what the backends' compile caches hold, and emptying them."""

from __future__ import annotations

import argparse

from glow_core.cache import DiskCache, format_size
from glow_core.commands.console import print_table
from glow_core.errors import BackendError, GlowError

EXAMPLES = """\
examples:
  glow cache info                  # every backend's cache: where, how many entries, how big
  glow cache clear                 # delete every entry (only costs recompiling)
  glow cache clear --backend cpu   # one backend's

The cpu cache's directory is $GLOW_CPU_CACHE_DIR (default: the user cache dir) and its bound
$GLOW_CPU_CACHE_SIZE (e.g. 500M, 2G; default 1G); least recently used entries go first.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "cache",
        help="show or clear the compile caches",
        description="Show or clear the compile caches of the installed backends.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("action", choices=("info", "clear"), help="info: show; clear: delete every entry")
    parser.add_argument("--backend", metavar="NAME", help="only this backend's cache (default: every one)")
    parser.set_defaults(func=cmd_cache)


def backend_caches(name: str | None = None) -> dict[str, DiskCache]:
    """The disk cache of each working backend that keeps one (or of backend ``name``)."""
    from glow_core.plugins import describe_error, get_backend, registry

    names = [name] if name else sorted(registry().backends())
    caches = {}
    for backend_name in names:
        try:
            cache = get_backend(backend_name).disk_cache()
        except GlowError:
            raise  # a setting of the user's ($GLOW_CPU_CACHE_SIZE): said, never skipped
        except Exception as err:  # a third-party backend's own failure: skipped in a listing
            if name:
                raise BackendError(
                    f"backend {name!r} cannot say where its compile cache is: {describe_error(err)}"
                ) from None
            continue
        if cache is not None:
            caches[backend_name] = cache
    return caches


def cmd_cache(args: argparse.Namespace) -> int:
    caches = backend_caches(args.backend)
    if not caches:
        who = f"backend {args.backend!r} keeps no" if args.backend else "no installed backend keeps a"
        print(f"{who} compile cache on disk")
        return 0
    if args.action == "clear":
        for name, cache in caches.items():
            removed = cache.clear()
            size = format_size(removed.bytes)
            print(f"{name}: removed {removed.entries} entries ({size}) from {cache.directory}")
        return 0
    rows = []
    for name, cache in caches.items():
        usage = cache.usage()
        size, limit = format_size(usage.bytes), format_size(usage.max_bytes)
        rows.append((name, str(usage.directory), str(usage.entries), size, limit))
    columns = ("backend", "directory", "entries", "size", "limit")
    print_table(columns, rows, numeric=("entries", "size", "limit"))
    return 0
