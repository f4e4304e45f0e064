from __future__ import annotations

import datetime

import pytest

from evertune.domain.workloads.personas.speech import (
    birth_date_written,
    date_spoken,
    date_written,
    digits_spoken,
    house_number_spoken,
    money_spoken,
    money_written,
    number_words,
    ordinal_digits,
    ordinal_words,
    phone_spoken,
    time_spoken,
    time_written,
)


def test_numbers_in_words() -> None:
    said = {0: "zero", 7: "seven", 13: "thirteen", 40: "forty", 45: "forty-five", 100: "one hundred"}
    said |= {
        1250: "one thousand two hundred fifty",
        999_999: "nine hundred ninety-nine thousand nine hundred ninety-nine",
    }
    assert {n: number_words(n) for n in said} == said
    assert [ordinal_words(n) for n in (1, 2, 3, 12, 20, 21, 31)] == [
        "first", "second", "third", "twelfth", "twentieth", "twenty-first", "thirty-first"
    ]  # fmt: skip
    assert [ordinal_digits(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 31)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "31st"
    ]  # fmt: skip
    with pytest.raises(ValueError):
        number_words(1_000_000)


def test_money_times_and_dates_written_and_said() -> None:
    assert (money_written(4500), money_spoken(4500)) == ("$45", "forty-five dollars")
    assert (money_written(1250), money_spoken(1250)) == ("$12.50", "twelve dollars and fifty cents")
    assert (money_written(120000), money_spoken(101)) == ("$1,200", "one dollar and one cent")
    assert (time_written(9, 30), time_spoken(9, 30)) == ("9:30 AM", "nine thirty in the morning")
    assert (time_written(14), time_spoken(14)) == ("2 PM", "two o'clock in the afternoon")
    assert (time_written(12), time_spoken(12), time_spoken(19, 5)) == (
        "12 PM",
        "noon",
        "seven oh five in the evening",
    )
    day = datetime.date(2027, 3, 4)
    assert (date_written(day), date_spoken(day)) == ("Thursday, March 4th", "Thursday, March fourth")
    assert birth_date_written(1982, 3, 22) == "March 22nd, 1982"


def test_codes_phones_and_house_numbers_read_out() -> None:
    assert digits_spoken("K7X2-0") == "K, seven, X, two, zero"
    assert phone_spoken("503-555-0142") == "five oh three, five five five, oh one four two"
    said = {7: "seven", 521: "five twenty-one", 1032: "ten thirty-two", 9805: "ninety-eight oh five"}
    said |= {5400: "fifty-four hundred", 1420: "fourteen twenty"}
    assert {n: house_number_spoken(n) for n in said} == said
