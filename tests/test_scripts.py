"""The Lua scripts: files shipped as package data, assembled once, complete."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

import fakeredis
import pytest

from sdk.store import StoreLimits
from stores._scripts import _templates, build_scripts, lua_files
from stores.redis import RedisStore

ROOT = Path(__file__).resolve().parent.parent


def test_every_script_the_store_calls_has_a_file() -> None:
    source = "\n".join(p.read_text() for p in (ROOT / "stores").glob("*.py"))
    called = set(re.findall(r'\.(?:call|pipelined|each)\(\s*"(\w+)"', source))  # StoreCore's
    called |= set(re.findall(r'scripts\["(\w+)"\]', source))  # run by the lane directly
    assert len(called) >= 20
    assert called == set(build_scripts())


def test_every_lua_file_is_package_data() -> None:
    with open(ROOT / "pyproject.toml", "rb") as f:
        setuptools = tomllib.load(f)["tool"]["setuptools"]
    assert "stores.lua" in setuptools["packages"]
    patterns = setuptools["package-data"]["stores.lua"]
    files = lua_files()
    assert "_prelude.lua" in files and len(files) > 20
    assert all(any(fnmatch.fnmatch(name, p) for p in patterns) for name in files)


def test_a_built_script_has_nothing_left_to_fill_in() -> None:
    for name, src in build_scripts(StoreLimits(max_events_per_run=250)).items():
        for leftover in ("@generated", "--@splice", "K."):
            assert leftover not in src, (name, leftover)
        assert not re.search(r"@[A-Z_]+@", src), name  # every option filled in


def test_a_script_gets_only_the_helpers_it_uses() -> None:
    scripts = build_scripts()
    record = scripts["record"]
    for used in ("local function fenced", "local function journaled", "local function emit",
                 "local EVENTS_MAX = 10000"):  # fmt: skip
        assert used in record
    for unused in ("local function purge", "local function take", "local ALLOWED"):
        assert unused not in record
    assert "local ALLOWED" in scripts["cancel"]  # move() checks the transition table


def test_record_out_is_record_plus_its_intents() -> None:
    scripts = build_scripts()
    body = scripts["record"].rsplit("local id = ARGV[2]", 1)[1].rstrip()
    assert body.endswith("return 1")
    assert body[: -len("return 1")].strip() in scripts["record_out"]
    assert "add_intent(" in scripts["record_out"]


async def test_the_scripts_are_built_once_per_process_and_cap() -> None:
    assert build_scripts() is build_scripts()
    capped = build_scripts(StoreLimits(max_events_per_run=150))
    assert "local EVENTS_MAX = 150\n" in capped["record"]
    assert capped["record"].replace("150", "10000", 1) == build_scripts()["record"]
    before = _templates.cache_info().misses
    for _ in range(3):
        store = RedisStore(fakeredis.FakeAsyncRedis(decode_responses=True), max_events_per_run=321)
        await store.close()
    assert _templates.cache_info().misses == before


def test_the_built_scripts_are_read_only() -> None:
    scripts = build_scripts()
    with pytest.raises(TypeError):
        scripts["record"] = "return 0"  # type: ignore[index]


def test_a_built_script_names_itself_on_its_first_line() -> None:
    # Redis quotes a script by its SHA only; an error about a stuck slot move
    # names the operation from this line (stores._migrating).
    for cluster in (False, True):
        for name, src in build_scripts(cluster=cluster).items():
            assert src.split("\n", 1)[0] == f"-- steadyflow:{name}"
