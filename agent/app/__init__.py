"""The app wing: the composition root, the one place that reads the config and chooses the
implementations (kernel or VPP dataplane, the cluster side or none).

    config.py         the YAML config, validated once at start (AgentConfig)
    config_values.py  the parsers of its values, each naming the key it refuses
    agent.py          the agent process: builds every part in order, runs until SIGTERM
    gauges.py         its scrape-time gauges;  rest_view.py  what REST serves of it
    running.py        what those two read of the agent (a Protocol: they never import agent.py)
    wiring.py         the dataplane driver, its config and the NAT plan, from the config
    cluster_side.py   registry, liveness and mesh controller, from the config
    teardown.py       `--teardown`: what a stopped agent left on the node
    node_commands.py  the operator's node commands (node remove/list, agent.nodes)
"""
