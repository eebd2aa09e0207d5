"""Running endpoints: docker containers, health and warm-up probes, tunnels, startup phases."""
