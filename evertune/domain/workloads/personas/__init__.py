"""Real voice conversations: agent personas (clinic, pharmacy, airline, ...) and their calls.

`PersonaConversations(lengths, PERSONAS)` is the `ConversationSource` `plan_voice` uses by default;
`PERSONAS` are the personas its agents cycle over, in order. See `source.py` for how prompts and calls
are made and `persona.py` for what a persona holds.
"""

from evertune.domain.workloads.personas import airline, clinic, pharmacy, restaurant, utility
from evertune.domain.workloads.personas.persona import Exchange, Intent, Persona
from evertune.domain.workloads.personas.source import PersonaAgent, PersonaConversations

#: The personas, in the order agents take them (agent N is PERSONAS[N % len(PERSONAS)]).
PERSONAS: tuple[Persona, ...] = (
    clinic.PERSONA,
    pharmacy.PERSONA,
    airline.PERSONA,
    utility.PERSONA,
    restaurant.PERSONA,
)

__all__ = ["PERSONAS", "Exchange", "Intent", "Persona", "PersonaAgent", "PersonaConversations"]
