"""The words dynstep reads as on or off in the environment (DYNSTEP_* flags and switches,
DYNSTEP_FLIGHT=1): one spelling for every variable.

    on_off("Yes") -> True;  on_off(" off ") -> False;  on_off("") -> False;  on_off("maybe") -> None
"""

from __future__ import annotations

ON = frozenset({"1", "true", "yes", "on"})
OFF = frozenset({"0", "false", "no", "off", ""})


def on_off(text: str) -> bool | None:
    """True or False for an on/off word (any case, spaces around it ignored); None for any other text."""
    word = text.strip().lower()
    return True if word in ON else (False if word in OFF else None)
