"""`python -m agent.nodes release|list`: node IDs in etcd (agent/app/node_commands)."""

import sys

from agent.app.node_commands import nodes_main

if __name__ == "__main__":
    sys.exit(nodes_main())
