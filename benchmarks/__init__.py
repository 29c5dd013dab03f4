"""The benchmark suite of vswitch-cni: `python3 -m benchmarks.run [--quick] [--out FILE]`.

Every figure is measured on real components (etcd, network namespaces, the plugin exec'd through
libcni, the reference bridge + host-local plugins) and written to BENCHMARKS.md by benchmarks.run.
The soak (`python -m benchmarks.soak`: hours of pod churn, slopes and leak counts) writes its own
section of BENCHMARKS.md, which benchmarks.run keeps.
"""
