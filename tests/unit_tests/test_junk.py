"""Junk leaves: what is not embedded."""

from __future__ import annotations

import pytest

from langchain_s2b.core.junk import is_junk


@pytest.mark.parametrize("text", ["..", "----", "1.", "  \n", "", "(2)", "* * *", "12 34", "—"])
def test_fragments_without_letters_are_junk(text: str) -> None:
    assert is_junk(text)


@pytest.mark.parametrize("text", ["a", "I.", "Rollo.", "ß", "東京", "e.g. 5", "x = 1"])
def test_any_letter_in_any_script_is_kept(text: str) -> None:
    assert not is_junk(text)
