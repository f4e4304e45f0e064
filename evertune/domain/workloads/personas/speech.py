"""Numbers, money, times, dates and codes in two forms: as a speech-to-text transcript writes them
(what a caller's turn looks like: "$45", "9:30 AM", "March 4th") and as a voice agent says them
(its replies spell numbers out: "forty-five dollars", "nine thirty in the morning").
"""

from __future__ import annotations

import datetime

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_ORDINAL_ONES = (
    "zeroth first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth "
    "fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth"
).split()
_ORDINAL_TENS = "_ _ twentieth thirtieth fortieth fiftieth sixtieth seventieth eightieth ninetieth".split()
_MONTHS = ("January February March April May June July August September October November December").split()
_WEEKDAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
#: The year the plans' dates fall in (a fixed calendar, so weekdays and dates agree).
YEAR = 2027


def number_words(n: int) -> str:
    """`n` (0 to 999,999) in words: 7 -> "seven", 45 -> "forty-five", 1250 -> "one thousand two
    hundred fifty"."""
    if not 0 <= n < 1_000_000:
        raise ValueError(f"number_words takes 0 to 999,999, not {n}")
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return f"{_ONES[hundreds]} hundred" + (f" {number_words(rest)}" if rest else "")
    thousands, rest = divmod(n, 1000)
    return f"{number_words(thousands)} thousand" + (f" {number_words(rest)}" if rest else "")


def house_number_spoken(n: int) -> str:
    """A house or suite number as said, in pairs of digits: 7 -> "seven", 521 -> "five twenty-one",
    1032 -> "ten thirty-two", 9805 -> "ninety-eight oh five", 5400 -> "fifty-four hundred"."""
    if not 0 <= n < 10000:
        raise ValueError(f"house_number_spoken takes 0 to 9,999, not {n}")
    if n < 100:
        return number_words(n)
    high, low = divmod(n, 100)
    if low == 0:
        return f"{number_words(high)} hundred"
    return f"{number_words(high)} {number_words(low) if low >= 10 else 'oh ' + number_words(low)}"


def ordinal_words(n: int) -> str:
    """`n` (1 to 99) as a spoken ordinal: 1 -> "first", 23 -> "twenty-third"."""
    if not 1 <= n < 100:
        raise ValueError(f"ordinal_words takes 1 to 99, not {n}")
    if n < 20:
        return _ORDINAL_ONES[n]
    tens, ones = divmod(n, 10)
    return _TENS[tens] + f"-{_ORDINAL_ONES[ones]}" if ones else _ORDINAL_TENS[tens]


def ordinal_digits(n: int) -> str:
    """`n` as a transcript writes an ordinal: 1 -> "1st", 12 -> "12th", 23 -> "23rd"."""
    suffix = "th" if 10 <= n % 100 < 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def money_written(cents: int) -> str:
    """An amount as written: 4500 -> "$45", 1250 -> "$12.50"."""
    dollars, rest = divmod(cents, 100)
    return f"${dollars:,}" + (f".{rest:02d}" if rest else "")


def money_spoken(cents: int) -> str:
    """An amount as said: 4500 -> "forty-five dollars", 1250 -> "twelve dollars and fifty cents"."""
    dollars, rest = divmod(cents, 100)
    said = f"{number_words(dollars)} dollar{'s' if dollars != 1 else ''}"
    if rest:
        said += f" and {number_words(rest)} cent{'s' if rest != 1 else ''}"
    return said


def time_written(hour: int, minute: int = 0) -> str:
    """A time of day (24-hour `hour`) as written: (9, 30) -> "9:30 AM", (14, 0) -> "2 PM"."""
    half = "AM" if hour < 12 else "PM"
    clock = hour % 12 or 12
    return f"{clock}:{minute:02d} {half}" if minute else f"{clock} {half}"


def time_spoken(hour: int, minute: int = 0) -> str:
    """A time of day as said: (9, 30) -> "nine thirty in the morning", (12, 0) -> "noon",
    (19, 5) -> "seven oh five in the evening"."""
    if (hour, minute) == (12, 0):
        return "noon"
    clock = number_words(hour % 12 or 12)
    if minute == 0:
        said = f"{clock} o'clock"
    elif minute < 10:
        said = f"{clock} oh {number_words(minute)}"
    else:
        said = f"{clock} {number_words(minute)}"
    part = "in the morning" if hour < 12 else "in the afternoon" if hour < 17 else "in the evening"
    return f"{said} {part}"


def day_of_year(index: int) -> datetime.date:
    """The `index`-th day (0-based, wrapping) of the plans' year."""
    return datetime.date(YEAR, 1, 1) + datetime.timedelta(days=index % 365)


def date_written(day: datetime.date) -> str:
    """A date as a transcript writes it: "Tuesday, March 4th"."""
    return f"{_WEEKDAYS[day.weekday()]}, {_MONTHS[day.month - 1]} {ordinal_digits(day.day)}"


def date_spoken(day: datetime.date) -> str:
    """A date as said: "Tuesday, March fourth"."""
    return f"{_WEEKDAYS[day.weekday()]}, {_MONTHS[day.month - 1]} {ordinal_words(day.day)}"


def weekday(day: datetime.date) -> str:
    """The day's name: "Tuesday"."""
    return _WEEKDAYS[day.weekday()]


def birth_date_written(year: int, month: int, day: int) -> str:
    """A date of birth as a transcript writes it: "March 4th, 1982"."""
    return f"{_MONTHS[month - 1]} {ordinal_digits(day)}, {year}"


def digits_spoken(text: str) -> str:
    """A code or number read out one character at a time: "K7X2" -> "K, seven, X, two";
    a zero is "zero", a dash or space is a pause (a comma)."""
    said: list[str] = []
    for char in text:
        if char.isdigit():
            said.append(_ONES[int(char)])
        elif char.isalpha():
            said.append(char.upper())
    return ", ".join(said)


def phone_spoken(phone: str) -> str:
    """A phone number as said, in its groups: "503-555-0142" -> "five oh three, five five five,
    oh one four two"."""
    groups = phone.split("-")
    return ", ".join(" ".join("oh" if d == "0" else _ONES[int(d)] for d in group) for group in groups)
