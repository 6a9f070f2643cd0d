"""The error family shared by every layer of Kiln (lives at the bottom so every package can raise it)."""


class KilnError(Exception):
    """Base of every error Kiln raises for bad input; the message says what to do."""

    def __reduce__(self):  # errors cross process boundaries during measurement
        return (type(self), (str(self),))


class TEError(KilnError):
    """A tensor expression was built wrongly (bad dtype, shape, axis)."""


class ScheduleError(KilnError):
    """A schedule primitive was asked for something illegal."""


class LoweringError(KilnError):
    """Lowering a schedule to loop IR failed."""


class CodegenError(KilnError):
    """Loop IR could not be turned into machine code."""


class KernelArgumentError(KilnError):
    """A compiled kernel was called with arguments of the wrong shape, dtype or layout."""


class TargetError(KilnError):
    """An unknown or unusable target was requested."""


class UnsupportedOperatorError(KilnError):
    """A model uses operators Kiln does not support."""


class ModelFormatError(KilnError):
    """A model file is malformed or has shapes Kiln cannot resolve."""


class TuningDatabaseError(KilnError):
    """The tuning database is unreadable or holds incompatible records."""


class InternalError(KilnError):
    """An invariant inside Kiln broke: this is a bug in Kiln; please report it."""


class IndexOutOfRangeError(KernelArgumentError):
    """A data-dependent index (Gather's, ScatterND's, ...) lies outside the axis it indexes."""
