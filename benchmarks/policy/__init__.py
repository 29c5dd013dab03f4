"""NetworkPolicy: the compiler, the nftables renderer, enforcement on a node and at cluster scale.

- `policy-compile` (compiler.py): 1,000 policies over 5,000 pods, in process;
- `policy-kernel` (kernel.py): the renderer's change times and packet cost at a full node;
- `policy-enforce` (enforce.py, enforce_report.py, kube.py): a change in a real kube-apiserver to
  enforcement, and ADD with policy on and off;
- `policy-scale` (scale.py, scale_report.py): one agent before an API server holding 5,000 nodes.

    VSWITCH_TEST_KUBE_APISERVER=BINARY python -m benchmarks run policy-enforce [--quick]
"""
