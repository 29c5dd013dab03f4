"""The benchmark suite of vswitch-cni: `python -m benchmarks list | run NAME [--quick] | run --all
| report` (benchmarks/__main__.py).

Every figure is measured on real components (etcd, network namespaces, the plugin exec'd through
libcni, the reference bridge + host-local plugins, a real kube-apiserver, real VPPs where the
machine has them) and written by its benchmark into its own section of BENCHMARKS.md, under a
headline table drawn from the sections. Rooms by the question they answer: `cni`, `traffic`,
`policy`, `soak`, `scale`; they use `core` and the shipped code, never each other
(pyproject.toml's import contracts).
"""
