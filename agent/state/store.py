"""etcd persistence: cluster-wide node IDs, per-node pod records and IP allocations.

Every write that must not be seen half done is one etcd transaction: a node ID claim writes the
id->name and name->id keys together; a pod record is written or deleted together with one
allocation key per pod address. The key layout is documented in docs/etcd-keys.md.

Client: `pyetcd` (etcd-sdk-python 0.0.7): the etcd3 API with code generated for protobuf 7 (the
old `etcd3` package fails to import with it). Library errors become agent errors here and nowhere
else (`_call`): unreachable -> TryAgainLater (CNI 11), anything else -> IOFailure (CNI 5), the
library error chained. Every RPC carries the timeout, so no call hangs.

TLS (https:// endpoints): one set of channel credentials from `EtcdTLS` serves every endpoint;
a call that fails in the TLS handshake is an EtcdTLSFailure (still CNI 11) naming the failure
(agent.etcdtls.explain), because gRPC reports it as one more UNAVAILABLE.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import time
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar
from urllib.parse import quote, urlsplit

import grpc
import pyetcd
from pyetcd import exceptions as etcd_exc
from pyetcd import transactions as tx

from agent.model.errors import (
    EtcdTLSFailure,
    InvalidConfig,
    IOFailure,
    IPAMFailure,
    TryAgainLater,
    UnknownContainer,
)
from agent.model.pod import PodKey, PodRecord, pod_label
from agent.state.etcd_tls import EtcdTLS, TLSFileError, explain

T = TypeVar("T")

# gRPC would otherwise back off up to 2 minutes between reconnects to a restarted etcd.
_GRPC_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
_MAX_ROUNDS = 1000  # compare-and-swap retries; each lost round means another writer progressed
_UNREACHABLE = (
    etcd_exc.ConnectionFailedError,
    etcd_exc.ConnectionTimeoutError,
    etcd_exc.NoServerAvailableError,
)


class Binding(NamedTuple):
    """What `Store.bind_node_id` found: all false/empty means the binding holds (again)."""

    holder: str = ""  # another node holds the ID now
    rewritten: bool = False  # etcd had lost it: written again
    removed: bool = False  # deleted while etcd went forward: an operator removed this node


def parse_endpoint(url: str) -> tuple[str, int]:
    """'http://host:port', 'https://host:port' or 'host:port' (http) -> (host, port)."""
    parts = urlsplit(url if "//" in url else f"http://{url}")
    if parts.scheme not in ("http", "https") or not parts.hostname \
            or parts.path not in ("", "/"):
        raise InvalidConfig(
            f"etcd endpoint {url!r} is not valid", "use http://host:port or https://host:port"
        )
    try:
        port = parts.port or 2379
    except ValueError as exc:
        raise InvalidConfig(f"etcd endpoint {url!r} has a bad port", str(exc)) from exc
    return parts.hostname, port


class Store:
    """The agent's etcd prefix. Thread-safe: one gRPC channel per endpoint, shared."""

    def __init__(
        self,
        endpoints: list[str],
        prefix: str = "/vswitch-cni/",
        timeout: float = 2.0,
        tls: EtcdTLS | None = None,
    ) -> None:
        if not endpoints:
            raise InvalidConfig("no etcd endpoint given", "set EtcdEndpoints")
        self.endpoints = list(endpoints)
        self.tls = tls
        self._last_tls_failure = ""  # the last call's, for calls that meet no member at all
        self.prefix = prefix if prefix.endswith("/") else prefix + "/"
        self.timeout = timeout
        self._held: dict[int, bytes] = {}  # node ID -> its binding's value, as this agent holds it
        self._revision = 0  # etcd's revision at the last binding check (lower later: data lost)
        self._taken: set[int] = set()  # held node IDs another node holds now (etcd lost data)
        creds = _credentials(self.endpoints, tls)
        eps = [
            pyetcd.Endpoint(
                host, port, secure=creds is not None, creds=creds,
                time_retry=min(timeout, 1.0), opts=_GRPC_OPTIONS,
            )
            for host, port in map(parse_endpoint, endpoints)
        ]
        # failover: a failed member is skipped for `time_retry`; the next call tries another
        self._client = pyetcd.MultiEndpointEtcd3Client(
            endpoints=eps, timeout=timeout, failover=True
        )

    # ---- the one place where etcd errors are translated ------------------------------------

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Runs one etcd RPC. A refused connection is retried once per other member; a
        timeout is not (the budget is spent)."""
        last: Exception | None = None
        for _ in range(len(self.endpoints)):
            try:
                return fn()
            except etcd_exc.ConnectionFailedError as exc:
                last = exc  # refused fast: another member may answer
            except _UNREACHABLE as exc:
                last = exc
                break
            except (etcd_exc.Etcd3Exception, grpc.RpcError) as exc:
                raise IOFailure(f"etcd {what} failed", _describe(exc)) from exc
        tls_failure = self._tls_failure(last)
        if tls_failure:
            raise EtcdTLSFailure(f"etcd TLS handshake failed ({what})", tls_failure) from last
        raise TryAgainLater(
            f"etcd is unreachable ({what})", f"{', '.join(self.endpoints)}: {_describe(last)}"
        ) from last

    def _tls_failure(self, exc: BaseException | None) -> str:
        """What failed in the TLS handshake of the member just tried, from gRPC's details; ""
        when it was no TLS failure. pyetcd raises its own error with gRPC's as the context;
        a call that finds every member marked failed (for a moment after a failure) has no
        gRPC error of its own, and gets the last one's."""
        if self.tls is None:
            return ""
        rpc = exc if isinstance(exc, grpc.RpcError) else getattr(exc, "__context__", None)
        if not isinstance(rpc, grpc.RpcError):
            return self._last_tls_failure if exc is not None else ""
        endpoint = self._client.endpoint_in_use
        url = f"https://{endpoint.netloc}" if endpoint is not None else self.endpoints[0]
        self._last_tls_failure = explain(str(rpc.details() or ""), self.tls, url)
        return self._last_tls_failure

    def _get(self, key: str) -> tuple[bytes | None, Any]:
        raw, meta = self._call(f"get {key}", lambda: self._client.get(key))
        return raw, meta

    def _get_prefix(self, prefix: str) -> list[tuple[bytes, Any]]:
        return self._call(f"list {prefix}", lambda: list(self._client.get_prefix(prefix)))

    def _txn(self, what: str, compare: list[Any], success: list[Any]) -> bool:
        ok, _ = self._call(what, lambda: self._client.transaction(compare, success, []))
        return bool(ok)

    # ---- keys -------------------------------------------------------------------------------

    def _node_name_key(self, name: str) -> str:
        return f"{self.prefix}nodes/name/{quote(name, safe='')}"

    def _node_id_key(self, node_id: int) -> str:
        return f"{self.prefix}nodes/id/{node_id}"

    def _node_removed_key(self, name: str) -> str:
        """Written when an operator removes the node (node remove, agent.nodes release), deleted
        when the node joins again: a binding gone without it is data etcd lost."""
        return f"{self.prefix}nodes/removed/{quote(name, safe='')}"

    def _removal_mark(self, name: str, node_id: int) -> Any:
        return tx.Put(self._node_removed_key(name), dump({"id": node_id, "at": time.time()}))

    def _pod_key(self, node_id: int, key: PodKey) -> str:
        return (
            f"{self.prefix}pods/{node_id}/{quote(key.container_id, safe='')}/"
            f"{quote(key.ifname, safe='')}"
        )

    def _alloc_key(self, node_id: int, ip: str) -> str:
        return f"{self.prefix}ipam/{node_id}/{ip}"

    # ---- node IDs (cluster-wide) ------------------------------------------------------------

    def claim_node_id(self, node_name: str, max_id: int) -> int:
        """The node's ID: the one it holds already, else the smallest free one (1-based)."""
        if not node_name:
            raise InvalidConfig("node name is empty", "set NodeName (or the node's hostname)")
        name_key = self._node_name_key(node_name)
        for _ in range(_MAX_ROUNDS):
            raw, _meta = self._get(name_key)
            if raw is not None:
                node_id = _check_bound(node_name, int(load(raw, name_key)["id"]), max_id)
                self._hold_current(node_id)
                return node_id
            taken = self._taken_ids()
            node_id = next(i for i in itertools.count(1) if i not in taken)
            if node_id > max_id:
                raise InvalidConfig(
                    f"no free node ID for node {node_name}: all {max_id} IDs the IPAM config "
                    "allows are taken",
                    "release the IDs of removed nodes (python -m agent.nodes release) or "
                    "enlarge the subnets",
                )
            id_key = self._node_id_key(node_id)
            value = dump({"name": node_name, "id": node_id, "since": time.time()})
            # create-if-absent on both keys: a lost race leaves nothing and we try again
            if self._txn(
                f"claim node ID {node_id}",
                [tx.Version(id_key) == 0, tx.Version(name_key) == 0],
                [tx.Put(id_key, value), tx.Put(name_key, value),
                 tx.Delete(self._node_removed_key(node_name))],  # joined again
            ):
                self._hold_current(node_id)
                return node_id
        raise TryAgainLater(
            f"could not claim a node ID for {node_name}", f"lost {_MAX_ROUNDS} races in a row"
        )

    def bind_node_id(self, node_name: str, node_id: int) -> Binding:
        """Makes sure `node_id` is bound to `node_name`, re-creating what etcd lost (etcd wiped,
        or restored from an old backup). Nothing is written when another node holds the ID now
        (`holder`), or when the binding this client held is gone and the node's removal mark
        is there: an operator removed the node (`removed`).

        The id key is create-if-absent, so a node that claimed the ID meanwhile keeps it; the
        name key is pointed (back) at `node_id`, guarded by its mod revision."""
        id_key, name_key = self._node_id_key(node_id), self._node_name_key(node_name)
        value = dump({"name": node_name, "id": node_id, "since": time.time()})
        for _ in range(_MAX_ROUNDS):
            id_raw, id_mod, revision = self._get_at(id_key)
            self._revision = revision
            # Removed by an operator only when the removal left its mark: etcd's revision alone
            # cannot tell (a wiped etcd that other agents wrote to since is "ahead" again).
            if id_raw is None and node_id in self._held and node_id not in self._taken \
                    and self._get(self._node_removed_key(node_name))[0] is not None:
                return Binding(removed=True)
            holder = node_name if id_raw is None else str(load(id_raw, id_key).get("name"))
            if holder != node_name:
                self._taken.add(node_id)
                return Binding(holder=holder)
            self._taken.discard(node_id)
            name_raw, name_meta = self._get(name_key)
            named = None if name_raw is None else load(name_raw, name_key).get("id")
            if id_raw is not None and named == node_id:
                self._hold(node_id, id_raw)
                return Binding()
            if id_raw is None:
                compare, ops = [tx.Version(id_key) == 0], [tx.Put(id_key, value)]
            else:
                compare, ops = [tx.Mod(id_key) == id_mod], []
            compare.append(
                tx.Version(name_key) == 0
                if name_raw is None
                else tx.Mod(name_key) == name_meta.mod_revision
            )
            ops.append(tx.Put(name_key, value if id_raw is None else id_raw))
            if self._txn(f"bind node ID {node_id} to {node_name}", compare, ops):
                self._hold(node_id, value if id_raw is None else id_raw)
                return Binding(rewritten=True)
        raise TryAgainLater(f"could not bind node ID {node_id} to {node_name}", "busy")

    def _get_at(self, key: str) -> tuple[bytes | None, int, int]:
        """(value, its mod revision, the store's revision at the read)."""
        resp = self._call(f"get {key}", lambda: self._client.get_response(key))
        kv = resp.kvs[0] if resp.kvs else None
        revision = int(resp.header.revision)
        return (None, 0, revision) if kv is None else (kv.value, int(kv.mod_revision), revision)

    def _hold_current(self, node_id: int) -> None:
        """Holds the binding as etcd has it now, and notes etcd's revision (the guard's first
        check compares with it: a lower one means etcd lost data in between)."""
        raw, _mod, revision = self._get_at(self._node_id_key(node_id))
        self._revision = max(self._revision, revision)
        self._hold(node_id, raw)

    def _hold(self, node_id: int, value: bytes | None) -> None:
        """Notes the binding this process holds: every pod write for `node_id` from now on is
        guarded by it, so no address of a node ID that etcd gave another node (after a wipe or
        a restore) is ever written as allocated here."""
        if value is not None:
            self._held[node_id] = value

    def _held_compare(self, node_id: int) -> list[Any]:
        value = self._held.get(node_id)
        return [] if value is None else [tx.Value(self._node_id_key(node_id)) == value]

    def _check_held(self, node_id: int) -> None:
        value = self._held.get(node_id)
        if value is None:
            return
        key = self._node_id_key(node_id)
        raw, _meta = self._get(key)
        if raw == value:
            return
        holder = None if raw is None else load(raw, key).get("name")
        if raw is not None and holder == load(value, key).get("name"):
            self._held[node_id] = raw  # still this node's (a backup of its own older claim)
            return
        raise TryAgainLater(
            f"this node's ID {node_id} is no longer bound to it in etcd",
            f"held by {'nobody' if raw is None else f'node {holder}'} now "
            "(etcd wiped or restored from a backup?)",
        )

    def release_node_id(self, node_name: str) -> bool:
        """Frees the node's ID (explicit operator action); False if it held none."""
        name_key = self._node_name_key(node_name)
        for _ in range(_MAX_ROUNDS):
            raw, meta = self._get(name_key)
            if raw is None:
                return False
            node_id = int(load(raw, name_key)["id"])
            id_key = self._node_id_key(node_id)
            id_raw, id_meta = self._get(id_key)
            compare = [tx.Mod(name_key) == meta.mod_revision]
            ops = [tx.Delete(name_key), self._removal_mark(node_name, node_id)]
            if id_raw is not None and load(id_raw, id_key).get("name") == node_name:
                compare.append(tx.Mod(id_key) == id_meta.mod_revision)
                ops.append(tx.Delete(id_key))
            if self._txn(f"release node ID of {node_name}", compare, ops):
                return True
        raise TryAgainLater(f"could not release the node ID of {node_name}", "busy")

    def node_ids(self) -> dict[str, int]:
        """Node name -> node ID, for every node holding one."""
        out: dict[str, int] = {}
        for raw, meta in self._get_prefix(f"{self.prefix}nodes/name/"):
            data = load(raw, meta.key.decode())
            out[str(data["name"])] = int(data["id"])
        return out

    def _taken_ids(self) -> set[int]:
        prefix = f"{self.prefix}nodes/id/"
        return {int(meta.key.decode()[len(prefix) :]) for _raw, meta in self._get_prefix(prefix)}

    # ---- pods and their allocations (per node) ----------------------------------------------

    def put_pod(self, node_id: int, record: PodRecord) -> None:
        """Creates the record and one allocation key per address, all or nothing.

        One round trip when nothing is in the way (create-if-absent on every key); otherwise
        the general path reads what is there and either takes over keys already ours or names
        the other owner."""
        pod_key = self._pod_key(node_id, record.key)
        ips = _ips(record.addresses, pod_key)
        compare = [tx.Version(pod_key) == 0, *self._held_compare(node_id)]
        compare += [tx.Version(self._alloc_key(node_id, ip)) == 0 for ip in ips]
        ops = [tx.Put(pod_key, dump(record.to_json_dict()))]
        ops += [self._alloc_put(node_id, ip, record, time.time()) for ip in ips]
        if not self._txn(f"create pod {record.key}", compare, ops):
            self._write_pod(node_id, record, must_exist=False)

    def update_pod(
        self, node_id: int, record: PodRecord, previous: PodRecord | None = None
    ) -> None:
        """Rewrites an existing record (and its allocations, should the addresses change).

        With `previous` (the record as this agent last wrote it) and the same addresses, this
        is one round trip: the new record replaces the old one only if the old one is still
        byte for byte `previous`, so its allocation keys are those put_pod wrote with it."""
        pod_key = self._pod_key(node_id, record.key)
        if previous is not None and previous.addresses == record.addresses:
            compare = [tx.Value(pod_key) == dump(previous.to_json_dict())]
            compare += self._held_compare(node_id)
            ops = [tx.Put(pod_key, dump(record.to_json_dict()))]
            if self._txn(f"update pod {record.key}", compare, ops):
                return
        self._write_pod(node_id, record, must_exist=True)

    def _write_pod(self, node_id: int, record: PodRecord, must_exist: bool) -> None:
        pod_key = self._pod_key(node_id, record.key)
        ips = _ips(record.addresses, pod_key)
        for _ in range(_MAX_ROUNDS):
            self._check_held(node_id)
            old_raw, old_meta = self._get(pod_key)
            if old_raw is None and must_exist:
                raise UnknownContainer(f"no pod record for {record.key} on node {node_id}")
            compare = (
                [tx.Version(pod_key) == 0]
                if old_raw is None
                else [tx.Mod(pod_key) == old_meta.mod_revision]
            )
            compare += self._held_compare(node_id)
            ops = [tx.Put(pod_key, dump(record.to_json_dict()))]
            for ip in ips:
                self._claim_ip(node_id, ip, record, compare, ops)
            if old_raw is not None:
                gone = set(_ips(_record(old_raw, pod_key).addresses, pod_key)) - set(ips)
                for ip in sorted(gone):
                    self._drop_ip(node_id, ip, record.key, compare, ops)
            if self._txn(f"write pod {record.key}", compare, ops):
                return
        raise TryAgainLater(f"could not write pod {record.key}", "concurrent writers")

    def _claim_ip(
        self, node_id: int, ip: str, record: PodRecord, compare: list[Any], ops: list[Any]
    ) -> None:
        """Adds create-if-absent (or still-ours) for one allocation key to a transaction."""
        key = self._alloc_key(node_id, ip)
        raw, meta = self._get(key)
        since = time.time()
        if raw is None:
            compare.append(tx.Version(key) == 0)
        else:
            owner = load(raw, key)
            if (owner.get("container_id"), owner.get("ifname")) != (
                record.container_id,
                record.ifname,
            ):
                raise IPAMFailure(
                    f"{ip} is already allocated on node {node_id}", f"owner {_owner_text(owner)}"
                )
            compare.append(tx.Mod(key) == meta.mod_revision)
            since = float(owner.get("since", since))
        ops.append(self._alloc_put(node_id, ip, record, since))

    def _alloc_put(self, node_id: int, ip: str, record: PodRecord, since: float) -> Any:
        owner = {
            "container_id": record.container_id,
            "ifname": record.ifname,
            "pod_namespace": record.pod_namespace,
            "pod_name": record.pod_name,
            "since": since,
        }
        return tx.Put(self._alloc_key(node_id, ip), dump(owner))

    def _drop_ip(
        self, node_id: int, ip: str, pod: PodKey, compare: list[Any], ops: list[Any]
    ) -> None:
        """Adds the deletion of one allocation key, if this pod owns it, to a transaction."""
        key = self._alloc_key(node_id, ip)
        raw, meta = self._get(key)
        if raw is None:
            return
        owner = load(raw, key)
        if (owner.get("container_id"), owner.get("ifname")) == (pod.container_id, pod.ifname):
            compare.append(tx.Mod(key) == meta.mod_revision)
            ops.append(tx.Delete(key))

    def delete_pod(
        self, node_id: int, key: PodKey, known: PodRecord | None = None
    ) -> PodRecord | None:
        """Deletes the record and its allocations together; None if there was none.

        With `known` (the record as read a moment ago) this is one round trip: the record is
        deleted only if it is still byte for byte what was read, and its allocation keys with
        it (they are only ever written in the same transaction as the record that lists them).
        """
        pod_key = self._pod_key(node_id, key)
        if known is not None:
            ips = _ips(known.addresses, pod_key)
            ops = [tx.Delete(pod_key)] + [tx.Delete(self._alloc_key(node_id, ip)) for ip in ips]
            compare = [tx.Value(pod_key) == dump(known.to_json_dict())]
            if self._txn(f"delete pod {key}", compare, ops):
                return known
        for _ in range(_MAX_ROUNDS):
            raw, meta = self._get(pod_key)
            if raw is None:
                return None
            record = _record(raw, pod_key)
            compare = [tx.Mod(pod_key) == meta.mod_revision]
            ops = [tx.Delete(pod_key)]
            for ip in _ips(record.addresses, pod_key):
                self._drop_ip(node_id, ip, key, compare, ops)
            if self._txn(f"delete pod {key}", compare, ops):
                return record
        raise TryAgainLater(f"could not delete pod {key}", "concurrent writers")

    def get_pod(self, node_id: int, key: PodKey) -> PodRecord | None:
        pod_key = self._pod_key(node_id, key)
        raw, _meta = self._get(pod_key)
        return None if raw is None else _record(raw, pod_key)

    def list_pods(self, node_id: int) -> list[PodRecord]:
        return [
            _record(raw, meta.key.decode())
            for raw, meta in self._get_prefix(f"{self.prefix}pods/{node_id}/")
        ]

    def list_allocations(self, node_id: int) -> dict[str, dict[str, Any]]:
        """IP -> {container_id, ifname, pod_namespace, pod_name, since}."""
        prefix = f"{self.prefix}ipam/{node_id}/"
        return {
            meta.key.decode()[len(prefix) :]: load(raw, meta.key.decode())
            for raw, meta in self._get_prefix(prefix)
        }

    # ---- health -----------------------------------------------------------------------------

    def ping(self) -> None:
        """Raises TryAgainLater when no etcd member answers a read."""
        self._get(f"{self.prefix}ping")

    def close(self) -> None:
        self._client.close()


def _credentials(endpoints: list[str], tls: EtcdTLS | None) -> grpc.ChannelCredentials | None:
    """One set of channel credentials for every endpoint: all https:// with `tls`, or all
    http:// without (the config refuses anything else; this guards every other caller)."""
    schemes = {urlsplit(url if "//" in url else f"http://{url}").scheme for url in endpoints}
    if len(schemes) > 1:
        raise InvalidConfig(f"etcd endpoints {', '.join(endpoints)} mix http:// and https://",
                            "one TLS setting serves every endpoint: make them all https://")
    if schemes != {"https"}:
        if tls is not None:
            raise InvalidConfig("etcd TLS files given for http:// endpoints",
                                "use https:// endpoints, or no TLS files")
        return None
    if tls is None:
        raise InvalidConfig(f"etcd endpoint {endpoints[0]!r} is https:// but no TLS files "
                            "are given", "set EtcdCAFile (and EtcdCertFile, EtcdKeyFile for "
                            "client certificates) in the agent's config, and use it (--config)")
    try:
        return tls.credentials()
    except TLSFileError as exc:
        raise InvalidConfig(f"etcd TLS: {exc}") from exc


def _check_bound(node_name: str, node_id: int, max_id: int) -> int:
    if node_id > max_id:
        raise InvalidConfig(
            f"node {node_name} holds node ID {node_id}, above the {max_id} the IPAM config allows",
            "restore the old subnets, or release the ID (python -m agent.nodes release)",
        )
    return node_id


def _ips(addresses: list[str], where: str) -> list[str]:
    """Pod addresses (CIDR strings) -> bare IP strings, the allocation key suffix."""
    try:
        return [str(ipaddress.ip_interface(a).ip) for a in addresses]
    except ValueError as exc:
        raise InvalidConfig(f"bad pod address in {where}", str(exc)) from exc


def _record(raw: bytes, where: str) -> PodRecord:
    try:
        return PodRecord.from_json_dict(load(raw, where))
    except TypeError as exc:  # a required field missing
        raise IOFailure(f"corrupt pod record in etcd key {where}", str(exc)) from exc


def _owner_text(owner: dict[str, Any]) -> str:
    pod = pod_label(owner.get("pod_namespace", ""), owner.get("pod_name", ""))
    return f"{owner.get('container_id')}/{owner.get('ifname')} (pod {pod})"


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "no answer"
    if isinstance(exc, grpc.RpcError):
        return f"{exc.code().name}: {exc.details()}"
    return str(exc) or type(exc).__name__


def dump(data: dict[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def load(raw: bytes | None, where: str) -> dict[str, Any]:
    """Decodes a stored JSON object; a corrupt value is an I/O error naming its key."""
    try:
        data = json.loads(raw or b"")
    except ValueError as exc:
        raise IOFailure(f"corrupt JSON in etcd key {where}", str(exc)) from exc
    if not isinstance(data, dict):
        raise IOFailure(f"corrupt value in etcd key {where}", "expected a JSON object")
    return data
