"""The soak: a node keeps N live pods while pods are added and deleted through the real plugin
for hours, every cycle checked; slopes of memory, fds and latency per 1,000 cycles, leak counts
(run.py drives, churn.py cycles, sample.py reads the node, trend.py judges, report.py writes).

    python -m benchmarks run soak [--minutes 1440]
"""
