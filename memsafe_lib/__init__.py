"""memsafe: reference implementation of *Before Answering: Evidence Sufficiency under
Size-Matched Memory Construction*.

The library is deliberately thin: each module holds one concept (data loading,
construction, controls, metrics, Proposition 1, ledger) so that a reader can
follow a number from a raw file to a table cell.
"""

__version__ = "0.1.0"
