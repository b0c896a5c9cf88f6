"""memsafe: reference implementation of *Before Answering: Evidence Sufficiency under
Size-Matched Memory Construction*.

Subpackages follow the data: raw files (``data``) -> memory variants (``variants``) -> unit
encodings (``encodings``) -> estimators -> evaluation -> reporting, with pure maths in
``measures`` and the gate and command line on top; one :class:`~memsafe_lib.config.ScaleConfig`
is resolved where a run starts and passed down. Each module holds one concept, so a reader
can follow a number from a raw file to a table cell (README, "Layout").
"""

__version__ = "0.1.0"
