"""zpar.wire.privacy: the IOPub topic, and what a bind exposes."""

from __future__ import annotations

import pytest

from zpar.wire.privacy import (
    ExposureRefused,
    check_exposure,
    exposed_addresses,
    iopub_topic,
    is_loopback,
)


def test_iopub_topic_is_keyed_and_empty_without_a_key():
    a, b = iopub_topic("a" * 64), iopub_topic("b" * 64)
    assert len(a) == 32 and a != b
    assert iopub_topic("a" * 64) == iopub_topic(b"a" * 64)  # str or bytes key: one topic
    assert iopub_topic("") == iopub_topic(None) == b""


@pytest.mark.parametrize("ip", ["127.0.0.1", "127.3.4.5", "::1", "localhost"])
def test_loopback_binds_expose_nothing(ip):
    assert is_loopback(ip)
    assert exposed_addresses(ip) == []
    assert check_exposure(ip, curve=False, insecure=True, force=False) is None


def test_a_wildcard_bind_names_every_non_loopback_address():
    import psutil

    exposed = exposed_addresses("0.0.0.0")
    assert exposed and not any(is_loopback(a) for a in exposed if "every" not in a)
    ours = {
        a.address.split("%")[0]
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family.name in ("AF_INET", "AF_INET6") and not is_loopback(a.address.split("%")[0])
    }
    assert ours <= set(exposed)
    warning = check_exposure("0.0.0.0", curve=False, insecure=False, force=False)
    for addr in exposed:
        assert addr in warning
    assert "--curve" in warning


def test_curve_silences_the_warning_and_insecure_needs_force():
    assert check_exposure("10.1.2.3", curve=True, insecure=False, force=False) is None
    assert "10.1.2.3" in check_exposure("10.1.2.3", curve=False, insecure=False, force=False)
    with pytest.raises(ExposureRefused, match="10.1.2.3.*--force"):
        check_exposure("10.1.2.3", curve=False, insecure=True, force=False)
    forced = check_exposure("10.1.2.3", curve=False, insecure=True, force=True)
    assert "without a key" in forced
    assert not is_loopback("example.org")
