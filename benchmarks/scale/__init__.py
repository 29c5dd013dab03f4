"""Scale: what the agents cost when the cluster is big.

- `mesh-scale` (mesh.py): one agent programming a registry of 1,000 synthetic nodes:
  convergence, CPU, RSS, node added to routed;
- `api-load` (apiserver.py): what N agents' watches (N = 1, 10, 50) cost one kube-apiserver
  holding a KWOK-made cluster (benchmarks.core.kwok): its CPU and the bytes it sends.

    python -m benchmarks run mesh-scale [--quick]
    VSWITCH_TEST_KUBE_APISERVER=BINARY python -m benchmarks run api-load [--quick]
"""
