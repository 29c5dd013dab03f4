"""The k8s tier: the project on a real Kubernetes node (marker `k8s`)."""
