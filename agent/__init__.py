"""vswitch-agent: the per-node CNI server that wires pods into a vswitch."""

__version__ = "0.1.0"
