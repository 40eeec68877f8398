"""The SDK's template repository goes to a temporary folder, never the user's cache.

Tests that pretend a newer SDK (TEMPLATE_VERSION 99.0.0) point REPO_ENV at a repository of
their own: a v99.0.0 tag in this shared one would make every later render in the worker
record `v99.0.0-1-g...` as its template version.
"""

from __future__ import annotations

import pytest
from glow_backend_sdk.template_repo import REPO_ENV


@pytest.fixture(scope="session", autouse=True)
def template_repo(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        repo = tmp_path_factory.mktemp("template-repo")
        patch.setenv(REPO_ENV, str(repo))
        yield repo
