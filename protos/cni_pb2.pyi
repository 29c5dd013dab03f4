from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CNIRequest(_message.Message):
    __slots__ = ("version", "container_id", "network_namespace", "interface_name", "extra_nw_config", "extra_arguments", "ipam_type", "ipam_data", "runtime_config", "pod_uid", "deadline_ms", "traceparent", "tracestate", "cni_path")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    NETWORK_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    INTERFACE_NAME_FIELD_NUMBER: _ClassVar[int]
    EXTRA_NW_CONFIG_FIELD_NUMBER: _ClassVar[int]
    EXTRA_ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    IPAM_TYPE_FIELD_NUMBER: _ClassVar[int]
    IPAM_DATA_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_CONFIG_FIELD_NUMBER: _ClassVar[int]
    POD_UID_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    TRACESTATE_FIELD_NUMBER: _ClassVar[int]
    CNI_PATH_FIELD_NUMBER: _ClassVar[int]
    version: str
    container_id: str
    network_namespace: str
    interface_name: str
    extra_nw_config: str
    extra_arguments: str
    ipam_type: str
    ipam_data: str
    runtime_config: str
    pod_uid: str
    deadline_ms: int
    traceparent: str
    tracestate: str
    cni_path: str
    def __init__(self, version: _Optional[str] = ..., container_id: _Optional[str] = ..., network_namespace: _Optional[str] = ..., interface_name: _Optional[str] = ..., extra_nw_config: _Optional[str] = ..., extra_arguments: _Optional[str] = ..., ipam_type: _Optional[str] = ..., ipam_data: _Optional[str] = ..., runtime_config: _Optional[str] = ..., pod_uid: _Optional[str] = ..., deadline_ms: _Optional[int] = ..., traceparent: _Optional[str] = ..., tracestate: _Optional[str] = ..., cni_path: _Optional[str] = ...) -> None: ...

class CNIReply(_message.Message):
    __slots__ = ("result", "error", "interfaces", "routes", "dns", "error_details", "cni_version")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    INTERFACES_FIELD_NUMBER: _ClassVar[int]
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    DNS_FIELD_NUMBER: _ClassVar[int]
    ERROR_DETAILS_FIELD_NUMBER: _ClassVar[int]
    CNI_VERSION_FIELD_NUMBER: _ClassVar[int]
    result: int
    error: str
    interfaces: _containers.RepeatedCompositeFieldContainer[Interface]
    routes: _containers.RepeatedCompositeFieldContainer[Route]
    dns: _containers.RepeatedCompositeFieldContainer[DNS]
    error_details: str
    cni_version: str
    def __init__(self, result: _Optional[int] = ..., error: _Optional[str] = ..., interfaces: _Optional[_Iterable[_Union[Interface, _Mapping]]] = ..., routes: _Optional[_Iterable[_Union[Route, _Mapping]]] = ..., dns: _Optional[_Iterable[_Union[DNS, _Mapping]]] = ..., error_details: _Optional[str] = ..., cni_version: _Optional[str] = ...) -> None: ...

class Interface(_message.Message):
    __slots__ = ("name", "mac", "sandbox", "ip_addresses", "mtu")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAC_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    IP_ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    MTU_FIELD_NUMBER: _ClassVar[int]
    name: str
    mac: str
    sandbox: str
    ip_addresses: _containers.RepeatedCompositeFieldContainer[IP]
    mtu: int
    def __init__(self, name: _Optional[str] = ..., mac: _Optional[str] = ..., sandbox: _Optional[str] = ..., ip_addresses: _Optional[_Iterable[_Union[IP, _Mapping]]] = ..., mtu: _Optional[int] = ...) -> None: ...

class IP(_message.Message):
    __slots__ = ("version", "address", "gateway")
    class Version(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        IPV4: _ClassVar[IP.Version]
        IPV6: _ClassVar[IP.Version]
    IPV4: IP.Version
    IPV6: IP.Version
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GATEWAY_FIELD_NUMBER: _ClassVar[int]
    version: IP.Version
    address: str
    gateway: str
    def __init__(self, version: _Optional[_Union[IP.Version, str]] = ..., address: _Optional[str] = ..., gateway: _Optional[str] = ...) -> None: ...

class Route(_message.Message):
    __slots__ = ("dst", "gw")
    DST_FIELD_NUMBER: _ClassVar[int]
    GW_FIELD_NUMBER: _ClassVar[int]
    dst: str
    gw: str
    def __init__(self, dst: _Optional[str] = ..., gw: _Optional[str] = ...) -> None: ...

class DNS(_message.Message):
    __slots__ = ("domain", "nameservers", "search", "options")
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    NAMESERVERS_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    domain: str
    nameservers: _containers.RepeatedScalarFieldContainer[str]
    search: _containers.RepeatedScalarFieldContainer[str]
    options: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, domain: _Optional[str] = ..., nameservers: _Optional[_Iterable[str]] = ..., search: _Optional[_Iterable[str]] = ..., options: _Optional[_Iterable[str]] = ...) -> None: ...

class VersionRequest(_message.Message):
    __slots__ = ("client_version", "cni_versions")
    CLIENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    CNI_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    client_version: str
    cni_versions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, client_version: _Optional[str] = ..., cni_versions: _Optional[_Iterable[str]] = ...) -> None: ...

class VersionReply(_message.Message):
    __slots__ = ("agent_version", "cni_versions", "api_level")
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    CNI_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    API_LEVEL_FIELD_NUMBER: _ClassVar[int]
    agent_version: str
    cni_versions: _containers.RepeatedScalarFieldContainer[str]
    api_level: int
    def __init__(self, agent_version: _Optional[str] = ..., cni_versions: _Optional[_Iterable[str]] = ..., api_level: _Optional[int] = ...) -> None: ...
