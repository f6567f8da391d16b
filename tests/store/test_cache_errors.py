"""The verdict cache's failures: a file that is no cache is a config error, and any
failure of the database (a full disk, an I/O error) one error naming the file and what
failed. The full disk itself is in ``tests/judges/test_cache_disk_full.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from litmus_sandbox import ConfigError, VerdictCache
from litmus_sandbox._core.scoring import StepJudgment
from litmus_sandbox._model.errors import CacheError, LitmusError

K1 = ("judge-fp", "step-1", "ctx-1")
SAFE = StepJudgment(safe=True, reason="fine")


def test_a_file_that_is_no_cache_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    path.write_bytes(b"not a database at all" * 100)
    with pytest.raises(ConfigError, match=f"{path}: not a usable verdict cache"):
        VerdictCache(path)


def test_a_failing_database_is_a_cache_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    cache = VerdictCache(path)
    cache.close()
    for what in (
        lambda: cache.get(K1),
        lambda: cache.put_many([(K1, SAFE)]),
        lambda: cache.claim([K1]),
        lambda: cache.refresh([K1]),
        lambda: cache.release([K1]),
        lambda: len(cache),
    ):
        with pytest.raises(CacheError, match=f"^{path}: verdict cache: .* failed: ") as info:
            what()
        assert isinstance(info.value, LitmusError)
