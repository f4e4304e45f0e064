"""A restaurant's booking line: new reservations, changes, cancellations, large parties.

The shortest persona: a small business's prompt is short, so its core is brief and its speaking
style a few lines of its own.
"""

from __future__ import annotations

import random

from evertune.domain.workloads.personas import pools
from evertune.domain.workloads.personas.persona import Exchange, Intent, Persona, Slots
from evertune.domain.workloads.personas.speech import (
    date_spoken,
    date_written,
    day_of_year,
    digits_spoken,
    money_spoken,
    money_written,
    number_words,
    time_spoken,
    time_written,
)

_NAMES = (
    "Luca's Trattoria",
    "The Copper Pot",
    "Saffron House",
    "Blue Heron Bistro",
    "Olive and Thyme",
    "Harbor Grill",
    "Casa Marisol",
    "The Larder",
)
_DISHES = (
    "roast chicken",
    "braised short rib",
    "grilled salmon",
    "mushroom risotto",
    "seared scallops",
    "lamb meatballs",
    "eggplant parmesan",
    "pork chop",
    "halibut",
    "gnocchi",
    "flank steak",
    "cauliflower steak",
)
_SIDES = (
    "with lemon potatoes",
    "over polenta",
    "with charred broccolini",
    "with wild rice and greens",
    "in brown butter and sage",
    "with romesco",
    "with herb salad",
    "with white beans and kale",
)
_ALLERGENS = ("dairy", "gluten", "nuts", "shellfish", "eggs", "no common allergens")
_PARKING = (
    ("street parking and a public lot next door", "street parking, and a public lot right next door"),
    ("valet for $12", "valet parking out front for twelve dollars"),
    ("a free lot behind the building", "a free lot behind the building, entrance on the side street"),
)
_OCCASIONS = ("a birthday", "our anniversary", "a retirement dinner", "a graduation", "a work dinner")


def _facts(rng: random.Random) -> dict[str, str]:
    deposit, cancel = rng.choice((2000, 2500)), rng.choice((1500, 2500))
    corkage = rng.choice((1500, 2000, 3000))
    room_minimum = rng.choice((80000, 120000, 150000))
    return {
        "restaurant": rng.choice(_NAMES),
        "agent": rng.choice(pools.AGENT_NAMES),
        "address": pools.street_address(rng)[0],
        "town": pools.town(rng),
        "dinner": rng.choice(("5 to 10 PM", "5 to 9:30 PM", "4:30 to 10 PM")),
        "closed_day": rng.choice(("Monday", "Tuesday")),
        "brunch": "10 AM to 2 PM",
        "max_party": str(rng.choice((6, 8))),
        "deposit": money_written(deposit),
        "deposit_spoken": money_spoken(deposit),
        "cancel_fee": money_written(cancel),
        "cancel_fee_spoken": money_spoken(cancel),
        "corkage": money_written(corkage),
        "corkage_spoken": money_spoken(corkage),
        "room_minimum": money_written(room_minimum),
        "room_minimum_spoken": money_spoken(room_minimum),
        **dict(zip(("parking", "parking_spoken"), rng.choice(_PARKING), strict=True)),
    }


_CORE = """You are {agent}, the phone host at {restaurant}, {address}, {town}. You take, change and \
cancel reservations and answer simple questions. Be friendly and brief: one or two short sentences, \
spoken, no lists or symbols, numbers in words. Confirm the name, date, time and party size before \
booking.

Rules: tables are held fifteen minutes. Parties over {max_party} need the events manager and a \
{deposit} per person deposit. Cancel at least 24 hours ahead, otherwise {cancel_fee} per person. \
Allergies go in the booking notes; the kitchen can't promise a nut-free or gluten-free kitchen.

Facts: dinner {dinner}, closed {closed_day}; weekend brunch {brunch}. Corkage {corkage} a bottle. \
Private room for up to 24, minimum spend {room_minimum}. Parking: {parking}.

Tools:
- check_availability(date, time, party_size, seating): open times within an hour; seating is \
indoor, patio or bar.
- make_reservation(name, phone, date, time, party_size, notes): returns a confirmation code.
- change_reservation(code, date, time, party_size) and cancel_reservation(code).
- transfer_to_manager(reason): for events, complaints and parties over {max_party}."""

_KNOWLEDGE = (
    "Q: Do you take walk-ins?\nA: Yes, at the bar first come, first served; tables when there is room.",
    "Q: Is there a dress code?\nA: No, come as you are.",
    "Q: Do you have vegetarian dishes?\nA: Several, and the kitchen can make most pasta dishes vegan.",
    "Q: Can we bring a cake?\nA: Yes, a {corkage} cake-cutting fee, or we add a candle to any dessert for "
    "free.",
    "Q: Is the patio open?\nA: From May to September, weather allowing; it can't be guaranteed.",
    "Q: Do you have a kids' menu?\nA: Yes, for children under twelve, and high chairs.",
    "Q: Can I order takeout?\nA: Yes, by phone during dinner hours, ready in about thirty minutes.",
    "Q: Is it wheelchair accessible?\nA: Yes, the dining room and restrooms, not the mezzanine.",
)


def _directory(rng: random.Random, facts: Slots) -> str:
    price = rng.randrange(1600, 4200, 100)
    return (
        f"- {rng.choice(_DISHES).capitalize()} {rng.choice(_SIDES)}: {money_written(price)}. "
        f"Contains {rng.choice(_ALLERGENS)}."
    )


def _caller(rng: random.Random, facts: Slots) -> dict[str, str]:
    first, last = pools.first_name(rng), pools.last_name(rng)
    party, new_party = rng.randint(2, 6), rng.randint(2, 8)
    big = rng.randint(10, 22)
    day, old_day = day_of_year(rng.randrange(365)), day_of_year(rng.randrange(365))
    hour, minute = rng.choice((17, 18, 19, 20)), rng.choice((0, 15, 30, 45))
    code = pools.code(rng, 5)
    return {
        "first": first,
        "last": last,
        "phone_caller": pools.phone(rng),
        "party": str(party),
        "party_spoken": number_words(party),
        "new_party": str(new_party),
        "new_party_spoken": number_words(new_party),
        "big": str(big),
        "big_spoken": number_words(big),
        "date": date_written(day),
        "date_spoken": date_spoken(day),
        "old_date": date_written(old_day),
        "old_date_spoken": date_spoken(old_day),
        "time": time_written(hour, minute),
        "time_spoken": time_spoken(hour, minute),
        "code": code,
        "code_spoken": digits_spoken(code),
        "occasion": rng.choice(_OCCASIONS),
        "allergy": rng.choice(("a nut allergy", "celiac", "a shellfish allergy", "is vegan")),
        "seating": rng.choice(("on the patio", "in a booth", "by the window", "somewhere quiet")),
    }


_NAME = Exchange(
    callers=(
        "It's under {first} {last}, and my number is {phone_caller}.",
        "Put it under {last}, {first} {last}. Phone is {phone_caller}.",
        "The name is {first} {last}, thanks.",
    ),
    replies=(
        "Thank you, {first}. And is there anything we should know, like allergies or an occasion?",
        "Got it, {first} {last}. Any allergies or seating preferences?",
    ),
)

_FOLLOW_UPS = (
    Exchange(
        callers=("Is there any parking near the restaurant?", "Where should we park when we get there?"),
        replies=("There's {parking_spoken}. On weekends it fills up by seven, so come a bit early.",),
    ),
    Exchange(
        callers=("Can we bring our own wine?", "What's the corkage fee if we bring a bottle?"),
        replies=(
            "You're welcome to bring wine. Corkage is {corkage_spoken} a bottle, waived if you also order "
            "one from our list.",
        ),
    ),
    Exchange(
        callers=("Do you have a kids' menu by any chance?", "Is it OK if we bring a baby?"),
        replies=("Of course. We have a kids' menu and high chairs; I'll note it on the booking.",),
    ),
    Exchange(
        callers=("Do you do brunch on Sundays too?", "What time is brunch on the weekend?"),
        replies=("Brunch is Saturday and Sunday from ten in the morning to two in the afternoon.",),
    ),
)

_CANCEL_QUESTIONS = (
    Exchange(
        callers=("Could we maybe rebook for next month instead?", "Do you have anything the week after?"),
        replies=(
            "Of course. Most weeknights next month are open; tell me a date and a time and I'll check for "
            "you.",
        ),
    ),
    Exchange(
        callers=("Will the deposit come back to my card?", "Do I get my deposit back if I cancel?"),
        replies=(
            "Yes, with a day's notice the deposit goes back to the same card within five business days.",
        ),
    ),
)

_INTENTS = (
    Intent(
        opening=Exchange(
            callers=(
                "Hi, I'd like to book a table for {party} on {date}.",
                "Hello, do you have anything for {party} people around {time} on {date}?",
                "Hi, can I make a reservation for {date}, {party} people, {seating}?",
            ),
            replies=(
                "I have {time_spoken} on {date_spoken} for {party_spoken}. What name should I put it under?",
                "Yes, {date_spoken} at {time_spoken} is open for {party_spoken}. Can I get a name and "
                "phone number?",
            ),
        ),
        details=(
            _NAME,
            Exchange(
                callers=(
                    "One of us has {allergy}.",
                    "It's for {occasion}, if you can do anything special.",
                    "Could we sit {seating}?",
                ),
                replies=(
                    "I've noted that for the kitchen and the server. Anything else before I book it?",
                    "Noted. I'll ask for a good table and let the team know.",
                ),
            ),
        ),
        confirm=Exchange(
            callers=(
                "No, that's it, go ahead and book it.",
                "Perfect, please book it for us.",
                "Yes, {time} on {date} is great.",
            ),
            replies=(
                "You're booked for {party_spoken} on {date_spoken} at {time_spoken}. Your code is "
                "{code_spoken}. We hold the table fifteen minutes.",
                "All set, {first}: {date_spoken}, {time_spoken}, {party_spoken} people. You'll get a text "
                "confirmation.",
            ),
        ),
    ),
    Intent(
        opening=Exchange(
            callers=(
                "Hi, I have a reservation on {old_date} and need to change it.",
                "Hello, can I add people to my booking? We're now {new_party}.",
                "Hi, I need to move my reservation on {old_date} to a different time.",
            ),
            replies=(
                "Sure, I can change that for you. What name is the reservation under?",
                "Happy to help. Can I have the name or the confirmation code?",
            ),
        ),
        details=(
            Exchange(
                callers=(
                    "It's under {first} {last}.",
                    "The code is {code}, under {last}.",
                    "{first} {last}, for {old_date}.",
                ),
                replies=(
                    "Found it: {old_date_spoken}, {party_spoken} people. What would you like to change?",
                    "I have your booking, {first}. What should it be instead?",
                ),
            ),
            Exchange(
                callers=(
                    "Can we make it {new_party} people at {time}?",
                    "Could we do {date} instead, same time?",
                    "Just push it to {time} please.",
                ),
                replies=(
                    "I can do {new_party_spoken} people at {time_spoken}. Shall I change it?",
                    "{date_spoken} at {time_spoken} works. Should I move it?",
                ),
            ),
        ),
        confirm=Exchange(
            callers=(
                "Yes, please change it, thank you.",
                "Great, do that please.",
                "Yes. Is it the same confirmation code?",
            ),
            replies=(
                "It's changed, and your code stays {code_spoken}. See you then.",
                "Done. You'll get an updated text confirmation.",
            ),
        ),
    ),
    Intent(
        opening=Exchange(
            callers=(
                "Hi, I need to cancel my reservation for {old_date}.",
                "Hello, this is {first} {last}, we can't make it tonight. Can you cancel our table?",
                "Hi, I'd like to cancel a booking under {last}.",
            ),
            replies=(
                "I'm sorry you can't make it. What's the name on the reservation, please?",
                "No problem at all. Can I have the name or the confirmation code?",
            ),
        ),
        details=(
            Exchange(
                callers=(
                    "It's {first} {last}, for {party}.",
                    "The confirmation code is {code}.",
                    "Under {last}. Is there a fee?",
                ),
                replies=(
                    "Found it. Since it's more than a day away, there's no fee. Shall I cancel it?",
                    "Found it. It's within a day, so the fee is {cancel_fee_spoken} per person. Still "
                    "cancel?",
                ),
            ),
        ),
        confirm=Exchange(
            callers=("Yes, please cancel it for us.", "OK, cancel it anyway, thank you.", "Yes, thanks."),
            replies=(
                "Your reservation is cancelled, and you'll get a text confirming it. We hope to see you "
                "another time.",
            ),
        ),
        follow_ups=_CANCEL_QUESTIONS,
    ),
    Intent(
        opening=Exchange(
            callers=(
                "Hi, we're planning {occasion} for about {big} people.",
                "Hello, do you have a private room for {big} guests?",
                "Hi, I want to book a big table, {big} people, on {date}.",
            ),
            replies=(
                "Lovely. For {big_spoken} guests our private room is best. Which date are you thinking of?",
                "We can host that. Parties that size book through our events manager. Which date?",
            ),
        ),
        details=(
            Exchange(
                callers=(
                    "We're thinking {date}, around {time}.",
                    "Maybe {date}? In the evening.",
                    "We're flexible, ideally a Friday evening.",
                ),
                replies=(
                    "The room is free {date_spoken}. The minimum spend is {room_minimum_spoken}, with a "
                    "deposit of {deposit_spoken} per person.",
                    "I can hold {date_spoken} for you. There's a deposit of {deposit_spoken} per person.",
                ),
            ),
        ),
        confirm=Exchange(
            callers=(
                "That sounds fine. What's next?",
                "OK, please hold it and have the manager call me.",
                "Great. Can they call me at {phone_caller}?",
            ),
            replies=(
                "I've held {date_spoken} and the events manager will call you tomorrow to settle the menu "
                "and deposit.",
            ),
        ),
    ),
)

_CLOSING = Exchange(
    callers=(
        "Thanks so much, see you then!",
        "Great, thank you very much. Bye.",
        "Perfect, thanks for your help {agent}.",
        "That's all, thanks.",
    ),
    replies=("You're welcome, {first}. Thanks for calling, and see you soon at {restaurant}!",),
)

PERSONA = Persona(
    key="restaurant",
    relative_length=0.4,
    facts=_facts,
    core=_CORE,
    knowledge=_KNOWLEDGE,
    directory_title="# Menu",
    directory=_directory,
    greetings=(
        "Thank you for calling {restaurant}, this is {agent}. Are you calling to book a table?",
        "{restaurant}, this is {agent}. How can I help?",
        "{restaurant}, how can I help?",
    ),
    caller=_caller,
    intents=_INTENTS,
    follow_ups=_FOLLOW_UPS,
    closing=_CLOSING,
)
