"""Every error id the tool reports: its exit class and a generic fix.

Agents branch on ``error.id`` (``errors.InstinctError``), so the ids are an interface: this
table names each one once, with the exit code of the class it is raised with and a fix that
holds wherever it is raised (the raise site's own ``fix`` is more precise and wins in the
output). ``tests/test_errors.py`` walks the source: every id raised is here, every id here is
raised, and every raise site uses an exit class this table gives the id.

Ids of the form ``bad_<option>`` (a value of an option of ``options.py`` that does not
convert or is out of bounds) are declared once, as ``OPTION_PATTERN``.

A few ids are raised with two exit classes today (``also``): the same failure seen as bad
input by one command and as an environment problem by another. They are listed so that a new
mix shows up in review; the table does not change what any command exits with.
"""

from __future__ import annotations

from typing import NamedTuple

from instinct_serve.errors import ExitCode

FAILED = ExitCode.FAILED
USAGE = ExitCode.USAGE
NOT_READY = ExitCode.NOT_READY


class ErrorId(NamedTuple):
    """One error id: the exit class it is raised with, and what to do about it."""

    exit: ExitCode
    fix: str
    also: tuple[ExitCode, ...] = ()  # other exit classes some raise sites use

    @property
    def exits(self) -> tuple[ExitCode, ...]:
        return (self.exit, *self.also)


OPTION_PATTERN = "bad_<option>"
OPTION_ERROR = ErrorId(USAGE, "see `instinct COMMAND --help` for the option's values and range")

ERRORS: dict[str, ErrorId] = {
    # bad usage or input (exit 2)
    "ambiguous_endpoint": ErrorId(USAGE, "name the endpoint (`instinct ps` lists them)"),
    "ambiguous_plan_hash": ErrorId(USAGE, "give more of the plan hash"),
    "api_key_missing": ErrorId(
        USAGE,
        "export the key's variable (the endpoint's API key) or drop --env for it; with --public "
        "a key is generated",
        (NOT_READY,),
    ),
    "approval_required": ErrorId(
        USAGE,
        "call without confirm to get the summary, show it to the user, then call again with "
        "confirm=true and its hash (plan_hash, change_hash)",
    ),
    "bad_api_key_env": ErrorId(
        USAGE, "export the variable that holds the endpoint's API key, and try again"
    ),
    "bad_argv": ErrorId(USAGE, "correct the command line (`instinct COMMAND --help`)"),
    "bad_bench_ref": ErrorId(
        USAGE, "give a plan hash (`instinct bench list`) or the path of a result file"
    ),
    "bad_bench_result": ErrorId(USAGE, "give a file written by `vllm bench serve --save-result`"),
    "bad_concurrency": ErrorId(
        USAGE, "give a comma-separated list of levels, e.g. --concurrency 1,4,16"
    ),
    "bad_config": ErrorId(
        USAGE, "check the model's config.json (re-download it, or correct the value)"
    ),
    "bad_context_length": ErrorId(
        USAGE, "correct the recipe (or run `instinct recipes sync`), or pass --max-model-len"
    ),
    "bad_cpu_kv_space": ErrorId(
        USAGE,
        "give the GiB of RAM for the KV cache as a number, "
        "e.g. --env-literal VLLM_CPU_KVCACHE_SPACE=4",
    ),
    "bad_env": ErrorId(USAGE, "give NAME=VALUE with a value of one line"),
    "bad_env_name": ErrorId(
        USAGE, "variable names are letters, digits and '_' (not starting with a digit)"
    ),
    "bad_env_value": ErrorId(USAGE, "correct the recipe or override file that sets it"),
    "bad_format": ErrorId(USAGE, "use a --format the command offers (`instinct plan --help`)"),
    "bad_host": ErrorId(USAGE, "use host, user@host, user@host:port or user@[ipv6]:port"),
    "bad_gfx": ErrorId(USAGE, "give one of --gpu or --gfx"),
    "bad_index_override": ErrorId(
        USAGE, "set it to a PEP 503 index URL, e.g. https://wheels.vllm.ai/rocm/0.18.0/rocm700"
    ),
    "bad_input": ErrorId(
        USAGE,
        "correct the arguments (`instinct COMMAND --help`, or the tool's input schema)",
        (FAILED,),
    ),
    "bad_interval": ErrorId(USAGE, "give a positive number of seconds, e.g. --interval 2"),
    "bad_model_config": ErrorId(
        USAGE,
        "check the model's config.json (re-download it, or correct the value); instinct-serve "
        "refuses values no published model has",
    ),
    "bad_model_id": ErrorId(
        USAGE, "give a model id as org/name (`instinct recipes list` shows the known ones)"
    ),
    "bad_model_metadata": ErrorId(
        USAGE, "check the model's safetensors files or index (re-download them)"
    ),
    "bad_partition_mode": ErrorId(
        USAGE, "use a mode the GPU offers (`instinct partition` lists them)"
    ),
    "bad_pin_table": ErrorId(
        USAGE, "fix the file or unset INSTINCT_ENGINE_PINS to use the built-in table"
    ),
    "bad_rocm_version": ErrorId(USAGE, "give major.minor, e.g. --rocm 7.0"),
    "bad_safetensors": ErrorId(
        USAGE, "check that the file is a complete safetensors file (re-download it)"
    ),
    "bad_safetensors_index": ErrorId(
        USAGE,
        "re-download model.safetensors.index.json, or remove it to read the shards' own headers",
    ),
    "bad_tp_for_model": ErrorId(
        USAGE, "use a --tp that divides the model's attention heads (the fix lists them)"
    ),
    "bad_usage": ErrorId(USAGE, "correct the command line (`instinct COMMAND --help`)"),
    "bad_vram": ErrorId(USAGE, "--vram-gb is 10^9 bytes, --vram-gib 2^30 bytes"),
    "bench_not_found": ErrorId(USAGE, "list them with `instinct bench list`"),
    "config_incomplete": ErrorId(
        USAGE, "check that the model is a decoder LLM with a complete config.json"
    ),
    "confirmation_required": ErrorId(
        USAGE, "rerun with --yes (or --dry-run to see what would be installed)"
    ),
    "conflicting_precision": ErrorId(
        USAGE,
        "drop --precision, or name the checkpoint itself (`instinct recipes show MODEL` lists "
        "them)",
    ),
    "empty_log": ErrorId(USAGE, "check the log source (the file, or `instinct logs NAME`)"),
    "external_override": ErrorId(
        USAGE, "unset it for this run (install first with `instinct engine install vllm`)"
    ),
    "import_bad_file": ErrorId(
        USAGE, "pass a recipes_cache.json written by the agent skill or by instinct-serve"
    ),
    "import_unreadable": ErrorId(USAGE, "check the path"),
    "k8s_only": ErrorId(USAGE, "add --format k8s"),
    "log_not_found": ErrorId(USAGE, "check the path"),
    "log_unreadable": ErrorId(USAGE, "check its permissions"),
    "model_dir_invalid": ErrorId(
        USAGE, "pass the directory that holds the model's config.json and weights"
    ),
    "model_dir_not_found": ErrorId(
        USAGE,
        "pass an existing model directory (config.json, *.safetensors, tokenizer) or a Hugging "
        "Face id (org/name)",
    ),
    "model_dir_unreadable": ErrorId(
        USAGE,
        "check the permissions of the model directory (and that config.json is not a link to "
        "itself)",
    ),
    "name_in_use": ErrorId(USAGE, "stop the endpoint of that name first, or choose another --name"),
    "no_config": ErrorId(
        USAGE,
        "serve a transformers-format checkpoint of the model, or pass a local directory holding "
        "config.json",
    ),
    "no_gpu_memory": ErrorId(
        USAGE, "pass --gpu mi300x (a profile) or --vram-gb, or run on the GPU host"
    ),
    "no_last_good": ErrorId(USAGE, "a last-good plan is kept by `instinct serve ... --upgrade`"),
    "no_partition_modes": ErrorId(
        USAGE, "use a GPU that supports compute partitioning (`instinct partition` says which)"
    ),
    "not_a_model_dir": ErrorId(
        USAGE, "pass a directory holding config.json, or a hub id such as Qwen/Qwen3.5-9B"
    ),
    "not_amd_gpu": ErrorId(USAGE, "this tool plans for AMD Instinct GPUs: name one with --gpu"),
    "plan_not_recorded": ErrorId(
        USAGE,
        "serve its current plan once more (it is reused and recorded), or replace it without a "
        "way back",
        (NOT_READY,),
    ),
    "revision_not_found": ErrorId(USAGE, "check the branch, tag or commit on the Hub"),
    "router_not_reloadable": ErrorId(
        USAGE,
        "restart the group once (`instinct stop NAME`, then serve its plan); later upgrades swap "
        "replicas without an outage",
    ),
    "secret_in_args": ErrorId(
        USAGE, "pass secrets by name: export the variable and add --env NAME"
    ),
    "too_many_replicas": ErrorId(USAGE, "use fewer --replicas, a smaller --tp, or more GPUs"),
    "tp_exceeds_gpus": ErrorId(USAGE, "use a smaller --tp or more GPUs"),
    "tp_not_allowed": ErrorId(USAGE, "use a --tp the fix lists (or --force)"),
    "unknown_dtype": ErrorId(
        USAGE, "report the model id; the weight size cannot be computed exactly"
    ),
    "unknown_feature": ErrorId(USAGE, "use a feature the fix lists"),
    "unknown_feature_mode": ErrorId(USAGE, "use a mode the fix lists"),
    "unknown_gfx": ErrorId(USAGE, "use a gfx target the fix lists"),
    "unknown_gpu": ErrorId(USAGE, "use a GPU the fix lists (`instinct fit --help`)"),
    "unknown_gpu_profile": ErrorId(USAGE, "use a GPU the fix lists (`instinct fit --help`)"),
    "unknown_model": ErrorId(
        USAGE, "check the model id (`instinct recipes list`), or pass a Hub id or a local directory"
    ),
    "unknown_option": ErrorId(USAGE, "see `instinct COMMAND --help`"),
    "unknown_precision": ErrorId(USAGE, "use a precision the fix lists"),
    "unknown_variant": ErrorId(
        USAGE, "use a variant the fix lists (`instinct recipes show MODEL`)"
    ),
    "unsized_model": ErrorId(
        USAGE,
        "pass --tp N, or make the model's config readable (HF_TOKEN for a gated model, "
        "HF_ENDPOINT for a mirror, or a local directory)",
    ),
    "unsupported_precision": ErrorId(
        USAGE,
        "pick a precision the GPU runs (another --precision or checkpoint)",
        (FAILED,),
    ),
    "upgrade_does_not_fit": ErrorId(
        USAGE,
        "upgrade onto other GPUs (--gpus), or onto two or more replicas (replaced one at a time)",
    ),
    "vllm_override_invalid": ErrorId(
        USAGE,
        "point the override variable at a vLLM executable or a venv holding one, or unset it",
        (NOT_READY,),
    ),
    "which_endpoint": ErrorId(USAGE, "name the endpoint (one watch per endpoint)"),
    # the environment is not ready (exit 3)
    "containers_unreadable": ErrorId(
        NOT_READY, "start Docker on the host (or wait until it answers), then try again"
    ),
    "docker_missing": ErrorId(NOT_READY, "install Docker (docker.io or docker-ce) on the host"),
    "docker_permission": ErrorId(
        NOT_READY,
        "add the user to the docker group (sudo usermod -aG docker $USER), then log in again",
    ),
    "docker_timeout": ErrorId(NOT_READY, "check the Docker daemon (docker info) on the host"),
    "docker_unavailable": ErrorId(NOT_READY, "start it (systemctl start docker, or run dockerd)"),
    "gated_model": ErrorId(
        NOT_READY,
        "accept the model's license on the Hub, then export HF_TOKEN=<a read token of that "
        "account>",
    ),
    "gpu_required": ErrorId(
        NOT_READY,
        "run `instinct engine install vllm` and `instinct detect`; there is no CPU fallback",
    ),
    "host_unreachable": ErrorId(
        NOT_READY, "check that the host is reachable and its login shell does not fail"
    ),
    "hub_refused": ErrorId(
        NOT_READY, "check HF_TOKEN and the access rights of its account to this repository"
    ),
    "index_unreachable": ErrorId(
        NOT_READY,
        "check the network path to the wheel index (or set INSTINCT_VLLM_ROCM_INDEX_URL to a "
        "reachable one)",
    ),
    "key_write_failed": ErrorId(
        NOT_READY, "check that the tool's data directory on the host is writable"
    ),
    "lock_unsupported": ErrorId(NOT_READY, "use the local host or an ssh host"),
    "mcp_sdk_missing": ErrorId(
        NOT_READY, "install the MCP extra into this environment: pip install 'instinct-serve[mcp]'"
    ),
    "mkdir_failed": ErrorId(NOT_READY, "check the permissions of the parent directory"),
    "mktemp_failed": ErrorId(NOT_READY, "check /tmp"),
    "model_metadata_unavailable": ErrorId(
        NOT_READY, "check the network or HF_TOKEN, or pass the model's local directory"
    ),
    "native_windows": ErrorId(
        NOT_READY,
        "install WSL2 with a ROCm-enabled Linux distribution and run instinct inside it "
        "(https://rocm.docs.amd.com/projects/radeon/en/latest/docs/install/wsl/install-radeon.html)",
    ),
    "no_endpoint": ErrorId(NOT_READY, "start one with `instinct serve MODEL`, or name it"),
    "no_gpu": ErrorId(NOT_READY, "check that the amdgpu driver is loaded (`instinct detect`)"),
    "nodes_not_ready": ErrorId(
        NOT_READY,
        "make every node match rank 0 (same GPUs, same image id, the interface named by "
        "--ifname), then serve again",
    ),
    "not_ready": ErrorId(NOT_READY, "run `instinct check` for the details and fixes"),
    "not_running": ErrorId(NOT_READY, "start it again with `instinct serve`"),
    "pin_unresolved": ErrorId(
        NOT_READY,
        "set INSTINCT_VLLM_ROCM_INDEX_URL to a wheel index that has the vLLM release, or pass "
        "another --vllm-version",
    ),
    "python_tag_mismatch": ErrorId(
        NOT_READY,
        "use the Python the wheels need: remove the managed venv and rerun, or set "
        "INSTINCT_ENGINE_PYTHON",
    ),
    "remote_data_dir": ErrorId(NOT_READY, "set INSTINCT_DATA_DIR in the remote login environment"),
    "rocm_build_mismatch": ErrorId(
        NOT_READY,
        "set INSTINCT_VLLM_ROCM_INDEX_URL to the index for the host's ROCm, or install with a "
        "matching --rocm",
    ),
    "rocm_discovery_unpinned": ErrorId(
        NOT_READY,
        "set INSTINCT_VLLM_ROCM_INDEX_URL to the vLLM wheel index for this ROCm, or add a row to "
        "the pin table",
    ),
    "rocm_version_unknown": ErrorId(
        NOT_READY, "pass --rocm X.Y, or set INSTINCT_VLLM_ROCM_INDEX_URL to a vLLM ROCm wheel index"
    ),
    "router_incoherent": ErrorId(
        NOT_READY,
        "see which server answers on the router's port: `instinct ps`, `instinct logs ROUTER`",
    ),
    "server_not_found": ErrorId(
        NOT_READY,
        "install the server (a ROCm build) into a Python environment and name its interpreter "
        "(INSTINCT_SGLANG_PYTHON for SGLang), or serve it with --engine docker",
    ),
    "server_unusable": ErrorId(
        NOT_READY,
        "point the server's interpreter variable at an environment with a ROCm build of it, "
        "or serve it with --engine docker",
    ),
    "serve_lock_failed": ErrorId(
        NOT_READY, "check that the tool's data directory on the host is writable"
    ),
    "serve_lock_timeout": ErrorId(
        NOT_READY,
        "wait for the other serve to finish (`instinct ps` shows what it launched), then serve "
        "again",
    ),
    "ssh_auth_failed": ErrorId(
        NOT_READY, "run ssh-copy-id for the host (or load your key with ssh-add)"
    ),
    "ssh_failed": ErrorId(NOT_READY, "read ssh's message; check the host with `ssh HOST true`"),
    "ssh_host_key": ErrorId(
        NOT_READY, "verify the fingerprint, then connect once with `ssh HOST` to record it"
    ),
    "ssh_missing": ErrorId(NOT_READY, "install OpenSSH (e.g. apt-get install openssh-client)"),
    "ssh_refused": ErrorId(
        NOT_READY, "start sshd on the host or pass the right port (--host user@host:port)"
    ),
    "ssh_unreachable": ErrorId(
        NOT_READY, "check that the host is up and reachable from here (VPN, firewall)"
    ),
    "ssh_unresolvable": ErrorId(NOT_READY, "check the --host spelling or your DNS / ~/.ssh/config"),
    "tunnel_failed": ErrorId(
        NOT_READY, "check that sshd allows TCP forwarding (AllowTcpForwarding yes) on the host"
    ),
    "tunnel_unsupported": ErrorId(NOT_READY, "use the local host or an ssh host"),
    "unsupported_gpu": ErrorId(
        NOT_READY, "run on a GPU this tool supports (`instinct detect` shows what it found)"
    ),
    "uv_missing": ErrorId(
        NOT_READY,
        "install it (pip install uv, or see "
        "https://docs.astral.sh/uv/getting-started/installation/), or set INSTINCT_UV to its path",
    ),
    "venv_failed": ErrorId(
        NOT_READY,
        "install the Python the wheels need (or allow uv to download it), or set "
        "INSTINCT_ENGINE_PYTHON",
    ),
    "vllm_not_found": ErrorId(
        NOT_READY,
        "run `instinct engine install vllm`, or set INSTINCT_VLLM_PYTHON to an interpreter whose "
        "environment has a ROCm build of vLLM",
    ),
    "vllm_unusable": ErrorId(
        NOT_READY, "run `instinct engine install vllm` for a managed ROCm build"
    ),
    "weights_not_cached": ErrorId(
        NOT_READY, "unset HF_HUB_OFFLINE to download it, or copy the model's cache there"
    ),
    # what was asked failed (exit 1)
    "bench_failed": ErrorId(FAILED, "read the bench client's output in the error's details"),
    "blacklisted": ErrorId(FAILED, "serve a text-generation model (the fix names an alternative)"),
    "cache_seed_failed": ErrorId(
        FAILED,
        "the node compiles for itself: check that tar runs on both nodes and the node's cache "
        "directory is writable",
    ),
    "cache_write_failed": ErrorId(
        FAILED,
        "check the permissions and free space of the cache directory (INSTINCT_CACHE_DIR), or "
        "wait for the other sync to finish",
    ),
    "cancelled": ErrorId(FAILED, "call again with confirm=true when the user wants it"),
    "coherence_probe_failed": ErrorId(
        FAILED, "read the server log (`instinct logs NAME`) or run `instinct diagnose`"
    ),
    "coherence_probe_timeout": ErrorId(
        FAILED,
        "the first request compiles kernels: raise the timeout, and watch `instinct logs -f NAME`",
    ),
    "compile_cache_unremovable": ErrorId(
        FAILED, "remove the directory by hand (files a container wrote may be root's)"
    ),
    "compile_cache_unwritable": ErrorId(
        FAILED,
        "make the directory writable, point --compile-cache at one that is, or pass "
        "--compile-cache off",
    ),
    "completion_failed": ErrorId(
        FAILED, "read the server log (`instinct logs NAME`) or run `instinct diagnose`"
    ),
    "completion_timeout": ErrorId(
        FAILED,
        "the first request compiles kernels: raise the timeout, and watch `instinct logs -f NAME`",
    ),
    "container_name_conflict": ErrorId(
        FAILED, "stop it first (or pass --replace), or choose another --name", (NOT_READY,)
    ),
    "container_not_found": ErrorId(FAILED, "list them with `instinct ps --hosts ...`", (USAGE,)),
    "data_file_damaged": ErrorId(
        FAILED, "reinstall instinct-serve (pip install --force-reinstall instinct-serve)"
    ),
    "device_missing": ErrorId(
        FAILED,
        "check that the amdgpu driver is loaded (ls /dev/kfd /dev/dri) and run `instinct check`",
    ),
    "disk_full": ErrorId(
        FAILED,
        "free space under /var/lib/docker (docker system prune) or the HF cache",
        (NOT_READY,),
    ),
    "docker_failed": ErrorId(FAILED, "check `docker info` on the host"),
    "docker_run_failed": ErrorId(
        FAILED, "read docker's message above; `instinct plan --json` shows the exact argv"
    ),
    "does_not_fit": ErrorId(
        FAILED,
        "use more or larger GPUs, a smaller or quantized checkpoint, or a shorter --max-model-len",
    ),
    "endpoint_error": ErrorId(FAILED, "read the server log (`instinct logs NAME`)"),
    "endpoint_exists": ErrorId(
        FAILED, "pass --replace to stop it and launch this plan instead, or use another --port"
    ),
    "endpoint_unreachable": ErrorId(
        FAILED, "check that the server is up (`instinct ps`, `instinct logs NAME`)"
    ),
    "failed": ErrorId(
        FAILED, "read the message; `instinct check` and `instinct diagnose` help find the cause"
    ),
    "fingerprint_failed": ErrorId(
        FAILED,
        "the endpoint did not answer the fingerprint's scoring requests: read the server log "
        "(`instinct logs NAME`); a server without prompt log-probabilities cannot be checked",
    ),
    "fingerprint_timeout": ErrorId(
        FAILED, "the endpoint is busy or slow: raise the fingerprint's time bound, or retry"
    ),
    "git_failed": ErrorId(
        FAILED,
        "check --repo-url and the network; a broken checkout can be deleted and synced again",
    ),
    "git_missing": ErrorId(FAILED, "install git (e.g. apt-get install git), or use --source api"),
    "gpu_unsupported_by_recipe": ErrorId(
        FAILED, "use one of the GPUs the recipe verifies, or --force"
    ),
    "group_exists": ErrorId(
        FAILED, "stop it (`instinct stop GROUP --hosts ...`) or pass --replace"
    ),
    "group_missing": ErrorId(
        FAILED, "use a vLLM ROCm image (vllm/vllm-openai-rocm) or numeric --group-add GIDs"
    ),
    "hub_bad_response": ErrorId(FAILED, "retry later; check --hub-url"),
    "hub_no_release": ErrorId(FAILED, "retry later; pass an image explicitly with --image"),
    "hub_unreachable": ErrorId(FAILED, "check the network (or --hub-url), then retry"),
    "image_not_found": ErrorId(
        FAILED,
        "check the image name and tag (e.g. vllm/vllm-openai-rocm:latest) and `docker login` for "
        "private registries",
    ),
    "image_pull_failed": ErrorId(
        FAILED,
        "check the host's network or proxy (docker info | grep -i proxy), or bring the image "
        "over with `docker save | docker load`",
    ),
    "import_empty": ErrorId(FAILED, "check the file: it holds no recipes"),
    "internal_error": ErrorId(
        FAILED, "this is a bug in instinct-serve; the server's stderr has the traceback"
    ),
    "internal_plan_error": ErrorId(
        FAILED, "this is a bug in instinct-serve: report the command and its --json output"
    ),
    "launch_failed": ErrorId(
        FAILED, "check that the command exists and the state directory is writable"
    ),
    "max_model_len_too_large": ErrorId(
        FAILED, "use a smaller --max-model-len, --kv-cache-dtype fp8, or more GPUs"
    ),
    "model_not_found": ErrorId(
        FAILED, "check the model id (org/name) and HF_TOKEN for a private one", (USAGE,)
    ),
    "needs_newer_vllm": ErrorId(
        FAILED,
        "run `instinct recipes sync` for the newest vllm/vllm-openai-rocm release, or pass a "
        "newer image (e.g. vllm/vllm-openai-rocm:nightly)",
    ),
    "known_bad_stack": ErrorId(
        FAILED,
        "apply the fix the refusal names (its source is a public issue), use the known-good "
        "image it names (--image), or --force to launch anyway",
    ),
    "needs_nightly": ErrorId(
        FAILED, "pass a nightly image (--image vllm/vllm-openai-rocm:nightly), or --force"
    ),
    "split_not_allowed": ErrorId(
        USAGE,
        "use fewer GPUs per node (--gpu-count N) with --strategy multi_node_tp_pp, so each "
        "node runs a TP the model takes",
    ),
    "no_eagle3_draft": ErrorId(
        USAGE,
        "name the EAGLE3 draft model after --: --speculative-config "
        '\'{"method": "eagle3", "model": "DRAFT", "num_speculative_tokens": N}\'',
    ),
    "no_valid_tp": ErrorId(FAILED, "use more GPUs or a smaller checkpoint"),
    "not_found": ErrorId(
        FAILED,
        "list the endpoints with `instinct ps`",
        (
            USAGE,
            NOT_READY,
        ),
    ),
    "not_managed": ErrorId(
        FAILED,
        "only what instinct-serve launched or installed can be changed: list it with `instinct ps`",
        (
            USAGE,
            NOT_READY,
        ),
    ),
    "output_too_large": ErrorId(
        FAILED, "narrow the request (fewer log lines, a symptom instead of a log)"
    ),
    "plan_changed": ErrorId(FAILED, "plan again, and show the new summary to the user"),
    "change_changed": ErrorId(
        FAILED, "show the new summary of what would be touched to the user, then confirm it"
    ),
    "port_in_use": ErrorId(
        FAILED,
        "pick another --port, or see what holds it with `instinct ps` / `ss -tlnp`",
        (NOT_READY,),
    ),
    "port_in_use_managed": ErrorId(
        FAILED, "pass --replace to stop it and launch this plan instead, or use another --port"
    ),
    "realpath_failed": ErrorId(FAILED, "check the host (`instinct check`)"),
    "processes_survive": ErrorId(
        FAILED,
        "check the processes it names (`ps -o pid,stat,args -p PID`): one in state D waits on a "
        "hung driver call (see `dmesg`); end the others with `kill -9 PID`, then stop it again",
    ),
    "recipes_api_failed": ErrorId(FAILED, "check the network (or --api-url), then retry"),
    "recipes_api_unreachable": ErrorId(FAILED, "check the network (or --api-url), then retry"),
    "recovery_failed": ErrorId(
        FAILED,
        "an interrupted change could not be finished or undone: `instinct ps` names it; "
        "read `instinct logs NAME`, then serve the plan you want again",
    ),
    "router_unhealthy": ErrorId(FAILED, "read its log: `instinct logs ROUTER`", (NOT_READY,)),
    "scrape_failed": ErrorId(
        FAILED, "a vLLM still loading answers 503; wait for `instinct ps` to say healthy"
    ),
    "stacks_invalid": ErrorId(
        FAILED, "fix validated_stacks.json in the synced repository (catalog.schema.StacksDoc)"
    ),
    "sync_empty": ErrorId(FAILED, "check --repo-url / --api-url"),
    "too_tight": ErrorId(
        FAILED, "use a smaller --max-model-len, --kv-cache-dtype fp8, more GPUs (--tp), or --force"
    ),
    "unsupported_quantization": ErrorId(
        FAILED, "drop --quantization or serve a checkpoint in a precision this GPU runs"
    ),
    "uv_failed": ErrorId(
        FAILED,
        "read uv's message above; `instinct engine install vllm --dry-run` shows what would be "
        "installed without changing anything",
    ),
    "uv_timeout": ErrorId(FAILED, "check the network path to the package index and retry"),
    "variant_not_for_gpu": ErrorId(FAILED, "serve another variant of the recipe, or --force"),
    "warmup_failed": ErrorId(
        FAILED, "read the server log (`instinct logs NAME`) or run `instinct diagnose`"
    ),
    "warmup_timeout": ErrorId(
        FAILED,
        "the first request compiles kernels: raise --warmup-timeout, and watch `instinct logs -f "
        "NAME`",
    ),
    "weights_download_failed": ErrorId(
        FAILED,
        "check the network path to the Hub (HF_ENDPOINT for a mirror); run `instinct pull` "
        "again: the files it finished are kept",
    ),
    "weights_unknown": ErrorId(
        FAILED,
        "pass a local model directory with its *.safetensors files, or go online so the Hub's "
        "safetensors metadata can be read",
    ),
    "write_failed": ErrorId(FAILED, "check the permissions of its directory", (NOT_READY,)),
}


def option_ids() -> set[str]:
    """The ``bad_<option>`` ids: one per option of a job (``options.py``)."""
    from instinct_serve.options import JOB_OPTIONS, declared

    return {
        f"bad_{name}"
        for cls in JOB_OPTIONS
        for name, spec, _default in declared(cls)
        if not spec.error_id
    }


def lookup(error_id: str) -> ErrorId | None:
    """The entry of ``error_id`` (an ``OPTION_PATTERN`` id included), or None if unknown."""
    if error_id in ERRORS:
        return ERRORS[error_id]
    return OPTION_ERROR if error_id in option_ids() else None
