"""k8s.providers.storage.choose: which StorageClass the volume of an existing cluster gets (the one
asked for, else the cluster's single default) and its access mode (from the provisioner,
unless ``cluster.volume_access`` says), and the one line `up` prints about it."""

from __future__ import annotations

from typing import Any

import pytest

from k8s.providers.storage import ACCESS_SETTING, CLASS_SETTING, Storage, StorageError, choose

IS_DEFAULT = "storageclass.kubernetes.io/is-default-class"
BETA_DEFAULT = "storageclass.beta.kubernetes.io/is-default-class"


def sc(name: str, provisioner: str = "rancher.io/local-path", default: str | None = None):
    meta: dict[str, Any] = {"name": name}
    if default:
        meta["annotations"] = {default: "true"}
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": meta,
        "provisioner": provisioner,
    }


@pytest.mark.parametrize("annotation", [IS_DEFAULT, BETA_DEFAULT])
def test_the_default_class_is_found_by_either_annotation(annotation):
    classes = [sc("slow"), sc("fast", "ebs.csi.aws.com", default=annotation), sc("other")]
    assert choose(classes, "", "") == Storage("fast", "ebs.csi.aws.com", "ReadWriteOnce")


def test_an_annotation_that_is_not_true_does_not_make_a_default():
    classes = [sc("a"), sc("b", default=IS_DEFAULT)]
    classes[0]["metadata"]["annotations"] = {IS_DEFAULT: "false"}
    assert choose(classes, "", "").storage_class == "b"


def test_no_default_class_names_the_classes_and_the_setting():
    with pytest.raises(StorageError) as e:
        choose([sc("zeta"), sc("alpha")], "", "")
    message = str(e.value)
    assert "no default StorageClass" in message
    assert "alpha, zeta" in message
    assert CLASS_SETTING in message


def test_two_defaults_name_the_classes_and_the_setting():
    classes = [sc("one", default=IS_DEFAULT), sc("two", default=BETA_DEFAULT)]
    with pytest.raises(StorageError) as e:
        choose(classes, "", "")
    message = str(e.value)
    assert "more than one default StorageClass" in message
    assert "one, two" in message
    assert CLASS_SETTING in message


def test_a_cluster_without_classes_says_none():
    with pytest.raises(StorageError, match=r"classes: none"):
        choose([], "", "")


def test_the_class_asked_for_wins_over_the_default():
    classes = [sc("default", default=IS_DEFAULT), sc("shared", "nfs.csi.k8s.io")]
    assert choose(classes, "shared", "") == Storage("shared", "nfs.csi.k8s.io", "ReadWriteMany")


def test_a_class_asked_for_that_is_missing_lists_the_classes():
    classes = [sc("standard", default=IS_DEFAULT), sc("local")]
    with pytest.raises(StorageError) as e:
        choose(classes, "gold", "")
    message = str(e.value)
    assert "'gold'" in message
    assert "local, standard" in message
    assert CLASS_SETTING in message


@pytest.mark.parametrize(
    "provisioner",
    ["nfs.csi.k8s.io", "cephfs.csi.ceph.com", "efs.csi.aws.com", "driver.longhorn.io"],
)
def test_a_shared_file_system_gives_read_write_many(provisioner):
    assert choose([sc("s", provisioner, IS_DEFAULT)], "", "").access == "ReadWriteMany"


@pytest.mark.parametrize(
    "provisioner", ["rancher.io/local-path", "ebs.csi.aws.com", "k8s.io/minikube-hostpath"]
)
def test_any_other_provisioner_gives_read_write_once(provisioner):
    assert choose([sc("s", provisioner, IS_DEFAULT)], "", "").access == "ReadWriteOnce"


def test_a_class_without_a_provisioner_is_read_write_once_and_says_so():
    bare = sc("s", default=IS_DEFAULT)
    del bare["provisioner"]
    assert choose([bare], "", "") == Storage("s", "?", "ReadWriteOnce")


@pytest.mark.parametrize(
    ("provisioner", "asked", "access"),
    [
        ("rancher.io/local-path", "ReadWriteMany", "ReadWriteMany"),
        ("nfs.csi.k8s.io", "ReadWriteOnce", "ReadWriteOnce"),
    ],
)
def test_the_access_asked_for_overrides_the_guess(provisioner, asked, access):
    assert choose([sc("s", provisioner, IS_DEFAULT)], "", asked).access == access


@pytest.mark.parametrize("asked", ["ReadOnlyMany", "rwx", "readwritemany"])
def test_an_access_mode_distml_does_not_know_is_refused(asked):
    with pytest.raises(StorageError) as e:
        choose([sc("s", default=IS_DEFAULT)], "", asked)
    message = str(e.value)
    assert repr(asked) in message
    assert ACCESS_SETTING in message
    assert "ReadWriteOnce" in message and "ReadWriteMany" in message


def test_the_line_for_read_write_once_speaks_of_pod_affinity():
    line = Storage("local-path", "rancher.io/local-path", "ReadWriteOnce").line("vol")
    assert line.startswith("volume vol: class local-path (rancher.io/local-path), ReadWriteOnce")
    assert "pod affinity" in line
    assert "spread" not in line


def test_the_line_for_read_write_many_speaks_of_spreading():
    line = Storage("nfs", "nfs.csi.k8s.io", "ReadWriteMany").line("vol")
    assert "class nfs (nfs.csi.k8s.io), ReadWriteMany" in line
    assert "spread over nodes" in line
    assert "affinity" not in line
