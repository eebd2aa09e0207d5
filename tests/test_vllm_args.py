"""``vllm_args``: the one reader and editor of a vLLM argv, checked against argparse itself."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from instinct_serve import vllm_args
from instinct_serve.vllm_args import Unit


@pytest.mark.parametrize(
    ("token", "flag"),
    [
        ("--x", True),
        ("-x", True),
        ("-tp", True),
        ("--no-x", True),
        ("--x=1", True),
        ("--", True),
        ("-1", False),
        ("-0.5", False),
        ("-1e3", True),  # argparse's rule: not a plain negative number
        ("-1 x", False),  # argparse: a space makes it a value
        ('--speculative-config={"method": "mtp"}', True),  # ... but not after --name=
        ("-", False),
        ("x", False),
        ("", False),
        ('{"a": -1}', False),
    ],
)
def test_is_flag(token: str, flag: bool) -> None:
    assert vllm_args.is_flag(token) is flag


def test_units_group_every_form() -> None:
    argv = ["serve", "org/m", "--a", "1", "--b=2", "--c", "--d", "-1", "--e=x=y", "pos", "--f"]
    assert vllm_args.units(argv) == [
        Unit(None, ["serve"]),
        Unit(None, ["org/m"]),
        Unit("--a", ["--a", "1"]),
        Unit("--b", ["--b=2"]),
        Unit("--c", ["--c"]),
        Unit("--d", ["--d", "-1"]),
        Unit("--e", ["--e=x=y"]),
        Unit(None, ["pos"]),
        Unit("--f", ["--f"]),
    ]
    values = [u.value for u in vllm_args.units(argv)]
    assert values == [None, None, "1", "2", "", "-1", "x=y", None, ""]
    assert vllm_args.units([]) == []


def test_value_last_first_aliases_bare_and_absent() -> None:
    argv = ["--tensor-parallel-size", "2", "-tp", "4", "--x=", "--y", "--z", "a", "--z=b"]
    assert vllm_args.value(argv, "--z") == "b"
    assert vllm_args.value(argv, "--z", last=False) == "a"
    assert vllm_args.value(argv, "--tensor-parallel-size", "-tp") == "4"
    assert vllm_args.value(argv, "--tensor-parallel-size") == "2"
    assert vllm_args.value(argv, "--x") == ""  # given, empty
    assert vllm_args.value(argv, "--y") == ""  # a bare flag
    assert vllm_args.value(argv, "--missing") is None
    assert vllm_args.value(["--z"], "z") is None  # names are whole flags


def test_has_matches_whole_names_only() -> None:
    assert vllm_args.has(["--a=1"], "--a")
    assert vllm_args.has(["--x", "--enforce-eager"], "--enforce-eager")
    assert not vllm_args.has(["--ab"], "--a")
    assert not vllm_args.has(["--served-model-name", "--a-name"], "--a")
    assert not vllm_args.has(["--x", "--a"], "--x=")  # a value-looking name is no flag
    assert vllm_args.has(["-tp", "2"], "--tensor-parallel-size", "-tp")
    assert not vllm_args.has(["--model", "--api-key-file"], "--api-key")


def test_booleans_and_their_negation() -> None:
    assert vllm_args.negation("--enforce-eager") == "--no-enforce-eager"
    assert vllm_args.negation("--no-enforce-eager") == "--enforce-eager"
    assert vllm_args.negation("-x") == "-x"
    assert vllm_args.enabled(["--enable-prefix-caching"], "--enable-prefix-caching") is True
    assert vllm_args.enabled(["--no-enable-prefix-caching"], "--enable-prefix-caching") is False
    both = ["--no-enforce-eager", "--x", "1", "--enforce-eager"]
    assert vllm_args.enabled(both, "--enforce-eager") is True
    assert vllm_args.enabled(both[::-1], "--enforce-eager") is False
    assert vllm_args.enabled(["--enforce-eager", "--no-enforce-eager"], "--enforce-eager") is False
    assert vllm_args.enabled(["--x"], "--enforce-eager") is None


def test_remove_with_and_without_a_value_prefix() -> None:
    argv = ["--attention-backend", "ROCM_AITER_FA", "--x", "--attention-backend=TRITON_ATTN"]
    assert vllm_args.remove(argv, "--attention-backend", "ROCM_AITER") == [
        "--x",
        "--attention-backend=TRITON_ATTN",
    ]
    assert vllm_args.remove(argv, "--attention-backend") == ["--x"]
    assert vllm_args.remove(argv, "--absent") == argv
    assert vllm_args.remove(["--flag", "--y"], "--flag", "") == ["--y"]


def test_set_flag_replaces_every_form_once_at_the_end() -> None:
    assert vllm_args.set_flag(["--a=1", "--b", "x", "--a", "2"], "--a", "3") == [
        "--b",
        "x",
        "--a",
        "3",
    ]
    assert vllm_args.set_flag(["--x", "--enforce-eager"], "--enforce-eager") == [
        "--x",
        "--enforce-eager",
    ]
    assert vllm_args.set_flag(["--no-enforce-eager", "--y"], "--enforce-eager") == [
        "--y",
        "--enforce-eager",
    ]
    assert vllm_args.set_flag(["--max-num-seqs", "256"], "--max-num-seqs") == ["--max-num-seqs"]
    original = ["--a", "1"]
    vllm_args.set_flag(original, "--a", "2")
    assert original == ["--a", "1"]  # pure


def test_dedupe_keeps_the_last_of_each_option() -> None:
    assert vllm_args.dedupe(["--a", "1", "--b", "--a", "2"]) == ["--b", "--a", "2"]
    assert vllm_args.dedupe(["--block-size", "16", "--x", "--block-size=64"]) == [
        "--x",
        "--block-size=64",
    ]
    assert vllm_args.dedupe(["--n", "-1", "--n", "-2"]) == ["--n", "-2"]
    assert vllm_args.dedupe(["pos", "--a", "{}", "pos"]) == ["pos", "--a", "{}", "pos"]
    assert vllm_args.dedupe([]) == []


# --------------------------------------------------------------------------- properties

# Well-formed argvs: positionals first, then options (bare, with a value, or name=value).
OPTION = st.sampled_from(["--a", "--b", "--c", "--no-c", "-tp", "--"])
OPTION_VALUE = st.sampled_from(["1", "2", "-1", "x", "", "-"])
UNIT = st.one_of(
    OPTION.map(lambda o: [o]),
    st.tuples(OPTION, OPTION_VALUE.filter(bool)).map(list),
    st.tuples(OPTION, OPTION_VALUE).map(lambda t: [f"{t[0]}={t[1]}"]),
)
ARGV = st.tuples(
    st.lists(st.sampled_from(["serve", "org/m"]), max_size=2), st.lists(UNIT, max_size=6)
).map(lambda t: t[0] + [token for unit in t[1] for token in unit])
ANY_TOKENS = st.lists(
    st.sampled_from(["--a", "--b", "--c=3", "--no-c", "-tp", "1", "-1", "x", "--a=", "-"]),
    max_size=10,
)
NAMES = st.sampled_from(["--a", "--b", "--c", "--no-c", "-tp", "--absent"])
VALUES = st.sampled_from(["7", "-8", "x=y", "{}"])


def _names(argv: list[str]) -> list[str | None]:
    return [u.name for u in vllm_args.units(argv)]


@given(ANY_TOKENS)
def test_units_lose_no_token(argv: list[str]) -> None:
    assert [t for u in vllm_args.units(argv) for t in u.tokens] == argv


@given(ANY_TOKENS, NAMES, VALUES)
def test_set_flag_leaves_one_occurrence_and_the_rest_alone(
    argv: list[str], name: str, new: str
) -> None:
    out = vllm_args.set_flag(argv, name, new)
    assert _names(out).count(name) == 1 and out[-2:] == [name, new]
    assert vllm_args.value(out, name) == new
    assert vllm_args.remove(out, name) == vllm_args.remove(argv, name)


@given(ARGV, NAMES)
def test_setting_a_boolean_enables_it(argv: list[str], name: str) -> None:
    out = vllm_args.set_flag(argv, name)
    assert out[-1] == name and vllm_args.enabled(out, name) is True
    assert vllm_args.negation(name) not in _names(out) or name == vllm_args.negation(name)


@given(ARGV, NAMES)
def test_remove_removes_only_that_option(argv: list[str], name: str) -> None:
    out = vllm_args.remove(argv, name)
    assert not vllm_args.has(out, name)
    assert [u for u in vllm_args.units(argv) if u.name != name] == vllm_args.units(out)


@given(ANY_TOKENS, NAMES)
def test_remove_drops_exactly_the_tokens_of_that_option(argv: list[str], name: str) -> None:
    kept = [t for u in vllm_args.units(argv) if u.name != name for t in u.tokens]
    assert vllm_args.remove(argv, name) == kept


@given(ARGV)
def test_dedupe_keeps_each_value_and_is_idempotent(argv: list[str]) -> None:
    out = vllm_args.dedupe(argv)
    named = [n for n in _names(out) if n is not None]
    assert len(named) == len(set(named))
    for name in set(named):
        assert vllm_args.value(out, name) == vllm_args.value(argv, name)
    assert vllm_args.dedupe(out) == out


# argparse is the reference: vLLM's own parser is an argparse.ArgumentParser.
VALUE_TEXT = st.one_of(
    st.text(alphabet="abcxyz019_./:={}", min_size=1, max_size=6).filter(
        lambda t: not t.startswith("-")
    ),
    st.integers(max_value=-1).map(str),
    st.integers(0, 99).map(lambda n: f"-{n}.5"),
    st.just("-a value with spaces"),
)


@st.composite
def parsed_argv(draw: st.DrawFn) -> list[str]:
    argv: list[str] = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["space", "equals", "short", "bool"]))
        if kind == "bool":
            argv.append(draw(st.sampled_from(["--enforce-eager", "--no-enforce-eager"])))
            continue
        text = draw(VALUE_TEXT)
        if kind == "short":
            argv += ["-tp", text]
        elif kind == "space":
            argv += [draw(st.sampled_from(["--max-num-seqs", "--tensor-parallel-size"])), text]
        else:
            argv.append(
                draw(st.sampled_from(["--max-num-seqs", "--tensor-parallel-size"])) + "=" + text
            )
    return argv


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--max-num-seqs")
    parser.add_argument("--tensor-parallel-size", "-tp")
    parser.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction)
    return parser


@given(parsed_argv())
def test_value_and_enabled_agree_with_argparse(argv: list[str]) -> None:
    ns = _parser().parse_args(argv)
    assert vllm_args.value(argv, "--max-num-seqs") == ns.max_num_seqs
    assert vllm_args.value(argv, "--tensor-parallel-size", "-tp") == ns.tensor_parallel_size
    assert vllm_args.enabled(argv, "--enforce-eager") == ns.enforce_eager
    edited = vllm_args.set_flag(argv, "--max-num-seqs", "-5")
    assert _parser().parse_args(edited).max_num_seqs == "-5"
    assert _parser().parse_args(vllm_args.dedupe(argv)) == ns
