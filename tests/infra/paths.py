"""Where the real test material lives (copied from ../shared, see tests/fixtures/SOURCES.md)."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"  # smi/, logs/, configs/ (captured real outputs)
DATA = TESTS / "data"  # vllm-recipes/ (upstream corpus), amd-skill/ (facts to check against)
SMI = FIXTURES / "smi"
LOGS = FIXTURES / "logs"
CONFIGS = FIXTURES / "configs"
RECIPES_CORPUS = DATA / "vllm-recipes"
AMD_SKILL = DATA / "amd-skill"
