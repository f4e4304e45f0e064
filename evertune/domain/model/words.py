"""The vocabulary of evertune's generated English: common words grouped by part of speech.

Written by hand for evertune (no external word list). It leans towards what a voice agent talks
about (orders, appointments, accounts, deliveries, travel, clinics, restaurants) so generated system
prompts and caller utterances read like that traffic. The corpus (`corpus.py`) combines these words
with a small grammar; the tokenizer is trained on that corpus.
"""

from __future__ import annotations


def _words(text: str) -> tuple[str, ...]:
    """The whitespace-separated words of `text`, in order, without repeats."""
    return tuple(dict.fromkeys(text.split()))


#: Countable nouns (singular). Plurals come from `plural`.
NOUNS = _words(
    """
    account address agent airport answer apartment appointment area arrival article
    assistant baby bag balance bank bed bike bill birthday board boat book booking bottle
    box branch bread breakfast bridge brother budget building bus business button cabin
    cake call car card case cash center chair change charge check child choice city claim
    class client clinic coat code coffee college company computer condition contract
    corner cost country couple course court cousin cup customer dad date daughter day deal
    delivery dentist department deposit desk detail device doctor document dog dollar door
    driver dress email engine entry error event example exchange family fee field file
    film flight floor flower form friend game garden gate gift glass goal group guest
    guide hall hand hat head heater hotel hour house idea invoice island issue item job
    key kitchen lab lamp laptop lesson letter level library light limit line link list
    loan lock lunch machine manager map market meal meeting member menu message method
    minute mistake mom moment month morning mother name neighbor network note notice number
    nurse office option order owner package page pair parent park partner party password
    patient payment pen person phone photo piece pill place plan plane plant plate player
    pocket policy price problem product program project question queue reason receipt
    record refund region report request reservation restaurant result review ride ring
    road room route rule sale schedule school screen seat second section service session
    shift ship shirt shoe shop side sign signal sister site size skill slot son song
    source space speaker station step store story street student subject suite summary
    supplier system table tablet task taxi teacher team test text ticket time tip title
    total tour town track train transfer trip truck unit update user van version video
    view visit voice wallet watch way week window word worker year
    """
)

#: Uncountable or mass nouns, used without "a".
MASS_NOUNS = _words(
    """
    advice baggage coverage data equipment feedback food furniture help information
    insurance luggage mail medicine money music news paperwork parking power rain
    support traffic water weather work
    """
)

#: Irregular plurals; every other noun takes the regular rule.
IRREGULAR_PLURALS = {
    "child": "children",
    "person": "people",
    "man": "men",
    "woman": "women",
    "foot": "feet",
    "tooth": "teeth",
    "wife": "wives",
    "knife": "knives",
    "shelf": "shelves",
    "life": "lives",
}

#: Transitive verbs (base form). Inflections come from `third_person`, `past`, `participle`, `gerund`.
VERBS = _words(
    """
    accept add answer arrange ask book bring build buy call cancel carry change charge
    check choose clean close collect confirm contact cover create deliver describe design
    discuss drive drop email enjoy enter explain fill find finish fix follow forward get
    give handle help hold keep leave lend lose love make manage mention miss move need
    offer open order organize pack pay pick place plan prefer prepare print protect
    provide reach read receive recommend remember remove rent repair repeat replace report
    request reschedule reserve return review save schedule see sell send set share ship
    show sign sort spell start stop submit support take teach tell track transfer try
    update upgrade use verify visit want wash watch write
    """
)

#: Intransitive verbs (base form), for sentences without an object.
INTRANSITIVE_VERBS = _words(
    """
    agree apply arrive begin come depart happen land leave listen matter open close
    return sleep smile speak stay talk wait work worry
    """
)

#: Irregular verbs: base -> (past, past participle).
IRREGULAR_VERBS: dict[str, tuple[str, str]] = {
    "begin": ("began", "begun"),
    "bring": ("brought", "brought"),
    "build": ("built", "built"),
    "buy": ("bought", "bought"),
    "choose": ("chose", "chosen"),
    "come": ("came", "come"),
    "drive": ("drove", "driven"),
    "find": ("found", "found"),
    "get": ("got", "gotten"),
    "give": ("gave", "given"),
    "hold": ("held", "held"),
    "keep": ("kept", "kept"),
    "leave": ("left", "left"),
    "lend": ("lent", "lent"),
    "lose": ("lost", "lost"),
    "make": ("made", "made"),
    "pay": ("paid", "paid"),
    "read": ("read", "read"),
    "see": ("saw", "seen"),
    "sell": ("sold", "sold"),
    "send": ("sent", "sent"),
    "set": ("set", "set"),
    "show": ("showed", "shown"),
    "sleep": ("slept", "slept"),
    "speak": ("spoke", "spoken"),
    "take": ("took", "taken"),
    "teach": ("taught", "taught"),
    "tell": ("told", "told"),
    "write": ("wrote", "written"),
}

#: Verbs whose final consonant doubles before -ed and -ing.
DOUBLING_VERBS = frozenset({"drop", "plan", "ship", "stop", "submit", "begin", "forget", "prefer"})

#: Adjectives.
ADJECTIVES = _words(
    """
    able active actual annual available basic big black blue brief broken busy careful
    cheap clean clear close cold common complete correct current daily dark dead direct
    early easy empty entire exact expensive extra fair fast final fine first formal free
    fresh friendly full general glad good great green happy hard heavy helpful high hot
    huge important international late light little local long low main major minor
    missing modern monthly new next nice normal old online open ordinary original other
    overnight personal pleasant polite popular possible premium previous private proper
    public quick quiet ready real recent red regular reliable remote right safe same
    secure separate serious short simple single slow small soft special standard strong
    sure sweet urgent usual valid warm weekly white whole wide wrong young
    """
)

#: Adverbs that can end or start a clause.
ADVERBS = _words(
    """
    again already always carefully clearly daily early exactly finally first here later
    maybe now often only quickly quietly really recently soon still today together
    tomorrow tonight usually yesterday
    """
)

#: Adverbs that go before a verb ("I usually pay").
FREQUENCY_ADVERBS = _words("always usually often sometimes never rarely already just still also")

#: Prepositions that take a noun phrase.
PREPOSITIONS = _words(
    """
    about above across after against along around at before behind below beside between
    by during for from in inside into near of off on outside over through to under until
    with within without
    """
)

#: Determiners for singular countable nouns.
SINGULAR_DETERMINERS = _words("a the this that my your our their his her every one another each")

#: Determiners for plural nouns.
PLURAL_DETERMINERS = _words("the these those my your our their some many few two three several all")

#: Subject pronouns with their verb person: True when the verb takes -s ("she books").
SUBJECT_PRONOUNS: tuple[tuple[str, bool], ...] = (
    ("I", False),
    ("you", False),
    ("we", False),
    ("they", False),
    ("he", True),
    ("she", True),
    ("it", True),
)

#: Object pronouns.
OBJECT_PRONOUNS = _words("me you him her it us them")

#: Given names, for people in examples and conversations.
NAMES = _words(
    """
    Adam Alice Amir Ana Ben Carlos Chen Claire Daniel David Elena Emma Fatima Grace Hannah
    Ivan James Jin Julia Kate Laura Leo Lucas Maria Mark Maya Mia Nina Noah Omar Paul
    Priya Rosa Ryan Sam Sara Sofia Tom Victor Yuki Zoe
    """
)

#: Places (proper nouns).
PLACES = _words(
    """
    Austin Berlin Boston Chicago Dallas Denver Dublin Houston Lagos Lisbon London Madrid
    Miami Milan Mumbai Oslo Paris Phoenix Portland Rome Seattle Sydney Tokyo Toronto
    Vienna
    """
)

#: Days of the week.
DAYS = _words("Monday Tuesday Wednesday Thursday Friday Saturday Sunday")

#: Months.
MONTHS = _words("January February March April May June July August September October November December")

#: Coordinating and subordinating conjunctions that join two clauses.
CONJUNCTIONS = _words("and but so because although while when if unless since")

#: What a caller says before the point ("Yes, ...").
INTERJECTIONS = _words("Yes No Okay Sure Hi Hello Well Right Thanks Sorry Actually Um")

#: Question words with the auxiliary they take before a subject.
QUESTION_WORDS = _words("when where why how what")

#: Modal verbs.
MODALS = _words("can could should will would must might may")

#: Adjectives that make an adverb with -ly ("quick" -> "quickly"); see `corpus.adverb_of`.
LY_ADJECTIVES = _words(
    """
    actual basic brief careful cheap clear complete correct current direct easy exact fair
    final formal free fresh full general glad happy heavy high late light local main
    modern nice normal original personal polite possible previous private proper public
    quick quiet real recent regular reliable remote safe secure separate serious short
    simple slow soft special strong sure usual warm wide wrong
    """
)

#: Short adjectives with -er and -est forms ("cheap" -> "cheaper", "cheapest").
COMPARABLE_ADJECTIVES = _words(
    """
    big busy cheap clean clear close cold dark early easy fast fine fresh full great happy
    hard heavy high hot late light long low new nice quick quiet safe short simple slow
    small soft strong sweet warm wide young
    """
)

#: Adjectives that take "un-" ("available" -> "unavailable").
UN_ADJECTIVES = _words(
    """
    available clear common complete correct easy fair friendly happy helpful important
    usual popular pleasant safe secure sure valid able known paid signed
    """
)

#: Words that make an adjective stronger or weaker ("very", "a bit").
DEGREE_WORDS = ("very", "really", "quite", "too", "so", "a bit", "pretty", "rather", "fairly", "extremely")

#: Linking verbs, present singular / present plural / past singular / past plural.
LINKING_VERBS: tuple[tuple[str, str, str, str], ...] = (
    ("is", "are", "was", "were"),
    ("seems", "seem", "seemed", "seemed"),
    ("looks", "look", "looked", "looked"),
    ("feels", "feel", "felt", "felt"),
    ("stays", "stay", "stayed", "stayed"),
    ("sounds", "sound", "sounded", "sounded"),
)
