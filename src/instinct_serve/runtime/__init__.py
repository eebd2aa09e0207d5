"""Running endpoints: serve's deployer and backends (docker containers, native processes),
health and warm-up probes, tunnels, the endpoints this tool started, diagnosing one."""
