"""The CNI path, against the reference bridge + host-local plugins where they do the same job.

- `cni` (suite.py, report.py, report_node.py, results.py): ADD/CHECK/DEL through the libcni 1.3.0
  driver one pod at a time (verbs.py), 16 runtimes at once, the plugin's exec (plugin_exec.py),
  an agent restart with 250 pods (restart.py), 500 agents racing for node IDs (nodeid.py), the
  IPAM core (ipam_core.py), ADD and DEL at a full node (full_node.py);
- `add-path`: what one kernel ADD runs; `rcu-add`: VPP's ADD and the kernel's RCU grace periods;
- `rest-flood`: ADDs while hundreds of REST clients flood the agent.

    python -m benchmarks run cni [--quick]
"""
