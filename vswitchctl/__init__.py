"""vswitchctl: the operator CLI over the agents' REST endpoints and etcd."""

import os

# gRPC's C core logs a failed TLS handshake to stderr itself, several lines per try; vswitchctl
# says every etcd failure in one line of its own. gRPC reads this when it is first imported, so
# it is set here, before vswitchctl's modules import it; an operator's own GRPC_VERBOSITY wins.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")
