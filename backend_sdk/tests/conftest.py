"""The SDK's template repository goes to a temporary folder, never the user's cache."""

from __future__ import annotations

import pytest
from glow_backend_sdk.template_repo import REPO_ENV


@pytest.fixture(scope="session", autouse=True)
def template_repo(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        repo = tmp_path_factory.mktemp("template-repo")
        patch.setenv(REPO_ENV, str(repo))
        yield repo
