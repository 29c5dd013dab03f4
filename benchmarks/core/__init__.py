"""What every room of the benchmarks shares: the harness (namespaces, agents, libcni networks),
the machine facts, statistics, markdown, the targets, iperf3 and ping (netperf), the agent's
metrics, the catalog of benchmarks, the section writer (sections), BENCHMARKS.md's first screen
(front) and the plots. The core imports no room.
"""
