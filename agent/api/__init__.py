"""The api wing: how the world talks to the agent.

    grpc_server.py  the CNI gRPC service (Contiv's RemoteCNI, extended): decode, run, reply
    rest.py         the read-only REST endpoint: Contiv's IPAM answer, state views, health
    httpd/          the bounded HTTP server under it (fixed workers, connection cap, deadlines,
                    a CPU budget, a slow lane for the views that leave the process)

Imports the lifecycle and the wings below; the app gives it what it serves.
"""
