"""The only error types a user of dpt_ir needs to catch.

They deliberately do not subclass ValueError: pydantic wraps ValueError raised inside
validators into its own ValidationError, and a user should see our message unchanged.
"""

from __future__ import annotations


class ContractError(Exception):
    """Something the user gave is wrong: a bad graph, bad inputs, or misuse of the API.

    Raised before any kernel runs. The message names the node or input, what was
    expected and what was found.
    """


class LifecycleError(ContractError):
    """A TapePass (or Program) was used out of its lifecycle order."""


class NumericalError(Exception):
    """A non-finite or out-of-domain value was found at a status checkpoint."""
