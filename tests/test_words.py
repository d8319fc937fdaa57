"""Numbers in sentences never use scientific notation."""

from hypothesis import given
from hypothesis import strategies as st

from servesim.analysis.words import ms, number, plural


def test_examples():
    assert [number(x) for x in (3502000.4, 29.2, 0.8, 0.0012, 9.234e-10, 0.0)] == [
        "3502000", "29.2", "0.8", "0.0012", "0", "0"]
    assert number(9.234e-10, sign=True) == "+0" and number(-2.5, sign=True) == "-2.5"
    assert ms(0.0292) == "29.2 ms" and plural(1, "step") == "1 step" and plural(2000, "step") == "2,000 steps"


@given(st.floats(min_value=-1e15, max_value=1e15, allow_nan=False))
def test_never_scientific(x):
    text = number(x)
    assert "e" not in text and "inf" not in text
    assert abs(float(text) - x) <= max(abs(x) * 1e-3, 1e-6) + 0.5 * (abs(x) >= 1000)
