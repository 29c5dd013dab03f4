"""vswitch-cni: the CNI plugin executable, a thin stdlib-only shim in front of the node agent.

It validates what the runtime passes (env + stdin), forwards the verb over gRPC on a unix socket
to vswitch-agent and prints the CNI result or error object. It must import nothing outside the
standard library: it is exec'd once per pod operation, so its start-up time is product.
"""

__version__ = "0.1.0"
