"""Shared pools the personas draw their facts and their callers from: people's names, streets,
towns, phone numbers, codes. Every draw is from the `random.Random` passed in.

The names are ordinary first and last names, the towns and streets generic; phone numbers are in the
555-01xx range kept for fiction.
"""

from __future__ import annotations

import random
import string

from evertune.domain.workloads.personas.speech import house_number_spoken

FIRST_NAMES: tuple[str, ...] = tuple(
    """
    Maria James Linda Robert Aisha David Sofia Michael Priya Daniel Grace Kevin Elena Thomas Mei
    Carlos Hannah Andre Fatima Brian Chloe Omar Rachel Luis Naomi Peter Yuki Marcus Laura Samuel
    Amara Victor Julia Ethan Rosa Nathan Irene Tariq Olivia Henry Ana Jamal Claire Diego Megan Ravi
    Teresa Owen Leila Frank Ingrid Malik Beatriz Gavin Keiko Dennis Nora Hugo Patricia Wesley
    """.split()
)
LAST_NAMES: tuple[str, ...] = tuple(
    """
    Garcia Johnson Chen Okafor Patel Nguyen Smith Rossi Kowalski Haddad Martin Silva Brennan Tanaka
    Lopez Fischer Adeyemi Murphy Sato Novak Ibrahim Walker Moreau Jensen Costa Ramirez Hughes Larsen
    Morales Kim Bauer Dubois Mensah Carter Lindqvist Romero Ahmed Foster Schmidt Reyes Yamamoto
    Sullivan Hoffman Castillo Kaur Bennett Delgado Park Weber Ortiz Ferreira Gallagher Soto Hansen
    """.split()
)
#: First names the virtual agents introduce themselves with.
AGENT_NAMES: tuple[str, ...] = tuple(
    "Ava Sam Riley Jordan Nova Taylor Quinn Casey Morgan Jamie Alex Robin".split()
)
STREETS: tuple[str, ...] = tuple(
    s.replace("_", " ")
    for s in """
    Alder_Street Birch_Avenue Cedar_Lane Dogwood_Drive Elm_Street Foster_Road Grant_Avenue
    Harbor_Boulevard Juniper_Way Kingsley_Road Laurel_Street Madison_Avenue North_Main_Street
    Oak_Ridge_Drive Park_Avenue Quarry_Road Riverside_Drive Spruce_Street Terrace_Way Union_Street
    Valley_View_Road Walnut_Street Westgate_Boulevard Willow_Creek_Road
    """.split()
)
TOWNS: tuple[str, ...] = tuple(
    s.replace("_", " ")
    for s in """
    Ashford Brookfield Clearwater Dunmore Eastlake Fairview Glenwood Hillsboro Ironbridge Kingsport
    Lakewood Millbrook Northfield Oakdale Pinecrest Redmond_Falls Springvale Stonebridge Thornton
    Westbury Whitmore Yarrow_Point
    """.split()
)


_AREA_CODES = ("206", "303", "415", "503", "512", "617", "720", "971")


def first_name(rng: random.Random) -> str:
    """A first name."""
    return rng.choice(FIRST_NAMES)


def last_name(rng: random.Random) -> str:
    """A last name."""
    return rng.choice(LAST_NAMES)


def street_address(rng: random.Random) -> tuple[str, str]:
    """A house number and street, written and said: ("1420 Alder Street", "fourteen twenty Alder Street")."""
    number, street = rng.randint(12, 9800), rng.choice(STREETS)
    return f"{number} {street}", f"{house_number_spoken(number)} {street}"


def town(rng: random.Random) -> str:
    """A town."""
    return rng.choice(TOWNS)


def phone(rng: random.Random) -> str:
    """A phone number in the fictional 555-01xx range: "503-555-0142"."""
    return f"{rng.choice(_AREA_CODES)}-555-01{rng.randint(0, 99):02d}"


def code(rng: random.Random, length: int, *, letters: bool = True) -> str:
    """A reference code of `length` characters: upper-case letters (no I or O) and digits, or digits only."""
    alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789" if letters else string.digits
    return "".join(rng.choice(alphabet) for _ in range(length))


def distinct(rng: random.Random, pool: tuple[str, ...], k: int) -> list[str]:
    """`k` different items of `pool` (in the order drawn)."""
    return rng.sample(pool, k)
