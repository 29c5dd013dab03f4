"""agent/linux/nlcodec, the one definition of the rtnetlink wire format, without a kernel.

Plan: each fixed header has the size of its C struct (linux/netlink.h, if_link.h, if_addr.h,
rtnetlink.h, neighbour.h) and the signedness of its index field (ifaddrmsg's is a __u32: an index
above 2**31 packs and reads back; ifinfomsg's and ndmsg's are ints); attributes are padded to 4
bytes and read back by type with the NLA_F_* bits cleared, a nested one included; the messages
of a datagram are found at their aligned offsets, with their errors, and a malformed length ends
the walk instead of looping.
"""

from __future__ import annotations

import errno
import ipaddress
import socket

from agent.linux import nlcodec as nl


def test_header_sizes_are_the_kernel_structs() -> None:
    sizes = {nl.NLMSGHDR: 16, nl.RTATTR: 4, nl.NLMSGERR: 4, nl.IFINFOMSG: 16, nl.IFADDRMSG: 8,
             nl.RTMSG: 12, nl.NDMSG: 12}
    assert {layout.format: layout.size for layout in sizes} == {
        layout.format: size for layout, size in sizes.items()}


def test_index_fields_have_the_kernel_signedness() -> None:
    big = 2**31 + 5  # ifa_index is a __u32
    assert nl.IFADDRMSG.unpack(nl.IFADDRMSG.pack(socket.AF_INET6, 64, 0, 0, big))[4] == big
    assert nl.IFINFOMSG.unpack(nl.IFINFOMSG.pack(0, 0, -1, 0, 0))[2] == -1  # ifi_index: int
    assert nl.NDMSG.unpack(nl.NDMSG.pack(0, -1, nl.NUD_PERMANENT, 0, 0))[1] == -1


def test_attributes_pad_and_read_back_by_type() -> None:
    inner = nl.attr_str(nl.IFLA_IFNAME, "eth0") + nl.attr_u32(nl.IFLA_MTU, 1400)
    data = nl.attr_str(nl.IFLA_IFNAME, "veth1") + nl.nested(nl.IFLA_LINKINFO, inner)
    data += nl.attr(nl.IFLA_ADDRESS, nl.mac_bytes("02:00:00:00:00:07"))
    assert len(data) % 4 == 0
    found = nl.attrs(data, 0, len(data))
    assert nl.text(found[nl.IFLA_IFNAME]) == "veth1"
    assert nl.mac_text(found[nl.IFLA_ADDRESS]) == "02:00:00:00:00:07"
    assert nl.u32_of(nl.attrs(found[nl.IFLA_LINKINFO], 0, len(inner))[nl.IFLA_MTU]) == 1400
    assert nl.find_attr(data, 0, len(data), nl.IFLA_ADDRESS) == found[nl.IFLA_ADDRESS]
    assert nl.find_attr(data, 0, len(data), nl.IFLA_OPERSTATE) is None
    family, raw = nl.ip_bytes("fd00::1")
    assert family == socket.AF_INET6 and nl.ip_of(raw) == ipaddress.ip_address("fd00::1")


def test_messages_of_a_datagram() -> None:
    first = nl.message(nl.RTM_NEWLINK, nl.NLM_F_MULTI, 7, nl.IFINFOMSG.pack(0, 0, 3, 0, 0)
                       + nl.attr_str(nl.IFLA_IFNAME, "a"))
    refused = nl.message(nl.NLMSG_ERROR, 0, 8, nl.NLMSGERR.pack(-errno.ENODEV) + first[:16])
    data = first + refused
    found = list(nl.messages(data))
    assert [(kind, seq) for _, _, kind, _, seq in found] == [(nl.RTM_NEWLINK, 7),
                                                             (nl.NLMSG_ERROR, 8)]
    assert nl.error_code(data, found[1][0]) == errno.ENODEV
    broken = nl.NLMSGHDR.pack(3, nl.NLMSG_DONE, 0, 9, 0)  # a length below the header's
    assert list(nl.messages(broken + first)) == []
