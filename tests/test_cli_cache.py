"""``glow cache info|clear`` and the cache location in ``glow backends``, on glow-cpu's cache."""

from __future__ import annotations

import numpy as np
import pytest
from installed_backends import install_backend

import glow_core
from glow_core.cli import main
from glow_core.model_zoo import small_cnn


@pytest.fixture
def cpu_cache(install_registry, monkeypatch, tmp_path):
    """glow-cpu installed, its cache in a fresh directory (by $GLOW_CPU_CACHE_DIR)."""
    install_backend(install_registry, "cpu")
    directory = tmp_path / "cpu-cache"
    monkeypatch.setenv("GLOW_CPU_CACHE_DIR", str(directory))
    monkeypatch.delenv("GLOW_CPU_CACHE_SIZE", raising=False)
    return directory


def _compile_some(count: int, rng) -> None:
    """``count`` entries: batch sizes differ (weights alone do not, they are not keyed)."""
    for batch in range(1, count + 1):
        compiled = glow_core.compile(small_cnn(batch=batch, seed=batch), "cpu")
        x = rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)
        assert np.isfinite(compiled.run({"input": x})["output"]).all()


def _row(out: str, backend: str) -> list[str]:
    (line,) = [line for line in out.splitlines() if line.split()[:1] == [backend]]
    return line.split()


def test_info_then_clear(cpu_cache, rng, capsys):
    _compile_some(2, rng)
    assert main(["cache", "info"]) == 0
    row = _row(capsys.readouterr().out, "cpu")
    assert row[1] == str(cpu_cache) and row[2] == "2" and row[-2:] == ["1.0", "GiB"]
    assert main(["cache", "clear", "--backend", "cpu"]) == 0
    said = capsys.readouterr().out
    assert said.startswith("cpu: removed 2 entries (") and str(cpu_cache) in said
    assert not list(cpu_cache.glob("*.o"))
    assert main(["cache", "info"]) == 0
    assert _row(capsys.readouterr().out, "cpu")[2] == "0"


def test_bound_from_the_environment(cpu_cache, rng, monkeypatch, capsys):
    monkeypatch.setenv("GLOW_CPU_CACHE_SIZE", "1.5M")
    assert main(["cache", "info"]) == 0
    assert _row(capsys.readouterr().out, "cpu")[-2:] == ["1.5", "MiB"]


def test_bad_bound_is_one_line(cpu_cache, monkeypatch, capsys):
    monkeypatch.setenv("GLOW_CPU_CACHE_SIZE", "lots")
    assert main(["cache", "info"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: $GLOW_CPU_CACHE_SIZE='lots' is not a size") and err.count("\n") == 1


def test_backend_without_a_cache(cpu_cache, capsys):
    assert main(["cache", "info", "--backend", "interpreter"]) == 0
    assert capsys.readouterr().out == "backend 'interpreter' keeps no compile cache on disk\n"


def test_backends_shows_where_the_cache_is(cpu_cache, capsys):
    assert main(["backends"]) == 0
    assert f"compile cache (cpu): {cpu_cache}" in capsys.readouterr().out


def _cache_bytes(directory) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.*") if not p.name.startswith("."))


def test_cpu_cache_stays_within_its_option_bound(cpu_cache):
    """The cpu option cache_max_bytes bounds the cache: with room for about one entry, the
    newest entry stays and the older ones go."""
    glow_core.compile(small_cnn(batch=1), "cpu")
    one_entry = _cache_bytes(cpu_cache)
    bounded = {"cache_max_bytes": one_entry * 3 // 2}
    for batch in (2, 3):
        assert not glow_core.compile(small_cnn(batch=batch), "cpu", options=bounded).cache_hit
        assert _cache_bytes(cpu_cache) <= one_entry * 3 // 2
    assert glow_core.compile(small_cnn(batch=3), "cpu", options=bounded).cache_hit
    assert not glow_core.compile(small_cnn(batch=1), "cpu", options=bounded).cache_hit
