"""The closed-loop demo (`evertune up --demo`, `make demo`) and its report; see docs/demo.md.

Modules: `traffic` (the traffic and its shift), `choices` (the demo's choices and service settings),
`driver` (provision, drive, watch), `panel` (what the terminal shows), `report` (markdown and
plots), `run` (all of it, from options to report).
"""
