"""gpuplan/datafiles.py: data files parsed once and then read from a marshal cache."""

import os

from gpuplan import datafiles as compiled


def test_a_data_file_is_parsed_once_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPLAN_CACHE_DIR", str(tmp_path))
    first = compiled.load_data("gpus.toml")
    written = os.listdir(tmp_path)
    assert len(written) == 1 and written[0].startswith("gpus.toml.")

    def no_parse(path):
        raise AssertionError(f"parsed {path} again")

    monkeypatch.setattr(compiled, "_parse", no_parse)
    assert compiled.load_data("gpus.toml") == first


def test_the_cache_can_be_off_or_unwritable(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPLAN_CACHE_DIR", "off")
    parsed = compiled.load_data("precisions.toml")
    assert parsed["precision"]
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    monkeypatch.setenv("GPUPLAN_CACHE_DIR", str(blocked / "cache"))
    assert compiled.load_data("precisions.toml") == parsed


def test_a_corrupt_cache_entry_is_parsed_again(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPLAN_CACHE_DIR", str(tmp_path))
    good = compiled.load_data("prices.toml")
    (entry,) = os.listdir(tmp_path)
    (tmp_path / entry).write_bytes(b"\x00garbage")
    assert compiled.load_data("prices.toml") == good
