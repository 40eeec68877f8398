"""The generated ONNX node tests kept on disk: loaded back unchanged, regenerated when an
entry is damaged, never used when turned off."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest
from glow_conformance import node_test_cache


class Generator:
    """A stand-in for onnx's generators that counts its runs and draws different data each time."""

    def __init__(self, rng: np.random.Generator):
        self.rng, self.runs = rng, 0

    def __call__(self) -> list[tuple[str, np.ndarray]]:
        self.runs += 1
        return [("test_add", self.rng.standard_normal((3, 4)).astype(np.float32))]


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """Seeded from the test id (this folder has its own conftest, without the root's)."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(node_test_cache.CACHE_ENV, str(tmp_path))
    return tmp_path


def test_second_load_reads_the_stored_tests(cache_dir: Path, rng: np.random.Generator) -> None:
    generate = Generator(rng)
    first = node_test_cache.cached(generate)
    second = node_test_cache.cached(generate)
    assert generate.runs == 1, "the second load must come from disk"
    assert second[0][0] == first[0][0]
    np.testing.assert_array_equal(second[0][1], first[0][1])
    assert second[0][1].dtype == np.float32
    assert any(cache_dir.iterdir())


def test_a_damaged_entry_is_generated_again(cache_dir: Path, rng: np.random.Generator) -> None:
    generate = Generator(rng)
    node_test_cache.cached(generate)
    (data,) = cache_dir.glob("*.pickle")
    data.write_bytes(data.read_bytes()[:-7])  # a torn write
    again = node_test_cache.cached(generate)
    assert generate.runs == 2
    assert again[0][1].shape == (3, 4)
    assert node_test_cache.cached(generate)[0][1] is not again[0][1]
    assert generate.runs == 2, "the regenerated entry is stored whole"


def test_off_never_touches_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator
) -> None:
    monkeypatch.setenv(node_test_cache.CACHE_ENV, "off")
    monkeypatch.chdir(tmp_path)
    generate = Generator(rng)
    node_test_cache.cached(generate)
    node_test_cache.cached(generate)
    assert generate.runs == 2
    assert not any(tmp_path.iterdir())


def test_the_key_follows_the_generators_and_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    key = node_test_cache.generator_key()
    assert key == node_test_cache.generator_key()
    monkeypatch.setattr(node_test_cache.np, "__version__", "0.0.test")
    assert node_test_cache.generator_key() != key
