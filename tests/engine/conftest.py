"""Fixtures of the engine tests: the session's wheels, a real local package index, and an
environment that sends the real ``uv`` there (never to the internet)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.engine.pkgindex import Index, PackageIndexServer
from tests.engine.wheels import plain_wheel, torch_wheel, vllm_wheel

UV = Path(sys.executable).with_name("uv")

# The vendor's rotating dev tags, as AMD publishes them for ROCm 10.x.
VLLM_DEV = "0.27.1.dev5+rocm10.0.0.gf46a9dfe2.d20260826"
VLLM_OLDER_DEV = "0.27.0.dev2+rocm10.0.0.g0123abcd.d20260801"
VLLM_NEXT_SERIES = "0.28.0.dev1+rocm10.0.0.g9999.d20260901"
VLLM_OTHER_LINE = "0.27.3.dev1+rocm10.1.0.gbeef.d20260902"
ENGINE_TORCH = "2.12.0+gitabc123"  # the build the vLLM index ships (vLLM's own pin)
SDK_TORCH = "2.12.0+rocm10.0.0"  # the SDK index's build of the same release
SDK_TORCHVISION = "0.27.0+rocm10.0.0"
STATIC_VLLM = "0.18.0+rocm700"
STATIC_TORCH = "2.9.0+git1c57644"


def _build(out: Path) -> dict[str, Path]:
    def vllm(version: str) -> Path:
        return vllm_wheel(
            version,
            [
                f"torch=={ENGINE_TORCH}",
                "torchvision==0.27.0+gitabc123",
                "flash-attn==2.8.3",
                "amd-aiter==0.1.5.post2",
                "lm-format-enforcer>=0.10",
                "amd-torch-device-gfx942",
                "amd-torchvision-device-gfx942",
            ],
        ).build(out)

    w = {
        "vllm": vllm(VLLM_DEV),
        "vllm-older": vllm(VLLM_OLDER_DEV),
        "vllm-next-series": vllm(VLLM_NEXT_SERIES),
        "vllm-other-line": vllm(VLLM_OTHER_LINE),
        "vllm-no-kernels": vllm_wheel(
            "0.27.1.dev7+rocm10.0.0.g1.d20260827",
            [f"torch=={ENGINE_TORCH}", "lm-format-enforcer>=0.10"],
        ).build(out),
        "flash-attn-2.8.3": plain_wheel("flash-attn", "2.8.3").build(out),
        "flash-attn-2.8.4": plain_wheel("flash-attn", "2.8.4").build(out),
        "amd-aiter-0.1.5.post2": plain_wheel("amd-aiter", "0.1.5.post2").build(out),
        "amd-aiter-0.1.6": plain_wheel("amd-aiter", "0.1.6").build(out),
        "engine-torch": torch_wheel(ENGINE_TORCH).build(out),
        "engine-torchvision": plain_wheel("torchvision", "0.27.0+gitabc123").build(out),
        "sdk-torch": torch_wheel(SDK_TORCH).build(out),
        "sdk-torch-newer-other-line": torch_wheel("2.12.1+rocm10.1.0").build(out),
        "sdk-torchvision": plain_wheel("torchvision", SDK_TORCHVISION).build(out),
        "plugin-torch": plain_wheel("amd-torch-device-gfx942", SDK_TORCH).build(out),
        "plugin-torch-drifted": plain_wheel("amd-torch-device-gfx942", "2.13.0+rocm10.0.0").build(
            out
        ),
        "plugin-vision": plain_wheel("amd-torchvision-device-gfx942", SDK_TORCHVISION).build(out),
        "plugin-vision-drifted": plain_wheel(
            "amd-torchvision-device-gfx942", "0.28.0+rocm10.0.0"
        ).build(out),
        "lmfe": plain_wheel("lm-format-enforcer", "0.10.1").build(out),
        "cuda-torch": torch_wheel("2.12.0", kind="cuda").build(out),
        "static-vllm": vllm_wheel(
            STATIC_VLLM, [f"torch=={STATIC_TORCH}", "lm-format-enforcer>=0.10"]
        ).build(out),
        "static-torch": torch_wheel(STATIC_TORCH).build(out),
    }
    return w


@pytest.fixture(scope="session")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _build(tmp_path_factory.mktemp("wheels"))


@pytest.fixture(scope="session")
def index_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PackageIndexServer]:
    server = PackageIndexServer(tmp_path_factory.mktemp("indexes"))
    yield server
    server.close()


@pytest.fixture(scope="session")
def uv_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("uv-cache")


@dataclass
class Vendor:
    """The indexes of one test: a vendor vLLM index and torch index (both 403 for what they
    do not host, like AMD's CDN) and a stand-in for PyPI (404)."""

    server: PackageIndexServer
    vllm: Index
    torch: Index
    pypi: Index
    pins_file: Path

    def url(self, index: Index) -> str:
        return self.server.url(index.name)

    def write_pins(self, *rows: dict[str, object], default: str = "7.0") -> Path:
        self.pins_file.write_text(json.dumps({"default_row": default, "rows": list(rows)}))
        return self.pins_file

    def discovery_row(self, rocm: str = "10.0", **overrides: object) -> dict[str, object]:
        row: dict[str, object] = {
            "rocm": rocm,
            "route": "discovery",
            "python_tag": f"cp{sys.version_info[0]}{sys.version_info[1]}",
            "vllm_index_url": self.url(self.vllm),
            "torch_index_url": self.url(self.torch),
            "series": {
                "vllm": "0.27",
                "flash-attn": "2.8",
                "amd-aiter": "0.1",
                "torch": "2.12",
                "torchvision": "0.27",
                "torchaudio": None,
            },
            "source": "test",
            "reason": "test",
        }
        row.update(overrides)
        return row

    def static_row(self, rocm: str = "7.0", **overrides: object) -> dict[str, object]:
        row: dict[str, object] = {
            "rocm": rocm,
            "route": "static",
            "python_tag": f"cp{sys.version_info[0]}{sys.version_info[1]}",
            "vllm_exact": STATIC_VLLM,
            "vllm_index_url": self.url(self.vllm),
            "torch_index_url": self.url(self.vllm),
            "series": {},
        }
        row.update(overrides)
        return row

    def stock_rocm10(self, w: dict[str, Path]) -> None:
        """What AMD's ROCm 10.0 indexes look like, conflicts and drift included."""
        self.vllm.add(
            w["vllm"],
            w["vllm-older"],
            w["vllm-next-series"],
            w["flash-attn-2.8.3"],
            w["flash-attn-2.8.4"],
            w["amd-aiter-0.1.5.post2"],
            w["amd-aiter-0.1.6"],
            w["engine-torch"],
            w["engine-torchvision"],
            w["plugin-torch-drifted"],
            w["plugin-vision-drifted"],
        )
        self.torch.add(
            w["sdk-torch"],
            w["sdk-torchvision"],
            w["plugin-torch"],
            w["plugin-vision"],
        )
        self.pypi.add(w["lmfe"], w["cuda-torch"])


@pytest.fixture
def vendor(
    request: pytest.FixtureRequest,
    index_server: PackageIndexServer,
    uv_cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Vendor:
    """Fresh indexes for this test, and uv pointed at them (cache shared per session)."""
    name = request.node.name.replace("[", "-").replace("]", "").replace("/", "-")[:60]
    vendor = Vendor(
        index_server,
        index_server.index(f"{name}-vllm", missing_status=403),
        index_server.index(f"{name}-torch", missing_status=403),
        index_server.index(f"{name}-pypi", missing_status=404),
        tmp_path / "pins.json",
    )
    monkeypatch.setenv("UV_CACHE_DIR", str(uv_cache))
    monkeypatch.setenv("UV_PYTHON_DOWNLOADS", "never")
    monkeypatch.setenv("UV_DEFAULT_INDEX", vendor.url(vendor.pypi))
    monkeypatch.setenv("INSTINCT_UV", str(UV))
    monkeypatch.setenv("INSTINCT_ENGINE_PYTHON", sys.executable)
    monkeypatch.setenv("INSTINCT_ENGINE_PINS", str(vendor.pins_file))
    for var in (
        "INSTINCT_VLLM_ROCM_INDEX_URL",
        "INSTINCT_DISABLE_TORCH_ALIGNMENT",
        "INSTINCT_TEST_FAKE_GPU_BUILD",
        "INSTINCT_VLLM_COMMAND",
        "INSTINCT_VLLM_PYTHON",
        "ROCM_CLI_VLLM_COMMAND",
        "ROCM_CLI_VLLM_PYTHON",
        "UV_INDEX_URL",
        "UV_EXTRA_INDEX_URL",
        "UV_INDEX",
    ):
        monkeypatch.delenv(var, raising=False)
    return vendor
