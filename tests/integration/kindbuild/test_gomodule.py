"""integration.kindbuild.gomodule: go.mod rewriting: the staging modules pointed at the published
version, module replaces inherited and directory replaces dropped. (The builds themselves need
Go, Docker and minutes of CPU: ``python -m integration.kindbuild``.)"""

from __future__ import annotations

from integration.kindbuild import gomodule

GOMOD = """module k8s.io/kubernetes

require k8s.io/api v0.0.0

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tgithub.com/x/y v1.0.0 => github.com/x/z v1.2.3 // fork
\tgithub.com/a/b => ../b
)

replace github.com/c/d => github.com/c/e v0.1.0
"""


def test_staging_modules_are_pointed_at_the_published_version(tmp_path):
    (tmp_path / "go.mod").write_text(GOMOD)
    assert gomodule.staging_replaces(tmp_path / "go.mod", "v0.33.1") == {
        "k8s.io/api": "k8s.io/api v0.33.1",
        "k8s.io/client-go": "k8s.io/client-go v0.33.1",
    }


def test_module_replaces_are_inherited_and_directory_replaces_dropped(tmp_path):
    (tmp_path / "go.mod").write_text(GOMOD)
    assert gomodule.inherited_replaces(tmp_path / "go.mod") == {
        "github.com/x/y": "github.com/x/z v1.2.3",
        "github.com/c/d": "github.com/c/e v0.1.0",
    }
