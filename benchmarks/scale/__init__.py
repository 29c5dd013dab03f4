"""The node mesh at scale: one agent programming a registry of 1,000 synthetic nodes (mesh.py):
convergence, CPU, RSS, node added to routed.

    python -m benchmarks run mesh-scale [--quick]
"""
