"""agent/linux/nlwrite, the raw rtnetlink batches of an ADD, against the kernel in a test namespace.

Plan: a batch runs its requests in order (a link created early in the batch is read back by a
later request of the same batch); a refused request raises RequestFailed naming it, with its
errno, after every other request of the batch has run and been answered (the socket holds no
stale answer for the next batch); an address already there counts as added; what a batch
configures is what `ip` shows.
"""

from __future__ import annotations

import errno
import json

import pytest

from agent.linux import nlcodec, nlwrite
from agent.linux.netns import PodNetns
from testbed.netns import named_netns, run_in


def link(netns: str, name: str) -> dict[str, object]:
    out = run_in(netns, "ip", "-j", "-d", "link", "show", name)
    assert out.returncode == 0, out.stderr
    found: list[dict[str, object]] = json.loads(out.stdout)
    return found[0]


def test_a_batch_creates_tags_and_reads_back_a_veth_in_one_go() -> None:
    with named_netns("trh") as host, named_netns("trp") as pod, PodNetns.open(pod) as netns:
        with nlwrite.pod_batch(host) as batch:
            batch.add_veth("trh0", 1400, "eth0", netns.fd, "02:00:00:00:00:07")
            batch.set_link("trh0", alias="vswitch-cni:test:eth0")
            seq = batch.get_link("trh0")
            read = batch.send()[seq]
        shown = link(host, "trh0")
        assert (read.index, read.mac) == (shown["ifindex"], shown["address"])
        assert shown["ifalias"] == "vswitch-cni:test:eth0" and shown["mtu"] == 1400
        assert "UP" in str(shown["flags"])
        peer = link(pod, "eth0")
        assert peer["address"] == "02:00:00:00:00:07" and "UP" not in str(peer["flags"])


def test_a_refused_request_is_named_and_the_rest_still_runs() -> None:
    with named_netns("trp") as pod, nlwrite.pod_batch(pod) as batch:
        batch.set_link("nosuchlink", up=True)
        batch.set_link(index=1, up=True)  # lo
        with pytest.raises(nlwrite.RequestFailed) as err:
            batch.send()
        assert err.value.errno == errno.ENODEV and "nosuchlink" in err.value.what
        assert "UP" in str(link(pod, "lo")["flags"])
        batch.add_address(1, "192.0.2.9", 32)
        batch.add_address(1, "192.0.2.9", 32)  # already there: fine
        batch.replace_route("198.51.100.0", 24, 1, scope=nlcodec.RT_SCOPE_LINK)
        assert batch.send() == {}
        assert "192.0.2.9/32" in run_in(pod, "ip", "-4", "addr", "show", "dev", "lo").stdout
        assert "198.51.100.0/24 dev lo" in run_in(pod, "ip", "route").stdout
