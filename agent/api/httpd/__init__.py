"""A small bounded HTTP/1.1 server for the agent's read-only REST endpoint (agent/api/rest).

Why not the stdlib's ThreadingHTTPServer: it starts one thread per connection with no cap, waits
30 s for a silent client, and socketserver prints each aborted connection's traceback to stderr
(issue #23: 4000 slow connections made 3,900 threads; 3 resets wrote 75 raw lines into the JSON
log). Here what a client can cost is fixed in advance:

- one event-loop thread (selectors, non-blocking sockets) accepts, reads request heads and
  writes replies: a slow or silent client costs a buffer and a file descriptor, never a thread;
- at most `max_connections` connections; one more is answered a best-effort 503 and closed at
  once (the listen backlog stays drained, so nobody piles up in the kernel either);
- a request head must be complete within `header_timeout` of the connection becoming idle
  (accepted, or its last reply written), and a reply must be taken within the same time:
  slowloris clients and clients that never read are dropped. A head is at most MAX_HEAD bytes
  (414 when the request line alone is longer, else 431) and at most 100 header fields (431);
- `workers` threads, started once, turn complete heads into replies: the route handler is the
  only code that runs there, so nothing a client does on the wire holds a worker;
- requests for the few routes that wait on something outside the process (`slow(target)`:
  agent/api/rest's etcd reads and live check) have a lane of their own, one thread taking at most
  SLOW_RATE of them a second, at most SLOW_QUEUE waiting (more: 503 at once): they can neither
  hold up /liveness, /readiness and /metrics, nor hold connections without a deadline, nor turn
  a flood into load on etcd or the dataplane;
- all REST threads together use at most CPU_SHARE of one core over time (a token bucket of
  CPU seconds; each thread charges its own thread time): the agent is one Python process, and a
  REST thread that runs holds the GIL the CNI threads need, so a flood slows REST, not ADDs;
- a reset or aborted connection is one DEBUG line at most, and at most one such line a second
  (with the count of the others): a client cannot flood the log, and nothing goes to stderr.

wire.py: request heads in, replies out (pure); budget.py: token buckets and throttled log lines;
limits.py: the bounds; server.py: the event loop and the workers.
"""

from agent.api.httpd.budget import Bucket
from agent.api.httpd.limits import CPU_BURST, CPU_SHARE, SLOW_RATE, Limits
from agent.api.httpd.server import Handler, HttpServer
from agent.api.httpd.wire import JSON_TYPE, MAX_HEAD, Response, error_response

__all__ = [
    "CPU_BURST", "CPU_SHARE", "JSON_TYPE", "MAX_HEAD", "SLOW_RATE", "Bucket", "Handler",
    "HttpServer", "Limits", "Response", "error_response",
]
