# The vswitch-cni image: the agent, and the plugin that its init container installs on the host
# (with loopback and portmap from Debian's containernetworking-plugins when the node lacks them).
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-pip iproute2 \
    containernetworking-plugins libnftables1 wireguard-tools wireguard-go \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/vswitch-cni
COPY pyproject.toml README.md ./
COPY agent agent
COPY cni_client cni_client
COPY ipam ipam
COPY policy policy
COPY services services
COPY protos protos
COPY vswitchctl vswitchctl
RUN pip3 install --break-system-packages --no-cache-dir .
ENTRYPOINT []
CMD ["vswitch-agent", "--config", "/etc/vswitch-cni/agent.yaml"]
