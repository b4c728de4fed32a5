"""Child names: always DNS-1035 labels of at most 63 characters, deterministic, collision-free."""

from __future__ import annotations

import pytest
from ascend_operator.names import MAX_LWS_NAME_LENGTH, ChildNames, is_dns1035_label, label_value, safe_name


@pytest.mark.parametrize(
    "base, suffix, expected",
    [
        ("qwen72b", "", "qwen72b"),
        ("qwen72b", "config", "qwen72b-config"),
        ("a" * 63, "", "a" * 63),
    ],
)
def test_valid_names_are_kept(base: str, suffix: str, expected: str) -> None:
    assert safe_name(base, suffix) == expected


@pytest.mark.parametrize(
    "base, suffix",
    [
        ("a" * 64, ""),
        ("a" * 63, "config"),
        ("b" * 253, "config"),
        ("qwen2.5-72b", ""),  # dots are fine in a subdomain, not in a label
        ("72b-qwen", ""),  # DNS-1035 labels start with a letter
        ("-x-", "pdb"),
        ("UPPER", ""),
    ],
)
def test_invalid_or_long_names_become_hashed_labels(base: str, suffix: str) -> None:
    name = safe_name(base, suffix)
    assert is_dns1035_label(name) and len(name) <= 63
    if suffix:
        assert name.endswith(f"-{suffix}")
    assert name == safe_name(base, suffix)  # deterministic


def test_hashed_names_keep_a_readable_prefix() -> None:
    assert safe_name("qwen2.5-72b") == "qwen2-5-72b-" + safe_name("qwen2.5-72b")[-8:]
    assert safe_name("72b").startswith("x-72b-")


def test_long_names_that_share_a_prefix_do_not_collide() -> None:
    first, second = "m" * 70 + "-one", "m" * 70 + "-two"
    assert safe_name(first) != safe_name(second)
    assert safe_name(first, "config") != safe_name(second, "config")
    # 'qwen2.5' and 'qwen2-5' slug the same; the hash tells them apart.
    assert safe_name("qwen2.5") != safe_name("qwen2-5")


@pytest.mark.parametrize("suffix", ["Bad", "-x", "a" * 21, "x_y"])
def test_bad_suffixes_are_refused(suffix: str) -> None:
    with pytest.raises(ValueError, match="suffix"):
        safe_name("x", suffix)


def test_label_values_fit_63_characters() -> None:
    assert label_value("qwen2.5-72b") == "qwen2.5-72b"  # dots are valid in label values
    long = label_value("a" * 200)
    assert len(long) <= 63 and long == label_value("a" * 200)


def test_child_names_for_a_resource() -> None:
    assert ChildNames.for_resource("qwen72b") == ChildNames(
        deployment="qwen72b",
        service="qwen72b",
        configmap="qwen72b-config",
        pdb="qwen72b",
        container="engine",
        leaderworkerset="qwen72b-lws",
        hpa="qwen72b",
        scaled_object="qwen72b",
        runtime_service="qwen72b-runtime",
        adapters="qwen72b-adapters",
    )
    long = ChildNames.for_resource("x" * 253)
    for name in (long.deployment, long.service, long.configmap, long.pdb, long.hpa, long.scaled_object,
                 long.runtime_service, long.adapters):
        assert is_dns1035_label(name)


def test_leaderworkerset_names_leave_room_for_group_and_worker_pods() -> None:
    # LWS pods are <lws>-<group>-<worker> with a controller-revision-hash label
    # <statefulset>-<10 hex>; both must stay within 63 characters for 4-digit indices.
    for name in ("x" * 253, "a" * 40, "deepseek-v3-671b-w8a8-production-eu-west", "9-start-digit"):
        lws = ChildNames.for_resource(name).leaderworkerset
        assert is_dns1035_label(lws) and len(lws) <= MAX_LWS_NAME_LENGTH
        assert len(f"{lws}-9999-9999") <= 63 and len(f"{lws}-9999-{'f' * 10}") <= 63
        # Never the Service's name: LWS creates a headless Service named after the LWS.
        assert lws != ChildNames.for_resource(name).service
    assert ChildNames.for_resource("x" * 253).leaderworkerset != ChildNames.for_resource("x" * 252).leaderworkerset


def test_safe_name_refuses_a_max_length_that_leaves_no_room_for_the_hash() -> None:
    with pytest.raises(ValueError, match="max_length"):
        safe_name("abc", max_length=10)
